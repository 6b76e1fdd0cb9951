// A teacher's outputs kept on disk (`pare teacher-cache`, distill/teacher_cache.h writes them): the
// cache folder's format, its reader, and the engine that serves a dataset's rows from it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/data.h"
#include "engine/engine.h"

namespace pare::engine {

/// A fingerprint of (a stride of) a dataset's inputs and its size, as hex.
std::string dataset_checksum(const core::TensorDataset& ds);

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

}  // namespace pare::engine
