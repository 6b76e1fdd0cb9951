// Offline teachers: run a teacher once over a dataset, keep a sparse summary of its softened
// output distribution per sample, and distill from that instead of running the teacher each step.
//
//   pare teacher-cache --teacher cnn.onnx --data fashion-mnist --top-k 10 -T 4 --out cache/
//   pare distill --teacher cache:cache/ --student mlp:784-300-100-10 -T 4 ...
//
// Kinds (per sample, at the temperature T the cache was built for):
//   top-k    the k largest probabilities of softmax(logits / T) with their classes, and the tail
//            mass 1 - sum(top k), spread evenly over the other classes when the cache is read;
//   sampled  K classes drawn with replacement from softmax(logits / T) (after Anshumann et al.
//            2025, "Sparse Logit Sampling"): the target is the empirical distribution count / K,
//            an unbiased estimate of the teacher's, so the KD gradient is unbiased in expectation.
// Files: DIR/index.json and, per rank that wrote it, DIR/shard-R.classes.npy (int16, or int32
// for 32767 classes or more, [n, k], -1 padding), DIR/shard-R.probs.npy (float16 [n, k]) and DIR/shard-R.rest.npy (float16 [n]).
// The index records the dataset's size and a checksum of its inputs (the teacher never reads the
// labels: a cache built from inputs alone, 'npy:X.npy', serves 'npy:X.npy,Y.npy'), so a cache is
// never applied to other data or another normalisation.
#pragma once

#include <cstdint>
#include <string>

#include "core/data.h"
#include "distill/teacher.h"

namespace pare::dist {
class ProcessGroup;
}

namespace pare::distill {

struct TeacherCacheOptions {
  int64_t top_k = 10;     ///< top-k kind: classes kept per sample
  int64_t sample = 0;     ///< > 0: the sampled kind with this many draws per sample
  double temperature = 4.0;
  int64_t batch_size = 512;
  uint64_t seed = 0;      ///< draws of the sampled kind
  bool progress = true;  ///< a progress line on stderr (redrawn: for terminals)
};

struct TeacherCacheReport {
  int64_t samples = 0, classes = 0, entries = 0;  ///< entries per sample (k, or draws)
  double bytes_per_sample = 0, seconds = 0;
};

/// Runs `teacher` over `ds` (named `data` in the index, the teacher `teacher_name`) and writes the
/// cache into `dir`, replacing the cache there whole (written into `dir`.partial first, so that a crash
/// or a full disk leaves the previous one intact; a non-empty `dir` that is not a cache is refused).
/// With a process group each rank runs its contiguous slice of the rows and writes its shard; rank 0
/// writes the index after all shards exist.
/// Throws InputError for bad options (k < 1 or >= classes is allowed: k is capped at classes).
TeacherCacheReport write_teacher_cache(Teacher& teacher, const std::string& teacher_name,
                                       const core::TensorDataset& ds, const std::string& data,
                                       const TeacherCacheOptions& opts, const std::string& dir,
                                       dist::ProcessGroup* pg = nullptr);

/// A fingerprint of (a stride of) a dataset's inputs and its size, as hex.
std::string dataset_checksum(const core::TensorDataset& ds);

/// The index's "format".
extern const char* const kTeacherCacheFormat;
/// The most classes a cache holds (2^24, beyond any vocabulary): reading a batch builds dense
/// [batch, classes] targets, so the reader refuses more, and the writer refuses a teacher with more.
constexpr int64_t kTeacherCacheMaxClasses = int64_t{1} << 24;
/// DIR/shard-RANK.WHAT.npy, WHAT one of classes, probs, rest.
std::string teacher_cache_shard(const std::string& dir, int rank, const char* what);

/// A cache folder as read back (distill/teacher_cache_file.cpp, the reader of a file that may come
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
class CachedTeacher : public Teacher {
 public:
  /// Throws InputError naming the file when the index or a shard is missing or malformed.
  explicit CachedTeacher(const std::string& dir);

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

}  // namespace pare::distill
