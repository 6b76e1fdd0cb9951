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
// The files' format and their reader (CachedEngine) are engine/cache.h; this writes them.
// Files: DIR/index.json and, per rank that wrote it, DIR/shard-R.classes.npy (int16, or int32
// for 32767 classes or more, [n, k], -1 padding), DIR/shard-R.probs.npy (float16 [n, k]) and DIR/shard-R.rest.npy (float16 [n]).
// The index records the dataset's size and a checksum of its inputs (the teacher never reads the
// labels: a cache built from inputs alone, 'npy:X.npy', serves 'npy:X.npy,Y.npy'), so a cache is
// never applied to other data or another normalisation.
#pragma once

#include <cstdint>
#include <string>

#include "core/data.h"
#include "core/module.h"
#include "distill/teacher.h"
#include "engine/cache.h"

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
  int64_t samples = 0, classes = 0, entries = 0;  ///< entries per sample (k, or draws); a language model's: per token
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

/// The cache of a language model teacher (engine::LmTeacherCacheFile's format): `teacher` runs
/// over the token windows `windows` (x [N, S]; named `data` in the index), and each token's
/// next-token distribution at opts.temperature is kept as its top opts.top_k tokens with the rest's
/// mass, or as opts.sample draws. `tokenizer_json` (the teacher's tokenizer.json text) is written
/// beside the index, so that a student is checked against it and a new one takes it. Replaces `dir`
/// whole as write_teacher_cache does, and shards the windows by rank the same way. Throws
/// InputError for bad options (K outside [1, 1024]).
TeacherCacheReport write_lm_teacher_cache(core::Module& teacher, const std::string& teacher_name,
                                          const std::string& tokenizer_json, const core::TensorDataset& windows,
                                          const std::string& data, const TeacherCacheOptions& opts,
                                          const std::string& dir, dist::ProcessGroup* pg = nullptr);

}  // namespace pare::distill
