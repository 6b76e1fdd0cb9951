// Writes a language model as a GGUF file that llama.cpp runs: general.* and llama.cpp's `{arch}.*`
// metadata (dimensions, heads, RoPE base, norm epsilon), the tokenizer as tokenizer.ggml.* (byte-level
// BPE: tokens, token types, merges, BOS/EOS/padding, llama.cpp's pre-tokenizer name), and the weights
// under llama.cpp's names and layouts (Llama's q/k rows permuted for its rotary layout, GPT-2's
// Conv1D weights transposed) in one ggml type: matrices in the chosen type, norms and biases in F32.
// The weights come from hf_tensors (lm/hf_export.h), so a pruned or trained model is written as it is.
//
//   lm::LmModel m = lm::load_lm("hf:student");
//   lm::save_gguf(m, "student.q8_0.gguf", lm::GgufExportOptions().type(lm::GgmlType::kQ8_0));
//   // llama.cpp: llama-cli -m student.q8_0.gguf
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "lm/arch.h"
#include "lm/gguf.h"
#include "lm/model.h"

namespace pare::lm {

/// Options of save_gguf.
struct GgufExportOptions {
  /// The ggml type of the matrices (F32, F16, BF16, Q8_0, Q5_0, Q4_0, Q4_K); 1-D tensors stay F32,
  /// and for Q4_K a matrix whose rows are not a multiple of 256 is Q5_0 (llama-quantize's fallback).
  GgufExportOptions& type(GgmlType v) { type_ = v; return *this; }
  /// One more metadata string (general.name, general.license, ...; an `{arch}.` or tokenizer key
  /// pare writes itself is refused).
  GgufExportOptions& metadata(const std::string& key, const std::string& value) {
    metadata_[key] = value;
    return *this;
  }

  /// Blocks already quantized (lm/weight_quant.h's, by Hugging Face name; rows = output channels,
  /// each in its own type): written as they are, with only llama.cpp's q/k row order applied, not
  /// rounded again.
  GgufExportOptions& blocks(const std::map<std::string, GgmlBlocks>& v) {
    blocks_ = v;
    return *this;
  }

  GgmlType type_ = GgmlType::kF16;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, GgmlBlocks> blocks_;
};

/// What save_gguf wrote.
struct GgufExportResult {
  std::string path;
  LmConfig config;                          ///< as written (after pruning: the weights' dimensions)
  std::string arch;                         ///< general.architecture
  GgmlType type = GgmlType::kF16;           ///< the matrices' type
  std::map<std::string, int64_t> tensors;   ///< tensors per ggml type name
  int64_t fallbacks = 0;                    ///< Q4_K matrices written as Q5_0 (rows not a multiple of 256)
  int64_t given = 0;                        ///< matrices written from GgufExportOptions::blocks
  uint64_t bytes = 0;                       ///< the file's size
  std::string tokenizer_pre;                ///< tokenizer.ggml.pre
  int64_t vocab = 0;                        ///< tokenizer.ggml.tokens' length
};

/// The ggml type `--type` names: f32, f16, bf16, q8_0, q5_0, q4_0, q4_k. Throws InputError otherwise.
GgmlType parse_gguf_type(const std::string& s);

/// Writes `m` as the GGUF v3 file `path`, atomically. Throws InputError, writing nothing, naming the
/// tensor or the setting: a model without a tokenizer, a tokenizer llama.cpp's byte-level BPE cannot
/// express (SentencePiece-style vocabularies are not written yet), RoPE scaling (llama.cpp keeps it
/// as a rope_freqs tensor, not written yet), a matrix whose rows are not a multiple of the type's
/// block (32 values; for Q4_K, Q5_0's 32 when not 256), a weight that is not finite, and hf_tensors'
/// refusals.
GgufExportResult save_gguf(const LmModel& m, const std::string& path, const GgufExportOptions& opts = {});

/// The result as `pare export --target gguf --json` prints it.
nlohmann::json to_json(const GgufExportResult& r);
/// A few lines for people: the architecture, type, tensors, bytes and tokenizer.
std::string to_text(const GgufExportResult& r);

}  // namespace pare::lm
