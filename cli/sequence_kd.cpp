// Sequence-level KD's data for pare distill --sequence-kd DIR: the training windows' prompts
// continued by the teacher, generated once (each rank its slice) into DIR and read back by every
// later run that asks for the same teacher, text, windows and sampling.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "dist/staged_dir.h"
#include "dist/world.h"
#include "engine/cache.h"
#include "lm/generate.h"
#include "lm/model.h"

namespace pare::cli {

constexpr int64_t kBatch = 16;  // windows the teacher decodes together

core::TensorDataset sequence_kd_windows(const std::string& dir, const std::string& teacher, const lm::LmModel& model,
                                        const std::string& data, const core::TensorDataset& train,
                                        const lm::SamplingOptions& sampling, int64_t prompt, dist::ProcessGroup* pg,
                                        bool talk) {
  const int64_t vocab = model.config.vocab;
  PARE_CHECK(teacher.rfind("cache:", 0) != 0, "--sequence-kd generates with the teacher, and ", teacher,
             " holds its outputs, not its weights");
  const nlohmann::json want = {{"teacher", teacher}, {"data", data}, {"checksum", engine::dataset_checksum(train)},
                               {"seq", train.x.size(1)}, {"prompt", prompt}, {"temperature", sampling.temperature},
                               {"top_k", sampling.top_k}, {"top_p", sampling.top_p}, {"seed", sampling.seed}};
  const std::string name = train.name + " continued by " + teacher;
  if (file_exists(join_path(dir, "index.json"))) {
    core::TensorDataset set = engine::read_sequence_kd_set(dir, want, vocab, name);
    if (talk) std::fprintf(stderr, "sequence-KD: %lld windows continued by the teacher, from %s\n",
                           (long long)set.size(), dir.c_str());
    return set;
  }
  const int rank = pg ? pg->rank() : 0, ranks = pg ? pg->size() : 1;
  dist::StagedDir staged(dir, rank, pg, "sequence-KD set");
  const int64_t n = train.size(), begin = n * rank / ranks, end = n * (rank + 1) / ranks;
  lm::BuildOptions kv;
  kv.kv_cache = true;
  lm::Generator gen(lm::rebuild(model, kv, teacher).graph);
  lm::SamplingOptions opts = sampling;
  opts.stop = model.config.eos >= 0 ? std::vector<int64_t>{model.config.eos} : std::vector<int64_t>{};
  const bool tty = talk && ::isatty(2);
  if (talk) std::fprintf(stderr, "sequence-KD: the teacher continues %lld windows after %lld tokens of each, into %s\n",
                         (long long)n, (long long)prompt, dir.c_str());
  const core::TensorDataset slice{train.x.narrow(0, begin, end - begin), train.y.narrow(0, begin, end - begin),
                                  train.name};
  opts.seed = sampling.seed + static_cast<uint64_t>(begin);
  const core::TensorDataset made =
      end > begin ? lm::continue_windows(gen, slice, prompt, opts, kBatch, [&](int64_t done) {
        const int64_t all = end - begin;
        if (tty) std::fprintf(stderr, "\rsequence-KD: %lld/%lld windows", (long long)done, (long long)all);
        const int64_t tenth = std::max<int64_t>(1, all / 10);
        if (!tty && talk && (done == all || (done / tenth != (done - kBatch) / tenth && all - done >= tenth)))
          std::fprintf(stderr, "sequence-KD: %lld/%lld windows\n", (long long)done, (long long)all);
      })
                  : core::TensorDataset{at::empty({0, train.x.size(1)}, at::kLong),
                                        at::empty({0, train.x.size(1)}, at::kLong), name};
  if (tty) std::fprintf(stderr, "\n");
  core::save_npy(made.x, engine::sequence_kd_part(staged.path(), "x", rank));
  core::save_npy(made.y, engine::sequence_kd_part(staged.path(), "y", rank));
  if (pg) pg->barrier();
  if (rank == 0) {
    nlohmann::json j = want;
    j["format"] = engine::kSequenceKdFormat;
    j["windows"] = n;
    j["ranks"] = ranks;
    write_file_atomic(join_path(staged.path(), "index.json"), j.dump(1) + "\n");
  }
  staged.commit(pg);
  return engine::read_sequence_kd_set(dir, want, vocab, name);
}

}  // namespace pare::cli
