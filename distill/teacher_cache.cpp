#include "distill/teacher_cache.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "dist/staged_dir.h"
#include "dist/world.h"

namespace pare::distill {

namespace {

// The index's list of shards: rank q holds rows [n q / world, n (q + 1) / world).
nlohmann::json shards_json(int64_t n, int world) {
  nlohmann::json shards = nlohmann::json::array();
  for (int q = 0; q < world; ++q)
    shards.push_back({{"rank", q}, {"begin", n * q / world}, {"end", n * (q + 1) / world}});
  return shards;
}

// The index.json fields of every kind of cache; the caller adds its kind's.
nlohmann::json index_json(const char* kind, int64_t entries, double temperature, int64_t classes,
                          const std::string& teacher_name, const std::string& data, const core::TensorDataset& ds,
                          int world) {
  return {{"format", engine::kTeacherCacheFormat},
          {"kind", kind},
          {"entries", entries},
          {"temperature", temperature},
          {"classes", classes},
          {"samples", ds.size()},
          {"teacher", teacher_name},
          {"data", data},
          {"checksum", engine::dataset_checksum(ds)},
          {"shards", shards_json(ds.size(), world)}};
}

}  // namespace

TeacherCacheReport write_teacher_cache(Teacher& teacher, const std::string& teacher_name,
                                       const core::TensorDataset& ds, const std::string& data,
                                       const TeacherCacheOptions& o, const std::string& dir,
                                       dist::ProcessGroup* pg) {
  PARE_CHECK_OPTION(o.temperature > 0 && std::isfinite(o.temperature), "temperature", "must be > 0, got ", o.temperature);
  PARE_CHECK_OPTION(o.top_k >= 1, "top_k", "must be at least 1, got ", o.top_k);
  PARE_CHECK_OPTION(o.sample >= 0, "sample", "must be >= 0, got ", o.sample);
  PARE_CHECK_OPTION(o.batch_size >= 1, "batch_size", "must be at least 1, got ", o.batch_size);
  PARE_CHECK(ds.size() > 0, "the dataset '", data, "' is empty");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t classes = teacher.num_classes(ds.x.narrow(0, 0, 1));
  PARE_CHECK(classes <= engine::kTeacherCacheMaxClasses, teacher.describe(), " has ", classes,
             " classes; a teacher cache holds at most ", engine::kTeacherCacheMaxClasses, " (2^24)");
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  dist::StagedDir staged(dir, rank, pg, "teacher cache");
  const int64_t n = ds.size(), begin = n * rank / world, end = n * (rank + 1) / world;
  const bool sampled = o.sample > 0;
  const int64_t k = sampled ? o.sample : std::min(o.top_k, classes);
  // Class indices in 16 bits when they fit (every vocabulary below 32767), else 32.
  const auto idx_type = classes < 32767 ? at::kShort : at::kInt;
  at::Tensor idx = at::full({end - begin, k}, -1, idx_type);
  at::Tensor probs = at::zeros({end - begin, k}, at::kHalf);
  at::Tensor rest = at::zeros({end - begin}, at::kHalf);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 1000003ULL + static_cast<uint64_t>(rank));
  at::NoGradGuard no_grad;
  // A collective (sharded) teacher runs as many batches on every rank: the ranks' slices differ by
  // at most a row, and a rank out of rows joins with an empty batch.
  const int64_t most_rows = (n + world - 1) / world;
  const int64_t batches = teacher.collective() ? (most_rows + o.batch_size - 1) / o.batch_size
                                               : (end - begin + o.batch_size - 1) / o.batch_size;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t i = std::min(begin + b * o.batch_size, end);
    const int64_t m = std::min(o.batch_size, end - i);
    at::Tensor p = at::softmax(teacher.logits(ds.x.narrow(0, i, m)).to(at::kFloat) / o.temperature, 1);
    if (m == 0) continue;
    PARE_CHECK(p.size(1) == classes, teacher.describe(), " gave ", p.size(1), " classes, then ", classes);
    if (!sampled) {
      auto top = p.topk(k, 1);
      idx.narrow(0, i - begin, m).copy_(std::get<1>(top));
      probs.narrow(0, i - begin, m).copy_(std::get<0>(top));
      rest.narrow(0, i - begin, m).copy_((1.0 - std::get<0>(top).sum(1)).clamp_min(0));
    } else {
      // K draws per row; the distinct classes with their frequencies, largest first.
      at::Tensor draws = at::multinomial(p, k, /*replacement=*/true, gen);
      at::Tensor counts = at::zeros({m, classes}, at::kFloat).scatter_add_(1, draws, at::ones({m, k}, at::kFloat));
      auto top = (counts / static_cast<double>(k)).topk(std::min(k, classes), 1);
      at::Tensor w = std::get<0>(top), c = std::get<1>(top).to(idx_type);
      c.masked_fill_(w.eq(0), -1);
      idx.narrow(0, i - begin, m).narrow(1, 0, w.size(1)).copy_(c);
      probs.narrow(0, i - begin, m).narrow(1, 0, w.size(1)).copy_(w);
    }
    if (o.progress && rank == 0)
      std::fprintf(stderr, "\rteacher-cache: %lld/%lld rows", (long long)(i + m - begin), (long long)(end - begin));
  }
  if (o.progress && rank == 0) std::fprintf(stderr, "\n");
  core::save_npy(idx, engine::teacher_cache_shard(staged.path(), rank, "classes"));
  core::save_npy(probs, engine::teacher_cache_shard(staged.path(), rank, "probs"));
  core::save_npy(rest, engine::teacher_cache_shard(staged.path(), rank, "rest"));
  if (pg) pg->barrier();
  TeacherCacheReport r;
  r.samples = n;
  r.classes = classes;
  r.entries = k;
  r.bytes_per_sample = static_cast<double>(k * (idx.element_size() + 2) + 2);
  if (rank == 0) {
    nlohmann::json j = index_json(sampled ? "sampled" : "top-k", k, o.temperature, classes, teacher_name, data, ds,
                                  world);
    j["bytes_per_sample"] = r.bytes_per_sample;
    write_file_atomic(join_path(staged.path(), "index.json"), j.dump(1) + "\n");
  }
  staged.commit(pg);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

