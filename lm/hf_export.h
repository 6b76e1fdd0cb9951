// Writes a language model as a Hugging Face checkpoint folder that transformers loads with
// AutoModelForCausalLM.from_pretrained: config.json (lm/arch.h's hf_config_json), the weights as
// safetensors under their Hugging Face names and layouts (model.safetensors, or shards with
// model.safetensors.index.json past the size limit), and the tokenizer files found beside the
// model's tokenizer.json. The weights are read off the graph's initializers by name, so a model that
// has been through pare's passes is written as it is now, not as it was loaded.
//
//   lm::LmModel m = lm::load_lm("gguf:SmolLM2-135M-Instruct.Q4_1.gguf");
//   lm::save_hf(m, "smollm2-hf", lm::HfExportOptions().max_shard_bytes(lm::parse_byte_size("500MB")));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/arch.h"
#include "lm/model.h"

namespace pare::lm {

/// Options of save_hf.
struct HfExportOptions {
  /// The most bytes of tensor data in one safetensors file; past it the weights are sharded with an
  /// index (a tensor larger than the limit gets a shard of its own). 0: one file whatever the size.
  HfExportOptions& max_shard_bytes(int64_t v) { max_shard_bytes_ = v; return *this; }
  /// One more "__metadata__" entry in every safetensors file (besides transformers' format: pt).
  HfExportOptions& metadata(const std::string& key, const std::string& value) {
    metadata_[key] = value;
    return *this;
  }

  int64_t max_shard_bytes_ = 2'000'000'000;  ///< 2GB
  std::map<std::string, std::string> metadata_;
};

/// What save_hf wrote.
struct HfExportResult {
  std::string dir;
  LmConfig config;      ///< as written to config.json
  int64_t tensors = 0;  ///< checkpoint tensors written
  int64_t weight_bytes = 0;
  int shards = 0;       ///< safetensors files
  std::vector<std::pair<std::string, int64_t>> files;  ///< every file of the folder with its size, by name
};

/// Parses a size as transformers' max_shard_size spells it: an integer number of bytes, or one
/// followed by B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g.
/// "2GB", "500MB", "100KiB". Throws InputError naming `option` and the spelling otherwise.
int64_t parse_byte_size(const std::string& s, const std::string& option = "max_shard_size");

/// The checkpoint tensors of `m`'s graph by Hugging Face name, in the checkpoint's layout: the
/// transposed views of nn.Linear weights undone, the tied head and what is no checkpoint tensor
/// (rotary tables, shape constants) left out, every tensor in the embedding's type. `config` (a copy
/// of m.config) is brought up to date with the weights: their type, vocabulary and MLP width (after
/// pruning), and tie_word_embeddings false when the head no longer equals the embedding. Throws
/// InputError naming the tensor when the weights do not form a checkpoint of the family (one missing,
/// renamed or quantized by a pass, a shape the config cannot express).
std::map<std::string, at::Tensor> hf_tensors(const LmModel& m, LmConfig& config);

/// Writes `m` as a Hugging Face checkpoint folder `dir`, whole: the files are made in `dir`.partial
/// and that folder takes the place of `dir` at the end (core/file_util.h's replace_dir), so a failure
/// leaves `dir` as it was. Tokenizer files: when m.tokenizer names a tokenizer.json, it and the
/// tokenizer_config.json, special_tokens_map.json and chat_template.jinja beside it. Throws
/// InputError, writing nothing, for weights hf_tensors refuses and for a `dir` that is a file or a
/// folder holding something other than a checkpoint (it is replaced whole); Error when writing fails.
HfExportResult save_hf(const LmModel& m, const std::string& dir, const HfExportOptions& opts = {});

/// The result as `pare export --target hf --json` prints it.
nlohmann::json to_json(const HfExportResult& r);
/// A few lines for people: the architecture, tensors, bytes, shards and files.
std::string to_text(const HfExportResult& r);

}  // namespace pare::lm
