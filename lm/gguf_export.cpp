// save_gguf (lm/gguf_export.h): a language model as llama.cpp's convert_hf_to_gguf.py writes it.
#include "lm/gguf_export.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/file_util.h"
#include "lm/hf_export.h"

namespace pare::lm {

namespace {

// --type's spellings, the ggml type, and llama.cpp's general.file_type (enum llama_ftype) for a file
// whose matrices are all of that type (Q4_K: LLAMA_FTYPE_MOSTLY_Q4_K_S, the nearest it names).
struct TypeRow {
  const char* flag;
  GgmlType type;
  uint32_t file_type;
};
constexpr TypeRow kTypeRows[] = {{"f32", GgmlType::kF32, 0},   {"f16", GgmlType::kF16, 1},
                                 {"bf16", GgmlType::kBF16, 32}, {"q8_0", GgmlType::kQ8_0, 7},
                                 {"q5_0", GgmlType::kQ5_0, 8},  {"q4_0", GgmlType::kQ4_0, 2},
                                 {"q4_k", GgmlType::kQ4_K, 14}};

const TypeRow& row_of(GgmlType t) {
  for (const TypeRow& r : kTypeRows)
    if (r.type == t) return r;
  throw InputError("pare does not write GGUF files of type " + ggml_type_name(static_cast<uint32_t>(t)));
}

// llama.cpp's converter reorders q and k rows per head as (half, pair) -> (pair, half) for its
// rotary layout (gguf_model.cpp's unpermute is the inverse).
at::Tensor permute_qk(const at::Tensor& w, int64_t heads) {
  std::vector<int64_t> split = {heads, 2, w.size(0) / heads / 2};
  for (int64_t d = 1; d < w.dim(); ++d) split.push_back(w.size(d));
  return w.reshape(split).transpose(1, 2).reshape(w.sizes()).contiguous();
}

// The checkpoint tensor `t` (Hugging Face layout) in llama.cpp's layout.
at::Tensor gguf_layout(const LmConfig& c, const std::string& gguf, at::Tensor t) {
  const Family& f = *c.family;
  auto is = [&](const char* role) { return gguf.find(role) != std::string::npos; };
  if (f.gguf_permutes_qk && is(".attn_q.")) t = permute_qk(t, c.heads);
  if (f.gguf_permutes_qk && is(".attn_k.")) t = permute_qk(t, c.kv_heads);
  if (f.linear_in_out && t.dim() == 2 && (is(".attn_qkv.") || is(".attn_output.") || is(".ffn_up.") || is(".ffn_down.")))
    t = t.t();
  return t.to(at::kFloat).contiguous();
}

// Blocks quantized before (rows = output channels, as llama.cpp's layout has them) in llama.cpp's
// row order: Llama's q/k rows permuted as gguf_layout permutes the values.
std::string given_blocks(const LmConfig& c, const std::string& gguf, const at::Tensor& values, const std::string& bytes) {
  const int64_t rows = values.size(0);
  PARE_CHECK(values.dim() == 2 && static_cast<int64_t>(bytes.size()) % rows == 0, "tensor '", gguf, "': ", bytes.size(),
             " bytes of given blocks for ", rows, " rows");
  at::Tensor raw = at::from_blob(const_cast<char*>(bytes.data()), {rows, static_cast<int64_t>(bytes.size()) / rows},
                                 at::kByte);
  auto is = [&](const char* role) { return gguf.find(role) != std::string::npos; };
  if (c.family->gguf_permutes_qk && is(".attn_q.")) raw = permute_qk(raw, c.heads);
  else if (c.family->gguf_permutes_qk && is(".attn_k.")) raw = permute_qk(raw, c.kv_heads);
  else return bytes;
  return std::string(reinterpret_cast<const char*>(raw.data_ptr<uint8_t>()), bytes.size());
}

void write_config(GgufWriter& w, const LmConfig& c, const std::string& arch) {
  const std::string a = arch + ".";
  auto u32 = [&](const char* key, int64_t v) { w.set_u32(a + key, static_cast<uint32_t>(v)); };
  u32("context_length", c.max_positions);
  u32("embedding_length", c.hidden);
  u32("block_count", c.layers);
  u32("feed_forward_length", c.intermediate);
  u32("attention.head_count", c.heads);
  u32("attention.head_count_kv", c.kv_heads);
  if (c.family->norm == Norm::kRms)
    w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
  else
    w.set_f32(a + "attention.layer_norm_epsilon", static_cast<float>(c.norm_eps));
  if (c.family->positions == Positions::kRope) {
    w.set_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
    u32("rope.dimension_count", c.head_dim);
  }
  if (c.head_dim * c.heads != c.hidden) {  // a pruned model's, or Qwen3's: llama.cpp reads them
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.head_dim);
  }
  u32("vocab_size", c.vocab);
}

// Two pipelines tokenize alike when their steps are equal field by field.
auto fields(const NormalizerStep& s) { return std::tie(s.kind, s.pattern, s.content); }
auto fields(const PreTokenizerStep& s) {
  return std::tie(s.kind, s.individual_digits, s.add_prefix_space, s.use_regex, s.replacement, s.prepend_scheme, s.split);
}
auto fields(const DecoderStep& s) {
  return std::tie(s.kind, s.pattern, s.content, s.start, s.stop, s.replacement, s.prepend_scheme);
}
template <class Step>
bool same_steps(const std::vector<Step>& a, const std::vector<Step>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Step& x, const Step& y) { return fields(x) == fields(y); });
}

