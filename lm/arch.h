// The language-model families pare knows, as one table (in the manner of llama.cpp's
// llama-arch.cpp): a row names a family's config keys, its tensor names per role and the switches
// it needs; the graph builder reads the row, never the family's name. A Hugging Face config.json
// becomes an LmConfig through its row; an architecture or a config key the table does not list is
// refused naming it.
//
//   lm::LmConfig c = lm::parse_hf_config("ckpt/config.json");
//   std::string q = c.family->names.q;            // "model.layers.{i}.self_attn.q_proj"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pare::lm {

enum class Norm { kRms, kLayer };
enum class Positions { kRope, kLearned };
enum class Mlp { kSwiGlu, kGeluTanh };

/// Tensor names of one family by role, "{i}" standing for the layer index; "" when the family has
/// no such tensor. Linear layers are named without ".weight"/".bias".
struct TensorNames {
  const char* embed;       ///< token embedding [vocab, hidden]
  const char* positions;   ///< learned positions [max_pos, hidden]
  const char* attn_norm, *q, *k, *v, *qkv, *o, *q_norm, *k_norm;
  const char* mlp_norm, *gate, *up, *down;
  const char* final_norm, *lm_head;
};

/// One row of the table.
struct Family {
  const char* architecture;  ///< config.json's architectures[0]: "LlamaForCausalLM"
  const char* model_type;    ///< config.json's model_type: "llama"
  const char* gguf_arch;     ///< GGUF's general.architecture: "llama"
  Norm norm;
  Positions positions;
  Mlp mlp;
  bool qkv_bias;             ///< q/k/v projections carry biases (Qwen2)
  bool qk_norm;              ///< RMSNorm of q and k per head (Qwen3)
  bool linear_in_out;        ///< weights stored [in, out] (GPT-2's Conv1D), not [out, in] (nn.Linear)
  bool all_biases;           ///< every linear and norm has a bias (GPT-2)
  /// llama.cpp's converter permutes q and k rows of this family for its rotary layout (Llama):
  /// reading a GGUF file undoes it.
  bool gguf_permutes_qk;
  TensorNames names;
};

/// llama.cpp's tensor names by role ("blk.{i}.attn_q", "token_embd", "output", ...): GGUF's
/// column of the table, the same for every family.
const TensorNames& gguf_names();
/// The Hugging Face name of GGUF tensor `gguf` ("blk.3.attn_q.weight" ->
/// "model.layers.3.self_attn.q_proj.weight" for Llama), or "" when no role of `f` has it.
std::string hf_name_of(const Family& f, const std::string& gguf);
/// The GGUF name of Hugging Face tensor `hf` of family `f` (hf_name_of's inverse), or "" when no role has it.
std::string gguf_name_of(const Family& f, const std::string& hf);

/// A pattern of TensorNames with "{i}" replaced by `layer` ("model.layers.{i}.mlp.up_proj", 3 ->
/// "model.layers.3.mlp.up_proj").
std::string layer_name(const char* pattern, int64_t layer);

/// A role of TensorNames (&TensorNames::q, ...).
using Role = const char* TensorNames::*;
/// The role of the Hugging Face tensor `name` in family `f` ("model.layers.3.self_attn.q_proj.bias" ->
/// &TensorNames::q), or nullptr when no role has it (rotary tables, shape constants, "<embed>.weight.T").
Role role_of(const Family& f, const std::string& name);
/// True for the roles that are linear layers (q, k, v, qkv, o, gate, up, down, lm_head), whose
/// weights the graph holds as [in, out] for MatMul.
bool is_linear_role(Role r);

/// Every family, in table order.
const std::vector<Family>& families();
/// The row whose architecture, model_type or (first) GGUF architecture is `name`, or nullptr.
const Family* find_family(const std::string& name);

/// A model's hyperparameters, whatever file they came from.
struct LmConfig {
  const Family* family = nullptr;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t max_positions = 0;
  double norm_eps = 1e-6;
  double rope_theta = 10000;
  /// rope_scaling of type llama3 (factor 0: none).
  double rope_factor = 0, rope_low_freq = 1, rope_high_freq = 4;
  int64_t rope_original_max = 0;
  bool tie_embeddings = false;
  bool attention_bias = false;  ///< Llama's attention_bias: q/k/v/o carry biases
  bool mlp_bias = false;        ///< Llama's mlp_bias
  std::string dtype = "float32";  ///< torch_dtype: float32, float16 or bfloat16
  int64_t bos = -1, eos = -1, pad = -1;

  /// Throws InputError naming the field when the dimensions do not fit together (heads not
  /// dividing hidden without head_dim, kv heads not dividing heads, ...).
  void validate(const std::string& what) const;
  /// Parameters of the whole model (embedding and head counted once when tied).
  int64_t parameter_count() const;
};

/// Reads a Hugging Face config.json. Throws InputError naming the file and the key for an
/// architecture the table lacks, a key no row reads or knows to be harmless, or a value pare does
/// not support (a sliding window shorter than the context, a rope type other than llama3, ...).
LmConfig parse_hf_config(const std::string& path);
/// The same from the file's text; `what` names it in errors.
LmConfig parse_hf_config_text(const std::string& text, const std::string& what);

/// The config.json of `c` as transformers 5 writes it for the family (parse_hf_config's inverse):
/// architectures and model_type, the dimensions under the family's own key names (GPT-2: n_embd,
/// n_layer, ...), rope_parameters (with llama3 scaling), tie_word_embeddings, dtype (and
/// torch_dtype, which transformers 4 reads), the bos/eos/pad ids (null when unset). Text, indented.
std::string hf_config_json(const LmConfig& c);

}  // namespace pare::lm