// One batch of windows' rows: each token's top-k (or sampled) entries of log_softmax(logits / T).
void append_lm_rows(const at::Tensor& logits, const TeacherCacheOptions& o, at::Generator& gen,
                    std::vector<uint8_t>& rows, std::vector<int64_t>& offsets) {
  const int64_t windows = logits.size(0), seq = logits.size(1), vocab = logits.size(2);
  const at::Tensor lp = at::log_softmax(logits.to(at::kFloat).reshape({-1, vocab}) / o.temperature, -1);
  const bool sampled = o.sample > 0;
  at::Tensor ids, values, rest;
  if (!sampled) {
    auto top = lp.topk(std::min(o.top_k, vocab), -1);
    values = std::get<0>(top).contiguous();
    ids = std::get<1>(top).contiguous();
    const double inf = std::numeric_limits<double>::infinity();
    rest = at::logsumexp(lp.scatter(-1, ids, -inf), {-1}).contiguous();
  } else {
    ids = std::get<0>(at::multinomial(lp.exp(), o.sample, /*replacement=*/true, gen).sort(-1)).contiguous();
  }
  const int64_t k = ids.size(1);
  std::vector<engine::LmCacheEntry> entries;
  for (int64_t w = 0; w < windows; ++w) {
    for (int64_t t = w * seq; t < (w + 1) * seq; ++t) {
      const int64_t* id = ids.data_ptr<int64_t>() + t * k;
      entries.clear();
      if (!sampled) {
        for (int64_t i = 0; i < k; ++i) entries.push_back({id[i], values.data_ptr<float>()[t * k + i]});
        engine::append_lm_top_k_row(rows, entries, rest.data_ptr<float>()[t]);
      } else {
        for (int64_t i = 0; i < k; ++i) {  // the draws sorted: runs of one token are its count
          if (i > 0 && id[i] == id[i - 1]) ++entries.back().value;
          else entries.push_back({id[i], 1.0f});
        }
        engine::append_lm_sampled_row(rows, entries);
      }
    }
    offsets.push_back(static_cast<int64_t>(rows.size()));
  }
}

}  // namespace

