// A language model from a GGUF file: the config from llama.cpp's `{arch}.*` metadata, the weights
// dequantized to fp32 and renamed by the table's GGUF column (lm/arch.h), llama.cpp's q/k row
// permutation and GPT-2's transposition undone, so the one builder makes the graph.
#include <set>

#include "core/error.h"
#include "lm/gguf.h"
#include "lm/model.h"

namespace pare::lm {

namespace {

// `{arch}.` keys pare reads or knows to change nothing it computes.
const std::set<std::string> kKnownArchKeys = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
    "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count", "vocab_size"};

LmConfig gguf_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  LmConfig c;
  c.family = find_family(arch);
  PARE_CHECK(c.family && arch == c.family->gguf_arch, f.path(), ": general.architecture '", arch,
             "' is not one pare reads (llama, qwen2, qwen3, gpt2)");
  const std::string a = arch + ".";
  for (const std::string& key : f.keys())
    if (key.rfind(a, 0) == 0)
      PARE_CHECK(kKnownArchKeys.count(key.substr(a.size())), f.path(), ": metadata key '", key,
                 "' is not one pare reads for ", arch, "; refusing rather than ignoring it");
  c.hidden = f.get_int(a + "embedding_length");
  c.layers = f.get_int(a + "block_count");
  c.intermediate = f.get_int(a + "feed_forward_length");
  c.heads = f.get_int(a + "attention.head_count");
  c.kv_heads = f.get_int(a + "attention.head_count_kv", c.heads);
  c.head_dim = f.get_int(a + "attention.key_length", c.heads > 0 ? c.hidden / c.heads : 0);
  PARE_CHECK(f.get_int(a + "attention.value_length", c.head_dim) == c.head_dim, f.path(), ": ", a,
             "attention.value_length differs from key_length, which pare does not support");
  PARE_CHECK(f.get_int(a + "rope.dimension_count", c.head_dim) == c.head_dim || c.family->positions != Positions::kRope,
             f.path(), ": ", a, "rope.dimension_count is not the head size (partial rotary), which pare does not support");
  c.max_positions = f.get_int(a + "context_length");
  c.norm_eps = c.family->norm == Norm::kRms ? f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6)
                                            : f.get_float(a + "attention.layer_norm_epsilon", 1e-5);
  c.rope_theta = f.get_float(a + "rope.freq_base", 10000);
  c.vocab = f.has(a + "vocab_size") ? f.get_int(a + "vocab_size") : f.tensor_info("token_embd.weight").shape.at(0);
  c.tie_embeddings = !f.has_tensor("output.weight");
  c.bos = f.get_int("tokenizer.ggml.bos_token_id", -1);
  c.eos = f.get_int("tokenizer.ggml.eos_token_id", -1);
  c.pad = f.get_int("tokenizer.ggml.padding_token_id", -1);
  c.validate(f.path());
  return c;
}

// llama.cpp's converter reorders q and k rows per head as (half, pair) -> (pair, half); undone.
at::Tensor unpermute(const at::Tensor& w, int64_t heads) {
  std::vector<int64_t> split = {heads, w.size(0) / heads / 2, 2};
  for (int64_t d = 1; d < w.dim(); ++d) split.push_back(w.size(d));
  return w.reshape(split).transpose(1, 2).reshape(w.sizes()).contiguous();
}

std::map<std::string, at::Tensor> gguf_weights(const GgufFile& f, const LmConfig& c) {
  const Family& fam = *c.family;
  std::map<std::string, at::Tensor> out;
  for (const GgufTensorInfo& info : f.tensors()) {
    PARE_CHECK(info.name != "rope_freqs.weight", f.path(), ": tensor 'rope_freqs.weight' (llama3 rope scaling as "
               "llama.cpp stores it) is not supported yet");
    const std::string hf = hf_name_of(fam, info.name);
    PARE_CHECK(!hf.empty(), f.path(), ": tensor '", info.name, "' has no role in pare's ", fam.architecture,
               " (a different architecture?); refusing rather than ignoring it");
    at::Tensor t = f.tensor(info.name);
    auto is = [&](const char* role) { return info.name.find(role) != std::string::npos; };
    if (fam.gguf_permutes_qk && is(".attn_q.")) t = unpermute(t, c.heads);
    if (fam.gguf_permutes_qk && is(".attn_k.")) t = unpermute(t, c.kv_heads);
    // GPT-2's Conv1D weights are [in, out]; llama.cpp's converter stored them as [out, in].
    if (fam.linear_in_out && t.dim() == 2 && (is(".attn_qkv.") || is(".attn_output.") || is(".ffn_up.") || is(".ffn_down.")))
      t = t.t().contiguous();
    out[hf] = t;
  }
  return out;
}

// The tokenizer llama.cpp's converter stored in the metadata (tokenizer.ggml.*).
std::shared_ptr<const Tokenizer> gguf_tokenizer(const GgufFile& f) {
  if (!f.has("tokenizer.ggml.model")) return nullptr;
  const std::string kind = f.get_string("tokenizer.ggml.model");
  PARE_CHECK(kind == "gpt2" || kind == "llama", f.path(), ": tokenizer.ggml.model '", kind,
             "' is not one pare reads (gpt2: byte-level BPE, llama: SentencePiece-style BPE)");
  PARE_CHECK(f.has("tokenizer.ggml.merges"), f.path(), ": the ", kind, " tokenizer has no tokenizer.ggml.merges "
             "(SentencePiece scores instead of merges are not supported yet)");
  TokenizerModel t;
  t.source = f.path();
  t.vocab = f.get_strings("tokenizer.ggml.tokens");
  for (const std::string& m : f.get_strings("tokenizer.ggml.merges")) {
    const size_t space = m.find(' ');
    PARE_CHECK(space != std::string::npos && space > 0 && space + 1 < m.size(), f.path(),
               ": tokenizer.ggml.merges holds '", m, "', not two tokens separated by a space");
    t.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = f.get_ints("tokenizer.ggml.token_type");
    PARE_CHECK(types.size() == t.vocab.size(), f.path(), ": tokenizer.ggml.token_type has ", types.size(),
               " entries for ", t.vocab.size(), " tokens");
    for (size_t id = 0; id < types.size(); ++id)
      if (types[id] == 3 || types[id] == 4) {  // control (special) and user-defined tokens
        AddedToken a;
        a.id = static_cast<int32_t>(id);
        a.content = t.vocab[id];
        a.special = types[id] == 3;
        t.added.push_back(a);
      }
  }
  t.bos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.bos_token_id", -1));
  t.eos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.eos_token_id", -1));
  t.pad_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.padding_token_id", -1));
  t.add_bos = f.has("tokenizer.ggml.add_bos_token") ? f.get_bool("tokenizer.ggml.add_bos_token") : kind == "llama";
  t.add_eos = f.has("tokenizer.ggml.add_eos_token") && f.get_bool("tokenizer.ggml.add_eos_token");
  t.set_pipeline(kind == "gpt2" ? TokenizerModel::Kind::kByteLevelBpe : TokenizerModel::Kind::kSentencePieceBpe,
                 f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "");
  return std::make_shared<const Tokenizer>(std::move(t));
}

}  // namespace

LmModel load_gguf(const std::string& path, const BuildOptions& opts) {
  const GgufFile f(path);
  LmModel m;
  m.config = gguf_config(f);
  m.graph = build_graph(m.config, gguf_weights(f, m.config), opts, path);
  m.graph.metadata["pare.lm.source"] = "gguf:" + path;
  m.tok = gguf_tokenizer(f);
  return m;
}

}  // namespace pare::lm
