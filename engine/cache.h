// A teacher's outputs kept on disk (`pare teacher-cache`, distill/teacher_cache.h writes them): the
// cache folder's format, its reader, and the engine that serves a dataset's rows from it.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/data.h"
#include "engine/engine.h"

namespace pare::engine {

/// A fingerprint of a dataset's inputs (every element) and its size, as hex.
std::string dataset_checksum(const core::TensorDataset& ds);

/// Throws InputError (about "temperature") naming `what` when a cache of the teacher's distribution
/// at T=`cached` is asked for T=`asked`.
void check_cache_temperature(const std::string& what, double cached, double asked);

/// The index's "format".
extern const char* const kTeacherCacheFormat;
/// The most classes a cache holds (2^24, beyond any vocabulary): reading a batch builds dense
/// [batch, classes] targets, so the reader refuses more, and the writer refuses a teacher with more.
constexpr int64_t kTeacherCacheMaxClasses = int64_t{1} << 24;
/// DIR/shard-RANK.WHAT.npy, WHAT one of classes, probs, rest.
std::string teacher_cache_shard(const std::string& dir, int rank, const char* what);

/// A cache folder as read back (engine/cache_file.cpp, the reader of a file that may come
/// from anywhere, fuzzed by tests/fuzz's teacher_cache_fuzz): the index's fields and the shards,
/// concatenated in row order.
struct TeacherCacheFile {
  std::string kind, checksum;  ///< "top-k" or "sampled"; dataset_checksum() of the data it was built from
  int64_t samples = 0, classes = 0;
  double temperature = 0;
  at::Tensor classes_idx, probs, rest;  ///< [N, k] int64 (-1: padding), [N, k] float, [N] float

  /// Reads DIR/index.json and every shard it lists. Throws InputError naming the file and what is
  /// wrong when anything is missing, malformed or inconsistent: the shards must cover rows
  /// [0, samples) in order, classes lie in [-1, classes), probabilities and tail masses in [0, 1].
  static TeacherCacheFile read(const std::string& dir);
  /// The cached distribution of dataset rows `rows` (int64, each in [0, samples)) as logits
  /// T * log(p), [rows, classes], float, on the CPU. Throws InputError for rows out of range.
  at::Tensor logits(const at::Tensor& rows) const;
};

/// A language model's teacher cache (`pare teacher-cache` of one; distill/teacher_cache.h writes it):
/// for every token of every window of the data, the teacher's next-token distribution at the
/// cache's temperature, kept sparsely, one row per token:
///   lm-top-k    the K most likely tokens with their log-probabilities, as steps of a 256-step
///               uniform grid between the row's largest and smallest (kept as fp16), and the log of
///               the mass on the other tokens (fp16);
///   lm-sampled  K tokens drawn from the distribution, kept as the distinct tokens and their counts
///               (Elias gamma codes): the empirical distribution count / K, unbiased in expectation.
/// A row: the number of tokens n (uint16 LE), the tokens' Rice parameter r (uint8), for lm-top-k
/// the values' Rice parameter v (uint8, at most 8) and the largest and smallest log-probability and
/// the rest's (3 x fp16 LE), then bits, least significant first: the tokens in ascending order as
/// Rice(r) codes of their gaps (the first token, then each next minus the previous minus 1), then
/// the n grid steps as Rice(v) codes (most of the K lie near the smallest, step 0) or the n counts
/// as Elias gamma codes, to a byte boundary. Each parameter is the row's best.
/// Files: DIR/index.json, DIR/tokenizer.json (the teacher's tokenizer: the student's must be the
/// same), and per rank DIR/shard-R.rows.npy (uint8, its windows' rows one after another) and
/// DIR/shard-R.offsets.npy (int64 [windows + 1], where each window's rows begin).
struct LmCacheEntry {
  int64_t token;
  float value;  ///< log-probability (lm-top-k) or count (lm-sampled)
};
/// Appends one token's lm-top-k row: `entries` the named tokens (distinct, in any order, at least
/// one) with their log-probabilities (<= 0), `log_rest` the log of the mass on the others (-inf:
/// none).
void append_lm_top_k_row(std::vector<uint8_t>& out, std::vector<LmCacheEntry> entries, float log_rest);
/// Appends one token's lm-sampled row: `entries` the distinct tokens drawn with their counts (>= 1).
void append_lm_sampled_row(std::vector<uint8_t>& out, std::vector<LmCacheEntry> entries);

/// A language model's teacher cache read back (engine/cache_file.cpp; fuzzed by teacher_cache_fuzz):
/// every row is decoded and checked on reading.
struct LmTeacherCacheFile {
  std::string dir, kind, checksum;  ///< "lm-top-k" or "lm-sampled"; dataset_checksum() of the windows
  std::string tokenizer;            ///< path of the teacher's tokenizer.json in the folder
  int64_t windows = 0, seq = 0, vocab = 0, entries = 0;
  double temperature = 0;
  at::Tensor rows;               ///< uint8: the shards' rows, concatenated
  std::vector<int64_t> offsets;  ///< [windows + 1]: window w's rows are rows[offsets[w], offsets[w + 1])