TeacherCacheReport write_lm_teacher_cache(core::Module& teacher, const std::string& teacher_name,
                                          const std::string& tokenizer_json, const core::TensorDataset& ds,
                                          const std::string& data, const TeacherCacheOptions& o, const std::string& dir,
                                          dist::ProcessGroup* pg) {
  PARE_CHECK_OPTION(o.temperature > 0 && std::isfinite(o.temperature), "temperature", "must be > 0, got ",
                    o.temperature);
  const int64_t k = o.sample > 0 ? o.sample : o.top_k;
  PARE_CHECK_OPTION(k >= 1 && k <= 1024, o.sample > 0 ? "sample" : "top_k",
                    "must lie in [1, 1024] for a language model, got ", k);
  PARE_CHECK_OPTION(o.batch_size >= 1, "batch_size", "must be at least 1, got ", o.batch_size);
  PARE_CHECK(ds.size() > 0 && ds.x.dim() == 2, "the text '", data, "' gives no windows of tokens");
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  dist::StagedDir staged(dir, rank, pg, "teacher cache");
  const int64_t n = ds.size(), seq = ds.x.size(1), begin = n * rank / world, end = n * (rank + 1) / world;
  std::vector<uint8_t> rows;
  std::vector<int64_t> offsets = {0};
  at::NoGradGuard no_grad;
  // The vocabulary from two tokens, on every rank (one without windows too).
  const int64_t vocab = teacher.forward({ds.x.narrow(0, 0, 1).narrow(1, 0, std::min<int64_t>(2, seq))})[0].size(-1);
  PARE_CHECK(vocab <= engine::kTeacherCacheMaxClasses, teacher_name, " has a vocabulary of ", vocab,
             "; a teacher cache holds at most 2^24 tokens");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 1000003ULL + static_cast<uint64_t>(rank));
  for (int64_t i = begin; i < end; i += o.batch_size) {
    const int64_t m = std::min(o.batch_size, end - i);
    const at::Tensor logits = teacher.forward({ds.x.narrow(0, i, m)})[0];
    PARE_CHECK(logits.dim() == 3 && logits.size(-1) == vocab, teacher_name, " gave logits ", logits.sizes(),
               ", expected [windows, tokens, ", vocab, "]");
    append_lm_rows(logits, o, gen, rows, offsets);
    if (o.progress && rank == 0)
      std::fprintf(stderr, "\rteacher-cache: %lld/%lld windows, %.0f bytes a token", (long long)(i + m - begin),
                   (long long)(end - begin),
                   static_cast<double>(rows.size()) / static_cast<double>((i + m - begin) * seq));
  }
  if (o.progress && rank == 0) std::fprintf(stderr, "\n");
  const at::Tensor bytes = at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, at::kByte);
  core::save_npy(bytes, engine::teacher_cache_shard(staged.path(), rank, "rows"));
  core::save_npy(at::tensor(offsets, at::kLong), engine::teacher_cache_shard(staged.path(), rank, "offsets"));
  // Every rank's bytes and vocabulary, for the index (a rank of no windows has no vocabulary).
  at::Tensor bytes_total = at::tensor({static_cast<double>(rows.size())}, at::kDouble);
  if (pg) pg->all_reduce(bytes_total, dist::Reduce::kSum);  // every rank's, for the index
  TeacherCacheReport r;
  r.samples = n;
  r.classes = vocab;
  r.entries = o.sample > 0 ? k : std::min(k, vocab);
  r.bytes_per_sample = (bytes_total.item<double>() + 8.0 * static_cast<double>(n)) / static_cast<double>(n * seq);
  if (rank == 0) {
    write_file_atomic(join_path(staged.path(), "tokenizer.json"), tokenizer_json);
    // entries: the draws, or the tokens a row
    nlohmann::json j = index_json(o.sample > 0 ? "lm-sampled" : "lm-top-k", r.entries, o.temperature, r.classes,
                                  teacher_name, data, ds, world);
    j["seq"] = seq;
    j["bytes_per_token"] = r.bytes_per_sample;
    write_file_atomic(join_path(staged.path(), "index.json"), j.dump(1) + "\n");
  }
  staged.commit(pg);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace pare::distill
