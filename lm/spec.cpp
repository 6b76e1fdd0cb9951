#include "lm/spec.h"

#include <ATen/CPUGeneratorImpl.h>

#include <map>

#include "core/error.h"

namespace pare::lm {

bool is_new_lm_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return false;
  const Family* f = find_family(spec.substr(0, colon));
  return f && spec.substr(0, colon) == f->model_type;
}

LmConfig parse_lm_spec(const std::string& spec, int64_t vocab) {
  const size_t colon = spec.find(':');
  PARE_CHECK(is_new_lm_spec(spec), "'", spec, "' is no language model spec (llama:, mistral:, qwen2:, qwen3:, gpt2:)");
  std::map<std::string, std::string> kv;
  for (size_t at = colon + 1; at < spec.size();) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    const size_t eq = item.find('=');
    PARE_CHECK(eq != std::string::npos && eq > 0, "'", spec, "': '", item, "' is not KEY=VALUE");
    kv[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 1;
  }
  auto num = [&](const char* key, double def) -> double {
    auto it = kv.find(key);
    if (it == kv.end()) return def;
    const std::string v = it->second;
    kv.erase(it);
    size_t used = 0;
    double d = 0;
    try {
      d = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PARE_CHECK(used == v.size() && !v.empty(), "'", spec, "': ", key, "=", v, " is not a number");
    return d;
  };
  LmConfig c;
  c.family = find_family(spec.substr(0, colon));
  c.layers = static_cast<int64_t>(num("layers", 4));
  c.hidden = static_cast<int64_t>(num("dim", 256));
  c.heads = static_cast<int64_t>(num("heads", 4));
  c.kv_heads = static_cast<int64_t>(num("kv-heads", static_cast<double>(c.heads)));
  c.head_dim = static_cast<int64_t>(num("head-dim", c.heads > 0 ? static_cast<double>(c.hidden / c.heads) : 0));
  const bool swiglu = c.family->mlp == Mlp::kSwiGlu;
  c.intermediate = static_cast<int64_t>(num("ff", swiglu ? 8.0 * c.hidden / 3 : 4.0 * c.hidden));
  c.max_positions = static_cast<int64_t>(num("ctx", 256));
  c.vocab = static_cast<int64_t>(num("vocab", static_cast<double>(vocab)));
  c.rope_theta = num("theta", 10000);
  c.norm_eps = num("eps", c.family->norm == Norm::kRms ? 1e-6 : 1e-5);
  c.tie_embeddings = num("tie", c.family->positions == Positions::kLearned ? 1 : 0) != 0;
  PARE_CHECK(kv.empty(), "'", spec, "': unknown key '", kv.begin()->first,
             "' (layers, dim, heads, kv-heads, head-dim, ff, ctx, vocab, theta, eps, tie)");
  PARE_CHECK(c.family->positions == Positions::kRope || c.tie_embeddings, "'", spec, "': gpt2 ties its head");
  c.validate("'" + spec + "'");
  PARE_CHECK(c.parameter_count() <= 2'000'000'000, "'", spec, "' asks for ", c.parameter_count(),
             " parameters; pare makes at most 2e9 this way");
  return c;
}

LmModel init_model(const LmConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  BuildOptions opts;
  opts.dtype = at::kFloat;
  opts.init = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias) return at::zeros(shape);
    if (shape.size() == 1) return at::ones(shape);  // norm scales
    return at::normal(0.0, 0.02, shape, gen);
  };
  LmModel m;
  m.config = c;
  m.config.dtype = "float32";
  m.graph = build_graph(m.config, {}, opts, "new " + std::string(c.family->model_type));
  return m;
}

LmModel new_model(const std::string& spec, std::shared_ptr<const Tokenizer> tok, const std::string& tokenizer_path,
                  uint64_t seed, int64_t vocab) {
  LmModel m = init_model(parse_lm_spec(spec, vocab > 0 ? vocab : tok->vocab_size()), seed);
  m.config.bos = tok->bos_id(), m.config.eos = tok->eos_id(), m.config.pad = tok->pad_id();
  m.tok = std::move(tok);
  m.tokenizer = tokenizer_path;
  return m;
}

}  // namespace pare::lm
