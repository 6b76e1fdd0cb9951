// Tests for a language model's teacher cache: distill::write_lm_teacher_cache, the row codec and
// engine::LmTeacherCacheFile's reader, and distill_lm from a cache against the same teacher online.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/core/grad_mode.h>

#include "core/file_util.h"
#include "core/module.h"
#include "core/tensor_io.h"
#include "distill/distiller.h"
#include "distill/teacher_cache.h"
#include "engine/cache.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;
using pare::testing::TempDir;

namespace {

struct Fixture {
  lm::LmModel model = lm::make_model(lm::tiny_config("llama"), lm::random_weights(lm::tiny_config("llama")));
  core::Module teacher{model.graph, core::Module::Use::kFrozen};
  core::TensorDataset windows;
  Fixture() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    at::Tensor x = at::randint(0, 40, {5, 8}, gen, at::kLong);
    at::Tensor y = at::cat({x.narrow(1, 1, 7), at::randint(0, 40, {5, 1}, gen, at::kLong)}, 1);
    windows = {x, y, "windows"};
  }
  // log_softmax(teacher logits / T) of every token, [5, 8, 40].
  at::Tensor log_probs(double T) {
    at::NoGradGuard no_grad;
    return at::log_softmax(teacher.forward({windows.x})[0] / T, -1);
  }
};

distill::TeacherCacheOptions opts(int64_t top_k, int64_t sample = 0, double T = 2.0) {
  distill::TeacherCacheOptions o;
  o.top_k = top_k;
  o.sample = sample;
  o.temperature = T;
  o.batch_size = 2;
  o.progress = false;
  return o;
}

}  // namespace

TEST(LmTeacherCache, TopKRowsHoldTheTeachersLikeliestTokensToTheGridsStep) {
  Fixture f;
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  const auto r = distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "text:x", opts(6), dir);
  EXPECT_EQ(r.classes, 40);
  EXPECT_EQ(r.entries, 6);
  EXPECT_GT(r.bytes_per_sample, 10);  // the row's header
  EXPECT_LT(r.bytes_per_sample, 22);  // and 6 gaps of a 40-token vocabulary, 6 values of at most 9 bits
  const auto c = engine::LmTeacherCacheFile::read(dir);
  EXPECT_EQ(c.kind, "lm-top-k");
  EXPECT_EQ(c.windows, 5);
  EXPECT_EQ(c.seq, 8);
  EXPECT_EQ(read_file(c.tokenizer), "{}");
  c.check(f.windows);
  const at::Tensor order = at::tensor({4, 0, 2}, at::kLong);
  const auto [ids, lp] = c.teacher(order);
  ASSERT_EQ(ids.sizes(), at::IntArrayRef({3, 8, 6}));
  ASSERT_EQ(lp.sizes(), at::IntArrayRef({3, 8, 7}));
  const at::Tensor exact = f.log_probs(2.0).index_select(0, order);
  const auto [top, top_ids] = exact.topk(6, -1);
  // The same tokens (the cache keeps them ascending), and their log-probabilities on the row's grid.
  EXPECT_TRUE(std::get<0>(top_ids.sort(-1)).equal(ids));
  const at::Tensor want = exact.gather(-1, ids);
  const at::Tensor step = (top.select(-1, 0) - top.select(-1, 5)).unsqueeze(-1) / 255;
  EXPECT_TRUE((lp.narrow(-1, 0, 6) - want).abs().le(step * 0.5 + 4e-3 * want.abs() + 1e-4).all().item<bool>());
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor rest = at::logsumexp(exact.scatter(-1, top_ids, -inf), {-1});
  EXPECT_LE((lp.select(-1, 6) - rest).abs().max().item<double>(), 0.01);
}

TEST(LmTeacherCache, SampledRowsCountTheDrawsAndFollowTheTeacher) {
  Fixture f;
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "text:x", opts(0, 1000, 1.0), dir);
  const auto c = engine::LmTeacherCacheFile::read(dir);
  EXPECT_EQ(c.kind, "lm-sampled");
  EXPECT_EQ(c.entries, 1000);
  const auto [ids, lp] = c.teacher(at::arange(5, at::kLong));
  // Counts / K sum to 1 over the named tokens; nothing in the rest.
  EXPECT_LE((lp.narrow(-1, 0, 1000).exp().sum(-1) - 1).abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(lp.select(-1, 1000).isneginf().all().item<bool>());
  // The empirical distribution of 1,000 draws against the teacher's: 3 standard errors at p = 1/2.
  at::Tensor freq = at::zeros({5, 8, 41}, at::kFloat);
  freq.scatter_add_(-1, at::where(ids.ge(0), ids, at::full_like(ids, 40)), lp.narrow(-1, 0, 1000).exp());
  EXPECT_LE((freq.narrow(-1, 0, 40) - f.log_probs(1.0).exp()).abs().max().item<double>(), 0.05);
}

