#include "lm/model.h"

#include <algorithm>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "lm/hf.h"
#include "lm/hf_export.h"
#include "lm/minitron.h"

namespace pare::lm {

namespace {

bool is_gguf_path(const std::string& path) {
  return ends_with(path, ".gguf") && file_exists(path);
}

constexpr const char* kConfigKey = "pare.lm.config";
constexpr const char* kTokenizerKey = "pare.lm.tokenizer";

// A language model pare wrote as ONNX: the graph as it is, the config and tokenizer from its metadata.
LmModel load_onnx_lm(const std::string& path, const BuildOptions& opts) {
  PARE_CHECK(!opts.kv_cache, path, ": an ONNX language model has no KV-cache graph to generate with (give the "
             "hf:DIR or gguf:FILE it was made from)");
  LmModel m;
  m.graph = core::load_onnx(path);
  const auto config = m.graph.metadata.find(kConfigKey);
  PARE_CHECK(config != m.graph.metadata.end(), path, ": no '", kConfigKey, "' in its metadata, so no language model "
             "(pare export --target onnx and pare quantize of hf:DIR or gguf:FILE write it)");
  m.config = parse_hf_config_text(config->second, path + " (metadata " + kConfigKey + ")");
  const auto tok = m.graph.metadata.find(kTokenizerKey);
  if (tok != m.graph.metadata.end())
    m.tok = std::make_shared<const Tokenizer>(
        Tokenizer::from_json_text(tok->second, path + " (metadata " + kTokenizerKey + ")"));
  return m;
}

}  // namespace

bool is_lm_spec(const std::string& spec) {
  return spec.rfind("hf:", 0) == 0 || spec.rfind("gguf:", 0) == 0 || is_hf_dir(spec) || is_gguf_path(spec);
}

LmModel keep_layers(const LmModel& m, const std::vector<int64_t>& keep, const std::string& what,
                    const BuildOptions& opts) {
  PARE_CHECK(!keep.empty(), what, ": keep at least one layer");
  Keep k;
  k.layers = keep;
  return slice(m, k, what, opts);
}

LmModel rebuild(const LmModel& m, const BuildOptions& opts, const std::string& what) {
  return slice(m, Keep{}, what, opts);
}

LmModel load_lm(const std::string& spec, const BuildOptions& opts) {
  LmModel m = [&] {
    if (spec.rfind("hf:", 0) == 0) return load_hf(spec.substr(3), opts);
    if (spec.rfind("gguf:", 0) == 0) return load_gguf(spec.substr(5), opts);
    if (is_gguf_path(spec)) return load_gguf(spec, opts);
    if (ends_with(spec, ".onnx") && file_exists(spec))
      return load_onnx_lm(spec, opts);
    PARE_CHECK(is_hf_dir(spec), "'", spec, "' is no language model (expected hf:DIR, gguf:FILE, a folder holding "
               "config.json, a .gguf file, or an .onnx file pare export or pare quantize wrote of one)");
    return load_hf(spec, opts);
  }();
  if (opts.dtype) m.config.dtype = core::dtype_name(*opts.dtype);  // the type the graph was built in
  return m;
}

namespace {

// The block an initializer belongs to, from its Hugging Face name.
std::string block_of(const LmConfig& c, const std::string& name) {
  for (int64_t i = c.layers - 1; i >= 0; --i)
    for (const char* prefix : {".layers.", ".h."}) {
      const std::string tag = prefix + std::to_string(i) + ".";
      const size_t at = name.find(tag);
      if (at == std::string::npos) continue;
      const std::string rest = name.substr(at + tag.size());
      const std::string part = rest.find("attn") != std::string::npos ? "attention"
                               : rest.find("mlp") != std::string::npos ? "mlp"
                                                                       : "norms";
      return "layer " + std::to_string(i) + " " + part;
    }
  if (name.rfind("rotary.", 0) == 0) return "rotary tables";
  if (name.find("embed") != std::string::npos || name.find("wte") != std::string::npos ||
      name.find("wpe") != std::string::npos)
    return "embedding";
  if (name.find("lm_head") != std::string::npos) return "head";
  if (name.find("norm") != std::string::npos || name.find("ln_f") != std::string::npos) return "final norm";
  return "other";
}

}  // namespace

nlohmann::json summarize(const LmModel& m) {
  const LmConfig& c = m.config;
  nlohmann::json blocks = nlohmann::json::object();
  int64_t params = 0, bytes = 0;
  std::vector<std::string> order;
  for (const auto& [name, t] : m.graph.initializers) {
    if (name.size() > 2 && name.compare(name.size() - 2, 2, ".T") == 0) continue;  // the tied head's view
    if (!at::isFloatingType(t.scalar_type()) || t.numel() <= 1) continue;          // shape constants, scalars
    const std::string b = block_of(c, name);
    if (!blocks.contains(b)) blocks[b] = {{"parameters", 0}, {"bytes", 0}};
    if (b != "rotary tables") {
      blocks[b]["parameters"] = blocks[b]["parameters"].get<int64_t>() + t.numel();
      params += t.numel();
    }
    blocks[b]["bytes"] = blocks[b]["bytes"].get<int64_t>() + static_cast<int64_t>(t.nbytes());
    bytes += static_cast<int64_t>(t.nbytes());
  }
  return {{"architecture", c.family->architecture}, {"gguf_architecture", c.family->gguf_arch},
          {"vocab_size", c.vocab}, {"hidden_size", c.hidden}, {"layers", c.layers}, {"heads", c.heads},
          {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}, {"intermediate_size", c.intermediate},
          {"max_positions", c.max_positions}, {"tied_embeddings", c.tie_embeddings}, {"dtype", c.dtype},
          {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps}, {"bos", c.bos}, {"eos", c.eos},
          {"parameters", params}, {"bytes", bytes}, {"blocks", blocks}, {"tokenizer", m.tokenizer}};
}

std::string summary_text(const nlohmann::json& s) {
  std::ostringstream os;
  os << s["architecture"].get<std::string>() << " (GGUF " << s["gguf_architecture"].get<std::string>() << "), "
     << s["dtype"].get<std::string>() << "\n"
     << "  vocabulary " << s["vocab_size"] << ", hidden " << s["hidden_size"] << ", " << s["layers"] << " layers, "
     << s["heads"] << " heads (" << s["kv_heads"] << " KV) of " << s["head_dim"] << ", MLP " << s["intermediate_size"]
     << ", context " << s["max_positions"] << (s["tied_embeddings"].get<bool>() ? ", tied embeddings" : "") << "\n"
     << "  parameters " << s["parameters"] << ", bytes " << s["bytes"] << "\n"
     << "  tokenizer " << (s["tokenizer"].get<std::string>().empty() ? "(none)" : s["tokenizer"].get<std::string>())
     << "\nblock                     parameters        bytes\n";
  for (const auto& [block, v] : s["blocks"].items()) {
    char line[128];
    std::snprintf(line, sizeof line, "%-24s %12lld %12lld\n", block.c_str(),
                  static_cast<long long>(v["parameters"].get<int64_t>()), static_cast<long long>(v["bytes"].get<int64_t>()));
    os << line;
  }
  return os.str();
}

std::map<std::string, std::string> onnx_metadata(const LmModel& m) {
  std::map<std::string, std::string> out{{kConfigKey, hf_config_json(m.config)}};
  if (m.tok) out[kTokenizerKey] = m.tokenizer.empty() ? tokenizer_json(m.tok->model()) : read_file(m.tokenizer);
  return out;
}

void register_model_sources() {
  core::register_model_source(
      "hf", [](const std::string& dir, uint64_t) { return load_hf(dir).graph; }, is_hf_dir);
  core::register_model_source(
      "gguf", [](const std::string& path, uint64_t) { return load_gguf(path).graph; }, is_gguf_path);
}

}  // namespace pare::lm
