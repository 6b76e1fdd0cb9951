#include "lm/arch.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::lm {

namespace {

using json = nlohmann::json;

constexpr TensorNames kLlamaNames = {
    "model.embed_tokens", "", "model.layers.{i}.input_layernorm",
    "model.layers.{i}.self_attn.q_proj", "model.layers.{i}.self_attn.k_proj", "model.layers.{i}.self_attn.v_proj", "",
    "model.layers.{i}.self_attn.o_proj", "", "",
    "model.layers.{i}.post_attention_layernorm", "model.layers.{i}.mlp.gate_proj", "model.layers.{i}.mlp.up_proj",
    "model.layers.{i}.mlp.down_proj", "model.norm", "lm_head"};

constexpr TensorNames qwen3_names() {
  TensorNames n = kLlamaNames;
  n.q_norm = "model.layers.{i}.self_attn.q_norm";
  n.k_norm = "model.layers.{i}.self_attn.k_norm";
  return n;
}

constexpr TensorNames kGpt2Names = {
    "transformer.wte", "transformer.wpe", "transformer.h.{i}.ln_1", "", "", "", "transformer.h.{i}.attn.c_attn",
    "transformer.h.{i}.attn.c_proj", "", "", "transformer.h.{i}.ln_2", "", "transformer.h.{i}.mlp.c_fc",
    "transformer.h.{i}.mlp.c_proj", "transformer.ln_f", "lm_head"};

constexpr TensorNames kGgufNames = {
    "token_embd", "position_embd", "blk.{i}.attn_norm", "blk.{i}.attn_q", "blk.{i}.attn_k", "blk.{i}.attn_v",
    "blk.{i}.attn_qkv", "blk.{i}.attn_output", "blk.{i}.attn_q_norm", "blk.{i}.attn_k_norm", "blk.{i}.ffn_norm",
    "blk.{i}.ffn_gate", "blk.{i}.ffn_up", "blk.{i}.ffn_down", "output_norm", "output"};

// Every role of TensorNames, to walk two columns side by side.
constexpr const char* TensorNames::*kRoles[] = {
    &TensorNames::embed, &TensorNames::positions, &TensorNames::attn_norm, &TensorNames::q, &TensorNames::k,
    &TensorNames::v, &TensorNames::qkv, &TensorNames::o, &TensorNames::q_norm, &TensorNames::k_norm,
    &TensorNames::mlp_norm, &TensorNames::gate, &TensorNames::up, &TensorNames::down, &TensorNames::final_norm,
    &TensorNames::lm_head};

// Matches `name` against a pattern with "{i}"; the index goes to `layer`.
bool match_role(const std::string& pattern, const std::string& name, std::string& layer) {
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return pattern == name;
  const std::string head = pattern.substr(0, at), tail = pattern.substr(at + 3);
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  layer = name.substr(head.size(), name.size() - head.size() - tail.size());
  return !layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos;
}

// Keys every family may carry that change nothing pare computes.
const std::set<std::string> kHarmless = {
    "architectures", "model_type", "transformers_version", "initializer_range", "use_cache", "_name_or_path",
    "attention_dropout", "output_attentions", "output_hidden_states", "return_dict", "is_llama_config",
    "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype", "tie_word_embeddings", "vocab_size"};
const std::set<std::string> kLlamaKeys = {
    "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings", "intermediate_size",
    "num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "head_dim",
    "attention_bias", "mlp_bias", "hidden_act", "pretraining_tp", "rope_interleaved", "sliding_window",
    "use_sliding_window", "max_window_layers", "layer_types"};
const std::set<std::string> kGpt2Keys = {
    "n_embd", "n_layer", "n_head", "n_positions", "n_ctx", "n_inner", "layer_norm_epsilon", "activation_function",
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_activation", "summary_first_dropout", "summary_proj_to_labels",
    "summary_type", "summary_use_proj", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn", "add_cross_attention", "task_specific_params"};

// Typed access with errors naming the file and key.
struct Reader {
  const json& j;
  const std::string& path;
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const char* key, int64_t def = -1) const {
    if (!has(key)) {
      PARE_CHECK(def >= 0, path, ": config key '", key, "' is missing");
      return def;
    }
    PARE_CHECK(j[key].is_number_integer(), path, ": config key '", key, "' must be an integer, got ", j[key].dump());
    return j[key].get<int64_t>();
  }
  double number(const json& obj, const char* key, double def) const {
    if (!obj.contains(key) || obj[key].is_null()) return def;
    PARE_CHECK(obj[key].is_number(), path, ": config key '", key, "' must be a number, got ", obj[key].dump());
    return obj[key].get<double>();
  }
  bool flag(const char* key, bool def) const {
    if (!has(key)) return def;
    PARE_CHECK(j[key].is_boolean(), path, ": config key '", key, "' must be true or false, got ", j[key].dump());
    return j[key].get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    PARE_CHECK(j[key].is_string(), path, ": config key '", key, "' must be a string, got ", j[key].dump());
    return j[key].get<std::string>();
  }
  void require(bool ok, const char* key, const std::string& what) const {
    PARE_CHECK(ok, path, ": config key '", key, "' is ", j.contains(key) ? j[key].dump() : "missing",
               ", which pare does not support (", what, ")");
  }
};

// Token ids may be an integer or a list (the first is used).
int64_t token_id(const Reader& r, const char* key) {
  if (!r.has(key)) return -1;
  const json& v = r.j[key];
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  PARE_CHECK(v.is_number_integer(), r.path, ": config key '", key, "' must be a token id, got ", v.dump());
  return v.get<int64_t>();
}

// rope_theta and rope_scaling, at the top level (transformers 4) or in rope_parameters (5).
void read_rope(const Reader& r, LmConfig& c) {
  const json none = json::object();
  const json& params = r.has("rope_parameters") ? r.j["rope_parameters"] : r.has("rope_scaling") ? r.j["rope_scaling"] : none;
  const char* key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  PARE_CHECK(params.is_object(), r.path, ": config key '", key, "' must be an object, got ", params.dump());
  c.rope_theta = r.number(params, "rope_theta", r.number(r.j, "rope_theta", 10000));
  std::string type = "default";
  if (params.contains("rope_type") && params["rope_type"].is_string()) type = params["rope_type"];
  else if (params.contains("type") && params["type"].is_string()) type = params["type"];
  r.require(type == "default" || type == "llama3", key, "rope_type default or llama3, got '" + type + "'");
  if (type == "llama3") {
    c.rope_factor = r.number(params, "factor", 8);
    c.rope_low_freq = r.number(params, "low_freq_factor", 1);
    c.rope_high_freq = r.number(params, "high_freq_factor", 4);
    c.rope_original_max = static_cast<int64_t>(r.number(params, "original_max_position_embeddings", 8192));
  }
}

void read_llama_like(const Reader& r, LmConfig& c) {
  c.hidden = r.integer("hidden_size");
  c.layers = r.integer("num_hidden_layers");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.head_dim = r.integer("head_dim", c.heads > 0 ? c.hidden / c.heads : 0);
  c.intermediate = r.integer("intermediate_size");
  c.max_positions = r.integer("max_position_embeddings", 2048);
  c.norm_eps = r.number(r.j, "rms_norm_eps", 1e-6);
  c.attention_bias = r.flag("attention_bias", false);
  c.mlp_bias = r.flag("mlp_bias", false);
  read_rope(r, c);
  r.require(r.string("hidden_act", "silu") == "silu", "hidden_act", "silu");
  r.require(r.integer("pretraining_tp", 1) == 1, "pretraining_tp", "1");
  r.require(!r.flag("rope_interleaved", false), "rope_interleaved", "false");
  // Qwen's sliding_window applies only with use_sliding_window; Mistral's whenever it is set.
  const bool sliding = r.flag("use_sliding_window", true);
  if (sliding && r.has("sliding_window"))
    r.require(r.integer("sliding_window") >= c.max_positions, "sliding_window",
              "a window at least max_position_embeddings long, i.e. full attention");
  if (r.has("layer_types")) {
    const json& lt = r.j["layer_types"];
    r.require(lt.is_array() && std::all_of(lt.begin(), lt.end(), [](const json& t) { return t == "full_attention"; }),
              "layer_types", "full_attention in every layer");
  }
}

void read_gpt2(const Reader& r, LmConfig& c) {
  c.hidden = r.integer("n_embd");
  c.layers = r.integer("n_layer");
  c.heads = r.integer("n_head");
  c.kv_heads = c.heads;
  c.head_dim = c.heads > 0 ? c.hidden / c.heads : 0;
  c.intermediate = r.integer("n_inner", 4 * c.hidden);
  c.max_positions = r.integer("n_positions", 1024);
  c.norm_eps = r.number(r.j, "layer_norm_epsilon", 1e-5);
  c.tie_embeddings = true;
  const std::string act = r.string("activation_function", "gelu_new");
  r.require(act == "gelu_new" || act == "gelu_pytorch_tanh", "activation_function", "gelu_new");
  r.require(r.flag("scale_attn_weights", true), "scale_attn_weights", "true");
  r.require(!r.flag("scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx", "false");
  r.require(!r.flag("add_cross_attention", false), "add_cross_attention", "false");
}

}  // namespace

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      // architecture        model_type  gguf     norm        positions          mlp           qkv_b  qk_n   in_out all_b  permute
      {"LlamaForCausalLM", "llama", "llama", Norm::kRms, Positions::kRope, Mlp::kSwiGlu, false, false, false, false, true, kLlamaNames},
      {"MistralForCausalLM", "mistral", "llama", Norm::kRms, Positions::kRope, Mlp::kSwiGlu, false, false, false, false, true, kLlamaNames},
      {"Qwen2ForCausalLM", "qwen2", "qwen2", Norm::kRms, Positions::kRope, Mlp::kSwiGlu, true, false, false, false, false, kLlamaNames},
      {"Qwen3ForCausalLM", "qwen3", "qwen3", Norm::kRms, Positions::kRope, Mlp::kSwiGlu, false, true, false, false, false, qwen3_names()},
      {"GPT2LMHeadModel", "gpt2", "gpt2", Norm::kLayer, Positions::kLearned, Mlp::kGeluTanh, true, false, true, true, false, kGpt2Names},
  };
  return table;
}