  /// Reads DIR/index.json and every shard it lists, decoding every row. Throws InputError naming the
  /// file and what is wrong when anything is missing, malformed or inconsistent (a classifier's
  /// cache included).
  static LmTeacherCacheFile read(const std::string& dir);
  /// The teacher of windows `rows` (int64 [n], each in [0, windows)): token ids [n, seq, entries]
  /// (int64, -1 padding) and log-probabilities [n, seq, entries + 1] (float, last the rest's; -inf
  /// for no mass), the fields of distill::SparseTeacher. Throws InputError for rows out of range.
  std::pair<at::Tensor, at::Tensor> teacher(const at::Tensor& rows) const;
  /// Throws InputError unless `ds` holds the windows the cache was built from.
  void check(const core::TensorDataset& ds) const;
  std::string describe() const { return "teacher cache '" + dir + "' (" + kind + ")"; }
};

/// The teacher read back from a cache: its targets for batch rows come from the cache, rebuilt as
/// logits T * log(p) whose softmax at the cache's temperature is the cached distribution. It has
/// no intermediate values and cannot run on inputs it has not seen.
class CachedEngine : public Engine {
 public:
  /// Throws InputError naming the file when the index or a shard is missing or malformed.
  explicit CachedEngine(const std::string& dir);

  std::unordered_map<std::string, at::Tensor> forward_batch(const core::Batch& b,
                                                            const std::vector<std::string>& values) override;
  /// Throws InputError: a cache needs the rows of its dataset (forward_batch).
  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override { return name == "logits"; }
  int64_t num_classes(const at::Tensor&) override { return cache_.classes; }
  std::string describe() const override;
  void to(const at::Device&) override {}

  /// Throws InputError unless `ds` is the dataset the cache was built from and `temperature` its
  /// temperature.
  void check(const core::TensorDataset& ds, double temperature) const;
  double temperature() const { return cache_.temperature; }
  const std::string& kind() const { return cache_.kind; }

 private:
  std::string dir_;
  TeacherCacheFile cache_;
};

/// A sequence-KD set's index "format" (pare distill --sequence-kd DIR; cli/sequence_kd.cpp writes it).
extern const char* const kSequenceKdFormat;
/// DIR/WHAT-RANK.npy, WHAT x (the windows) or y (their targets, -100 where not counted).
std::string sequence_kd_part(const std::string& dir, const char* what, int rank);
/// A sequence-KD set read back (fuzzed by teacher_cache_fuzz): index.json ("format", "windows",
/// "seq", "ranks" and the fields of `want`, which must equal want's), and each rank's x and y, int64
/// [its windows, seq] with tokens in [0, vocab) (y's also -100), concatenated. Throws InputError
/// naming the file and what is wrong, or the field of `want` that differs.
core::TensorDataset read_sequence_kd_set(const std::string& dir, const nlohmann::json& want, int64_t vocab,
                                         const std::string& name);

}  // namespace pare::engine