// llama.cpp's name (tokenizer.ggml.pre) for the byte-level pipeline of `t`: the one whose pipeline,
// as pare builds it from the name on reading, equals the tokenizer's.
std::string pre_name(const TokenizerModel& t) {
  PARE_CHECK(t.kind == TokenizerModel::Kind::kByteLevelBpe, t.source, ": a SentencePiece-style tokenizer (Llama 2, "
             "Mistral) is not written to GGUF yet (llama.cpp wants SentencePiece scores, which tokenizer.json lacks); "
             "byte-level BPE tokenizers are");
  for (const char* pre : {"gpt-2", "llama-bpe", "smollm"}) {
    TokenizerModel named = t;
    named.set_pipeline(t.kind, pre);
    if (same_steps(named.normalizer, t.normalizer) && same_steps(named.pre_tokenizer, t.pre_tokenizer) &&
        same_steps(named.decoder, t.decoder) && named.ignore_merges == t.ignore_merges &&
        named.byte_fallback == t.byte_fallback)
      return pre;
  }
  throw InputError(t.source + ": its normalizer, pre-tokenizer and decoder are none of those llama.cpp names that "
                   "pare writes (gpt-2, llama-bpe, smollm), so llama.cpp would tokenize text differently");
}

// tokenizer.ggml.*: tokens by id (ids without a token, up to the embedding's rows, as [PADi] of type
// unused, as llama.cpp's converter pads), token types, merges, special ids, whether BOS/EOS are added.
std::string write_tokenizer(GgufWriter& w, const Tokenizer& tok, int64_t rows) {
  const TokenizerModel& t = tok.model();
  const std::string pre = pre_name(t);
  PARE_CHECK(tok.vocab_size() <= rows, t.source, ": the tokenizer has ", tok.vocab_size(),
             " tokens but the model's embedding only ", rows, " rows");
  enum : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };
  std::vector<std::string> tokens(static_cast<size_t>(rows));
  std::vector<int32_t> types(static_cast<size_t>(rows), kNormal);
  for (int32_t id = 0; id < rows; ++id) {
    tokens[id] = tok.id_to_token(id);
    if (tokens[id].empty()) {
      tokens[id] = "[PAD" + std::to_string(id) + "]";
      types[id] = kUnused;
    }
  }
  for (const AddedToken& a : t.added) types[a.id] = a.special ? kControl : kUserDefined;
  std::vector<std::string> merges;
  merges.reserve(t.merges.size());
  for (const auto& [left, right] : t.merges) merges.push_back(left + " " + right);
  const bool bos_first = t.prefix.empty() ? t.add_bos : t.prefix == std::vector<int32_t>{tok.bos_id()};
  const bool eos_last = t.suffix.empty() ? t.add_eos : t.suffix == std::vector<int32_t>{tok.eos_id()};
  PARE_CHECK((t.prefix.empty() || bos_first) && (t.suffix.empty() || eos_last), t.source, ": its post-processor adds ",
             "tokens other than BOS before and EOS after the text, which GGUF cannot say");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  if (tok.bos_id() >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id()));
  if (tok.eos_id() >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id()));
  if (tok.pad_id() >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(tok.pad_id()));
  w.set_bool("tokenizer.ggml.add_bos_token", bos_first);
  w.set_bool("tokenizer.ggml.add_eos_token", eos_last);
  return pre;
}

// "dir/student.q8_0.gguf" -> "student.q8_0": general.name unless --metadata sets it.
std::string stem_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  const size_t dot = base.rfind(".gguf");
  return dot != std::string::npos && dot > 0 ? base.substr(0, dot) : base;
}

// The type a tensor is written in: 1-D ones (norms, biases) in F32; matrices in `type`, but for Q4_K
// a matrix whose rows are not whole 256-value super-blocks in Q5_0, llama-quantize's fallback
// (llama-quant.cpp's tensor_type_fallback; SmolLM2's rows of 576 are such).
GgmlType type_of(const at::Tensor& t, GgmlType type) {
  if (t.dim() < 2) return GgmlType::kF32;
  if (type == GgmlType::kQ4_K && t.size(-1) % 256 != 0) return GgmlType::kQ5_0;
  return type;
}

}  // namespace

GgmlType parse_gguf_type(const std::string& s) {
  std::string names;
  for (const TypeRow& r : kTypeRows) {
    if (s == r.flag) return r.type;
    names += std::string(names.empty() ? "" : ", ") + r.flag;
  }
  throw InputError("GGUF type '" + s + "' is not one pare writes (" + names + ")");
}

