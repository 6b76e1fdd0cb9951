// Sequence-level KD's data for pare distill --sequence-kd DIR: the training windows' prompts
// continued by the teacher, generated once (each rank its slice) into DIR and read back by every
// later run that asks for the same teacher, text, windows and sampling.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/tensor_io.h"
#include "dist/staged_dir.h"
#include "dist/world.h"
#include "engine/cache.h"
#include "lm/generate.h"
#include "lm/model.h"

namespace pare::cli {

namespace {

const char* const kFormat = "pare-sequence-kd-1";
constexpr int64_t kBatch = 16;  // windows the teacher decodes together

std::string part(const std::string& dir, const char* what, int rank) {
  return join_path(dir, std::string(what) + "-" + std::to_string(rank) + ".npy");
}

// The windows of a folder made before, checked against what this run asks (`want`).
core::TensorDataset read_set(const std::string& dir, const nlohmann::json& want, int64_t vocab,
                             const std::string& name) {
  const std::string index = join_path(dir, "index.json");
  nlohmann::json j;
  int64_t windows = 0, seq = 0, ranks = 0;
  try {
    j = nlohmann::json::parse(read_file(index));
    PARE_CHECK(j.at("format") == kFormat, "unknown format ", j.at("format").dump());
    windows = json_int_at<int64_t>(j, "windows");
    seq = json_int_at<int64_t>(j, "seq");
    ranks = json_int_at<int64_t>(j, "ranks");
    PARE_CHECK(windows >= 1 && seq >= 2 && ranks >= 1 && ranks <= 65536, "windows (", windows, "), seq (", seq,
               ") and ranks (", ranks, ") do not fit together");
  } catch (const InputError& e) {
    throw InputError(index + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(index + ": not a pare sequence-KD index: " + e.what());
  }
  for (const auto& [key, value] : want.items())
    PARE_CHECK(j.contains(key) && j[key] == value, dir, " holds the teacher's continuations for ", key, " ",
               j.contains(key) ? j[key].dump() : "(none)", ", and this run asks for ", value.dump(),
               ": give another --sequence-kd folder, or remove this one to generate them again");
  std::vector<at::Tensor> xs, ys;
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t rows = windows * (r + 1) / ranks - windows * r / ranks;
    for (const char* what : {"x", "y"}) {
      const std::string path = part(dir, what, static_cast<int>(r));
      at::Tensor t = core::load_npy(path);
      PARE_CHECK(t.scalar_type() == at::kLong && t.dim() == 2 && t.size(0) == rows && t.size(1) == seq, path,
                 ": expected int64 [", rows, ", ", seq, "], got ", t.scalar_type(), " ", t.sizes());
      const bool y = what[0] == 'y';
      const at::Tensor ok = (t.ge(0) & t.lt(vocab)) | (y ? t.eq(-100) : at::zeros_like(t, at::kBool));
      PARE_CHECK(ok.all().item<bool>(), path, ": a token outside [0, ", vocab, ")", y ? " (or -100)" : "");
      (y ? ys : xs).push_back(t);
    }
  }
  return {at::cat(xs), at::cat(ys), name};
}

}  // namespace

core::TensorDataset sequence_kd_windows(const std::string& dir, const std::string& teacher, const std::string& data,
                                        const core::TensorDataset& train, int64_t vocab,
                                        const lm::SamplingOptions& sampling, int64_t prompt,
                                        dist::ProcessGroup* pg, bool talk) {
  PARE_CHECK(teacher.rfind("cache:", 0) != 0, "--sequence-kd generates with the teacher, and ", teacher,
             " holds its outputs, not its weights");
  const nlohmann::json want = {{"teacher", teacher}, {"data", data}, {"checksum", engine::dataset_checksum(train)},
                               {"seq", train.x.size(1)}, {"prompt", prompt}, {"temperature", sampling.temperature},
                               {"top_k", sampling.top_k}, {"top_p", sampling.top_p}, {"seed", sampling.seed}};
  const std::string name = train.name + " continued by " + teacher;
  if (file_exists(join_path(dir, "index.json"))) {
    core::TensorDataset set = read_set(dir, want, vocab, name);
    if (talk) std::fprintf(stderr, "sequence-KD: %lld windows continued by the teacher, from %s\n",
                           (long long)set.size(), dir.c_str());
    return set;
  }
  const int rank = pg ? pg->rank() : 0, ranks = pg ? pg->size() : 1;
  dist::StagedDir staged(dir, rank, pg, "sequence-KD set");
  const int64_t n = train.size(), begin = n * rank / ranks, end = n * (rank + 1) / ranks;
  lm::BuildOptions kv;
  kv.kv_cache = true;
  const lm::LmModel m = lm::load_lm(teacher, kv);
  lm::Generator gen(m.graph);
  lm::SamplingOptions opts = sampling;
  if (m.config.eos >= 0) opts.stop = {m.config.eos};
  const bool tty = talk && ::isatty(2);
  if (talk) std::fprintf(stderr, "sequence-KD: the teacher continues %lld windows after %lld tokens of each, into %s\n",
                         (long long)n, (long long)prompt, dir.c_str());
  const core::TensorDataset slice{train.x.narrow(0, begin, end - begin), train.y.narrow(0, begin, end - begin),
                                  train.name};
  opts.seed = sampling.seed + static_cast<uint64_t>(begin);
  const core::TensorDataset made =
      end > begin ? lm::teacher_continuations(gen, slice, prompt, opts, kBatch, [&](int64_t done) {
        const int64_t all = end - begin;
        if (tty) std::fprintf(stderr, "\rsequence-KD: %lld/%lld windows", (long long)done, (long long)all);
        const int64_t tenth = std::max<int64_t>(1, all / 10);
        if (!tty && talk && (done == all || (done / tenth != (done - kBatch) / tenth && all - done >= tenth)))
          std::fprintf(stderr, "sequence-KD: %lld/%lld windows\n", (long long)done, (long long)all);
      })
                  : core::TensorDataset{at::empty({0, train.x.size(1)}, at::kLong),
                                        at::empty({0, train.x.size(1)}, at::kLong), name};
  if (tty) std::fprintf(stderr, "\n");
  core::save_npy(made.x, part(staged.path(), "x", rank));
  core::save_npy(made.y, part(staged.path(), "y", rank));
  if (pg) pg->barrier();
  if (rank == 0) {
    nlohmann::json j = want;
    j["format"] = kFormat;
    j["windows"] = n;
    j["ranks"] = ranks;
    write_file_atomic(join_path(staged.path(), "index.json"), j.dump(1) + "\n");
  }
  staged.commit(pg);
  return read_set(dir, want, vocab, name);
}

}  // namespace pare::cli