const Family* find_family(const std::string& name) {
  for (const Family& f : families())
    if (name == f.architecture || name == f.model_type || name == f.gguf_arch) return &f;
  return nullptr;
}

const TensorNames& gguf_names() { return kGgufNames; }

namespace {

// `name` (BASE.weight or BASE.bias) renamed from one column of the table to another: the role whose
// `from` pattern matches BASE, with the layer index carried over; "" when no role of both has it.
std::string rename(const TensorNames& from, const TensorNames& to, const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return "";
  const std::string base = name.substr(0, dot), suffix = name.substr(dot);  // ".weight" / ".bias"
  for (auto role : kRoles) {
    std::string layer;
    if (!*(from.*role) || !*(to.*role) || !match_role(from.*role, base, layer)) continue;
    std::string out = to.*role;
    const size_t at = out.find("{i}");
    if (at != std::string::npos) out.replace(at, 3, layer);
    return out + suffix;
  }
  return "";
}

}  // namespace

std::string layer_name(const char* pattern, int64_t layer) {
  std::string s = pattern;
  const size_t at = s.find("{i}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

std::string hf_name_of(const Family& f, const std::string& gguf) { return rename(kGgufNames, f.names, gguf); }

std::string gguf_name_of(const Family& f, const std::string& hf) { return rename(f.names, kGgufNames, hf); }

Role role_of(const Family& f, const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return nullptr;
  const std::string base = name.substr(0, dot), suffix = name.substr(dot);
  if (suffix != ".weight" && suffix != ".bias") return nullptr;
  for (Role role : kRoles) {
    std::string layer;
    if (*(f.names.*role) && match_role(f.names.*role, base, layer)) return role;
  }
  return nullptr;
}

bool is_linear_role(Role r) {
  for (Role linear : {&TensorNames::q, &TensorNames::k, &TensorNames::v, &TensorNames::qkv, &TensorNames::o,
                      &TensorNames::gate, &TensorNames::up, &TensorNames::down, &TensorNames::lm_head})
    if (r == linear) return true;
  return false;
}

void LmConfig::validate(const std::string& what) const {
  auto positive = [&](int64_t v, const char* field) {
    PARE_CHECK(v > 0, what, ": ", field, " must be positive, got ", v);
  };
  positive(vocab, "vocab_size");
  positive(hidden, "hidden_size");
  positive(layers, "num_hidden_layers");
  positive(heads, "num_attention_heads");
  positive(kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(intermediate, "intermediate_size");
  positive(max_positions, "max_position_embeddings");
  PARE_CHECK(heads % kv_heads == 0, what, ": num_attention_heads (", heads, ") must be a multiple of num_key_value_heads (",
             kv_heads, ")");
  PARE_CHECK(head_dim % 2 == 0 || family->positions != Positions::kRope, what, ": head_dim ", head_dim,
             " must be even for rotary positions");
  PARE_CHECK(family->positions == Positions::kRope || heads * head_dim == hidden, what, ": hidden size ", hidden,
             " is not num_attention_heads x head size");
  PARE_CHECK(dtype == "float32" || dtype == "float16" || dtype == "bfloat16", what, ": torch_dtype must be float32, "
             "float16 or bfloat16, got '", dtype, "'");
}

int64_t LmConfig::parameter_count() const {
  const int64_t attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2;
  const int64_t mlp = hidden * intermediate * (family && family->mlp == Mlp::kSwiGlu ? 3 : 2);
  int64_t n = vocab * hidden * (tie_embeddings ? 1 : 2) + layers * (attn + mlp + 2 * hidden) + hidden;
  if (family && family->positions == Positions::kLearned) n += max_positions * hidden;
  return n;
}

LmConfig parse_hf_config(const std::string& path) { return parse_hf_config_text(read_file(path), path); }

LmConfig parse_hf_config_text(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
  PARE_CHECK(j.is_object(), path, ": not a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0];
  else if (j.contains("model_type") && j["model_type"].is_string())
    arch = j["model_type"];
  LmConfig c;
  c.family = find_family(arch);
  if (!c.family) {
    std::string known;
    for (const Family& f : families()) known += std::string(known.empty() ? "" : ", ") + f.architecture;
    throw InputError(path + ": architecture '" + arch + "' is not one pare supports (" + known + ")");
  }
  const std::set<std::string>& keys = c.family->positions == Positions::kLearned ? kGpt2Keys : kLlamaKeys;
  for (const auto& [key, value] : j.items())
    PARE_CHECK(kHarmless.count(key) || keys.count(key), path, ": config key '", key, "' (", value.dump(),
               ") is not one pare reads for ", c.family->architecture, "; refusing rather than ignoring it");
  const Reader r{j, path};
  c.vocab = r.integer("vocab_size");
  c.tie_embeddings = r.flag("tie_word_embeddings", c.family->positions == Positions::kLearned);
  c.dtype = r.string("torch_dtype", r.string("dtype", "float32"));
  c.bos = token_id(r, "bos_token_id");
  c.eos = token_id(r, "eos_token_id");
  c.pad = token_id(r, "pad_token_id");
  if (c.family->positions == Positions::kLearned) read_gpt2(r, c);
  else read_llama_like(r, c);
  c.validate(path);
  return c;
}

}  // namespace pare::lm

namespace pare::lm {

namespace {

json token_or_null(int64_t id) { return id >= 0 ? json(id) : json(nullptr); }

// The keys read_llama_like reads, as transformers 5 writes them.
void write_llama_like(const LmConfig& c, json& j) {
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate;
  j["max_position_embeddings"] = c.max_positions;
  j["rms_norm_eps"] = c.norm_eps;
  j["hidden_act"] = "silu";
  json rope = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  if (c.rope_factor > 0)
    rope.update({{"rope_type", "llama3"}, {"factor", c.rope_factor}, {"low_freq_factor", c.rope_low_freq},
                 {"high_freq_factor", c.rope_high_freq}, {"original_max_position_embeddings", c.rope_original_max}});
  j["rope_parameters"] = rope;
  // Mistral's class defaults to a 4096-token window; pare's models attend to the whole context.
  j["sliding_window"] = nullptr;
  // Only Llama's and Qwen3's classes read these; written when set, so that the others' configs
  // carry no key their class ignores.
  if (c.attention_bias) j["attention_bias"] = true;
  if (c.mlp_bias) j["mlp_bias"] = true;
}

void write_gpt2(const LmConfig& c, json& j) {
  j["n_embd"] = c.hidden;
  j["n_layer"] = c.layers;
  j["n_head"] = c.heads;
  j["n_inner"] = c.intermediate;
  j["n_positions"] = c.max_positions;
  j["layer_norm_epsilon"] = c.norm_eps;
  j["activation_function"] = "gelu_new";
}

}  // namespace

std::string hf_config_json(const LmConfig& c) {
  PARE_ASSERT(c.family != nullptr);
  json j = {{"architectures", {c.family->architecture}}, {"model_type", c.family->model_type},
            {"vocab_size", c.vocab}, {"tie_word_embeddings", c.tie_embeddings}, {"dtype", c.dtype},
            {"torch_dtype", c.dtype}, {"bos_token_id", token_or_null(c.bos)}, {"eos_token_id", token_or_null(c.eos)},
            {"pad_token_id", token_or_null(c.pad)}};
  if (c.family->positions == Positions::kLearned) write_gpt2(c, j);
  else write_llama_like(c, j);
  return j.dump(2) + "\n";
}

}  // namespace pare::lm