GgufExportResult save_gguf(const LmModel& m, const std::string& path, const GgufExportOptions& opts) {
  GgufExportResult r;
  r.path = path;
  r.type = opts.type_;
  const TypeRow& type = row_of(opts.type_);
  r.config = m.config;
  const std::map<std::string, at::Tensor> weights = hf_tensors(m, r.config);
  const LmConfig& c = r.config;
  const std::string what = path;
  PARE_CHECK(c.rope_factor == 0, what, ": RoPE scaling (rope_type llama3) is not written to GGUF yet (llama.cpp keeps "
             "it as a rope_freqs tensor)");
  PARE_CHECK(m.tok != nullptr, what, ": the model has no tokenizer, and a GGUF file must carry one (give a model "
             "whose folder has tokenizer.json)");
  r.arch = c.family->gguf_arch;
  GgufWriter w;
  w.set_string("general.architecture", r.arch);
  w.set_string("general.name", stem_of(path));
  w.set_u32("general.file_type", type.file_type);
  if (opts.type_ != GgmlType::kF32 && opts.type_ != GgmlType::kF16 && opts.type_ != GgmlType::kBF16)
    w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  for (const auto& [key, value] : opts.metadata_) {
    PARE_CHECK(key.rfind(r.arch + ".", 0) != 0 && key.rfind("tokenizer.", 0) != 0 && key != "general.architecture" &&
               key != "general.alignment", "--metadata ", key, ": pare writes that key itself");
    w.set_string(key, value);
  }
  write_config(w, c, r.arch);
  r.tokenizer_pre = write_tokenizer(w, *m.tok, c.vocab);
  r.vocab = c.vocab;
  for (const auto& [hf, tensor] : weights) {
    const std::string name = gguf_name_of(*c.family, hf);
    PARE_CHECK(!name.empty(), what, ": tensor '", hf, "' has no GGUF name");
    const at::Tensor t = gguf_layout(c, name, tensor);
    PARE_CHECK(at::isfinite(t).all().item<bool>(), what, ": tensor '", hf, "' holds values that are not finite");
    const auto given = opts.blocks_.find(hf);
    const GgmlType tt = given != opts.blocks_.end() ? given->second.type : type_of(t, opts.type_);
    if (tt != opts.type_ && t.dim() >= 2 && given == opts.blocks_.end()) ++r.fallbacks;
    const std::string qwhat = what + ": tensor '" + name + "' (" + hf + ", shape " + c10::str(t.sizes()) + ")";
    if (given != opts.blocks_.end()) {
      const uint32_t gt = static_cast<uint32_t>(tt);
      PARE_CHECK(t.dim() == 2 && ggml_block_size(gt) > 0 && t.size(1) % ggml_block_size(gt) == 0 &&
                     static_cast<int64_t>(given->second.bytes.size()) ==
                         t.numel() / ggml_block_size(gt) * ggml_block_bytes(gt),
                 qwhat, ": its given ", ggml_type_name(gt), " blocks (", given->second.bytes.size(),
                 " bytes) do not fit its rows");
      w.add_tensor(name, t.sizes().vec(), gt, given_blocks(c, name, t, given->second.bytes));
      ++r.given;
    } else {
      w.add_tensor(name, t.sizes().vec(), static_cast<uint32_t>(tt), ggml_quantize(t, static_cast<uint32_t>(tt), qwhat));
    }
    ++r.tensors[ggml_type_name(static_cast<uint32_t>(tt))];
  }
  r.bytes = w.write(path);
  return r;
}

nlohmann::json to_json(const GgufExportResult& r) {
  return {{"path", r.path}, {"architecture", r.arch}, {"type", ggml_type_name(static_cast<uint32_t>(r.type))},
          {"tensors", r.tensors}, {"fallbacks", r.fallbacks}, {"given", r.given}, {"bytes", r.bytes}, {"tokenizer_pre", r.tokenizer_pre}, {"vocab", r.vocab},
          {"parameters", r.config.parameter_count()}};
}

std::string to_text(const GgufExportResult& r) {
  std::string types;
  for (const auto& [type, n] : r.tensors) types += std::string(types.empty() ? "" : ", ") + std::to_string(n) + " " + type;
  std::string out = "wrote " + r.path + ": " + r.arch + ", " + ggml_type_name(static_cast<uint32_t>(r.type)) + ", " +
                    std::to_string(r.config.parameter_count()) + " parameters, tensors " + types + ", " +
                    std::to_string(r.bytes) + " bytes; tokenizer gpt2 (pre " + r.tokenizer_pre + "), " +
                    std::to_string(r.vocab) + " tokens\n";
  if (r.given > 0)
    out += "  " + std::to_string(r.given) + " matrices written from their quantizer's blocks as they are\n";
  if (r.fallbacks > 0)
    out += "  " + std::to_string(r.fallbacks) + " matrices whose rows are not a multiple of 256 are Q5_0, as llama-quantize "
           "falls back for Q4_K\n";
  return out;
}

}  // namespace pare::lm