TEST(LmTeacherCache, BadFilesAndOtherWindowsAreRefusedByName) {
  Fixture f;
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "text:x", opts(6), dir);
  // Other windows: another text, tokenizer or --seq-len.
  core::TensorDataset other = f.windows;
  other.x = other.x.flip(0);
  expect_input_error([&] { engine::LmTeacherCacheFile::read(dir).check(other); }, {"other text"});
  const std::string rows = engine::teacher_cache_shard(dir, 0, "rows");
  const std::string offsets = engine::teacher_cache_shard(dir, 0, "offsets");
  const at::Tensor bytes = core::load_npy(rows).clone(), off = core::load_npy(offsets).clone();
  // Truncated rows; offsets that do not end at the rows' end; a token beyond the vocabulary.
  core::save_npy(bytes.narrow(0, 0, bytes.numel() - 3), rows);
  expect_input_error([&] { engine::LmTeacherCacheFile::read(dir); }, {"offsets must run from 0"});
  at::Tensor cut = off.clone();
  cut[-1] = bytes.numel() - 3;
  core::save_npy(cut, offsets);
  expect_input_error([&] { engine::LmTeacherCacheFile::read(dir); }, {"window 4"});
  core::save_npy(off, offsets);
  at::Tensor bad = bytes.clone();
  bad[2] = 0;  // Rice parameter 0 makes the first row's gaps unary: they run past the vocabulary
  for (int i = 10; i < 16; ++i) bad[i] = 0xff;
  core::save_npy(bad, rows);
  expect_input_error([&] { engine::LmTeacherCacheFile::read(dir); }, {"window 0"});
  core::save_npy(bytes, rows);
  write_file_atomic(join_path(dir, "index.json"), "{\"format\": \"pare-teacher-cache-1\"}");
  expect_input_error([&] { engine::LmTeacherCacheFile::read(dir); }, {"index.json"});
  // A classifier's cache is not a language model's, and the other way round.
  distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "text:x", opts(6), dir);
  expect_input_error([&] { engine::TeacherCacheFile::read(dir); }, {"language model's"});
  expect_input_error([&] { distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "d", opts(2000), dir); },
                     {"[1, 1024]"});
}

TEST(LmTeacherCache, DistillingFromTheCacheFollowsTheOnlineTeacher) {
  Fixture f;
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  distill::write_lm_teacher_cache(f.teacher, "t", "{}", f.windows, "text:x", opts(6), dir);
  const auto cache = std::make_shared<const engine::LmTeacherCacheFile>(engine::LmTeacherCacheFile::read(dir));
  train::TrainerOptions topts;
  topts.epochs(2).batch_size(2).lr(1e-3).seed(3).progress(false);
  for (int64_t chunk : {int64_t{0}, int64_t{3}}) {
    auto run = [&](bool cached) {
      const lm::LmConfig c = lm::tiny_config("llama");
      core::Module student(lm::make_model(c, lm::random_weights(c)).graph);
      student.parameters()[0].data().mul_(0.5);  // not the teacher
      distill::LmDistillOptions o;
      o.divergence = distill::TokenDivergence::parse(cached ? "fkl" : "topk:6");
      o.temperature = 2.0;
      o.chunk_tokens = chunk;
      const auto [h, w] = lm::head_of(f.model.graph, {"m"});
      o.student_head = o.teacher_head = {h, w};
      if (cached) o.cache = cache;
      return distill::distill_lm(student, cached ? nullptr : &f.teacher, o, topts, f.windows, nullptr);
    };
    const auto online = run(false), cached = run(true);
    ASSERT_EQ(online.size(), 2u);
    for (size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(cached[e].train_loss, online[e].train_loss, 0.01 * online[e].train_loss) << "chunk " << chunk;
  }
  // At another temperature, or rkl from draws, the cache is refused.
  distill::LmDistillOptions o;
  o.cache = cache;
  o.temperature = 1.0;
  core::Module student(f.model.graph);
  expect_input_error([&] { distill::distill_lm(student, nullptr, o, topts, f.windows, nullptr); }, {"T=2"});
}
