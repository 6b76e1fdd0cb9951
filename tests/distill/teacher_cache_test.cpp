// Tests for distill/teacher_cache: the cached distribution read back, both kinds, and misuse.
#include "distill/teacher_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/file_util.h"
#include "core/tensor_io.h"
#include "core/zoo.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;
using pare::testing::TempDir;

namespace {
core::TensorDataset dataset(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::rand({n, 1, 28, 28}, gen), at::randint(10, {n}, gen, at::kLong), "rand"};
}

core::Batch rows(const core::TensorDataset& ds, std::vector<int64_t> r) {
  at::Tensor idx = at::tensor(r, at::kLong);
  return {ds.x.index_select(0, idx), ds.y.index_select(0, idx), idx};
}

distill::TeacherCacheOptions opts(int64_t k, int64_t sample = 0) {
  distill::TeacherCacheOptions o;
  o.top_k = k;
  o.sample = sample;
  o.temperature = 3.0;
  o.batch_size = 7;
  o.progress = false;
  return o;
}
}  // namespace

TEST(TeacherCache, AllClassesGiveTheTeachersDistribution) {
  TempDir dir;
  auto ds = dataset(30, 1);
  engine::TorchEngine t(core::build_zoo_model("lenet5", 2), "lenet5");
  auto r = distill::write_teacher_cache(t, "lenet5", ds, "rand", opts(10), dir.path());
  EXPECT_EQ(r.samples, 30);
  EXPECT_EQ(r.entries, 10);
  EXPECT_EQ(r.bytes_per_sample, 10 * 4 + 2);  // int16 class + fp16 probability, fp16 tail
  engine::CachedEngine c(dir.path());
  EXPECT_EQ(c.num_classes(ds.x), 10);
  auto b = rows(ds, {29, 0, 13});
  at::Tensor want = at::softmax(t.logits(b.x) / 3.0, 1);
  at::Tensor got = at::softmax(c.forward_batch(b, {}).at("logits") / 3.0, 1);
  EXPECT_LT((want - got).abs().max().item<double>(), 1e-3);  // fp16 storage
}

// A teacher with more classes than a cache holds (the reader would refuse the cache) is refused
// before anything is written.
TEST(TeacherCache, RefusesATeacherWithMoreClassesThanACacheHolds) {
  struct Wide : engine::TorchEngine {
    using engine::TorchEngine::TorchEngine;
    int64_t num_classes(const at::Tensor&) override { return engine::kTeacherCacheMaxClasses + 1; }
  };
  TempDir dir;
  Wide t(core::build_zoo_model("lenet5", 2), "lenet5");
  const std::string out = dir.file("cache");
  expect_input_error([&] { distill::write_teacher_cache(t, "lenet5", dataset(4, 1), "rand", opts(10), out); },
                     {"has 16777217 classes", "at most 16777216"});
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

TEST(TeacherCache, TopKKeepsTheLargestAndSpreadsTheTail) {
  TempDir dir;
  auto ds = dataset(20, 3);
  engine::TorchEngine t(core::build_zoo_model("lenet5", 4), "lenet5");
  distill::write_teacher_cache(t, "lenet5", ds, "rand", opts(3), dir.path());
  engine::CachedEngine c(dir.path());
  auto b = rows(ds, {5, 6, 7, 8});
  at::Tensor p = at::softmax(t.logits(b.x) / 3.0, 1);
  at::Tensor q = at::softmax(c.forward_batch(b, {}).at("logits") / 3.0, 1);
  auto top = p.topk(3, 1);
  EXPECT_LT((q.gather(1, std::get<1>(top)) - std::get<0>(top)).abs().max().item<double>(), 2e-3);
  // The other 7 classes share the tail mass equally.
  at::Tensor mask = at::ones_like(q).scatter_(1, std::get<1>(top), 0.0).to(at::kBool);
  at::Tensor others = q.masked_select(mask).view({4, 7});
  EXPECT_LT((others - others.mean(1, true)).abs().max().item<double>(), 1e-6);
  EXPECT_LT((others.sum(1) - (1 - std::get<0>(top).sum(1))).abs().max().item<double>(), 2e-3);
}

TEST(TeacherCache, SampledTargetsAreFrequenciesNearTheTeachers) {
  TempDir dir;
  auto ds = dataset(6, 5);
  engine::TorchEngine t(core::build_zoo_model("lenet5", 6), "lenet5");
  auto o = opts(1, 4000);
  distill::write_teacher_cache(t, "lenet5", ds, "rand", o, dir.path());
  engine::CachedEngine c(dir.path());
  EXPECT_EQ(c.kind(), "sampled");
  auto b = rows(ds, {0, 1, 2, 3, 4, 5});
  at::Tensor p = at::softmax(t.logits(b.x) / 3.0, 1);
  at::Tensor q = at::softmax(c.forward_batch(b, {}).at("logits") / 3.0, 1);
  EXPECT_LT((q.sum(1) - 1).abs().max().item<double>(), 1e-3);
  EXPECT_LT((q - p).abs().max().item<double>(), 0.05);  // 4000 draws: a few standard errors
}

TEST(TeacherCache, RefusesOtherDataOtherTemperaturesAndInputs) {
  TempDir dir;
  auto ds = dataset(12, 7);
  engine::TorchEngine t(core::build_zoo_model("lenet5", 8), "lenet5");
  distill::write_teacher_cache(t, "lenet5", ds, "rand", opts(2), dir.path());
  engine::CachedEngine c(dir.path());
  EXPECT_NO_THROW(c.check(ds, 3.0));
  pare::testing::expect_option_error([&] { c.check(ds, 4.0); }, "temperature", {"T=3", "temperature 3"});
  auto other = dataset(12, 9);
  expect_input_error([&] { c.check(other, 3.0); }, {"another dataset", "normalized the same way"});
  expect_input_error([&] { c.forward(ds.x, {}); }, {"only teach the rows"});
  expect_input_error([&] { c.forward_batch(rows(ds, {1}), {"relu1"}); }, {"'relu1'", "live teacher"});
  core::Batch past = rows(ds, {11});
  past.rows.fill_(12);
  expect_input_error([&] { c.forward_batch(past, {}); }, {"outside"});
  expect_input_error([&] { engine::CachedEngine(dir.path() + "/nope"); }, {"index.json"});
  write_file_atomic(dir.file("index.json"), "{\"format\": 3}");
  expect_input_error([&] { engine::CachedEngine x(dir.path()); }, {"index.json"});
}

// The fingerprint that ties a cache to its data sees every element (element 123457 of 300000 lay
// off the stride of 3 the fingerprint once sampled).
TEST(TeacherCache, TheDataChecksumSeesEveryElement) {
  const core::TensorDataset a{at::zeros({3000, 100}), at::zeros({3000}, at::kLong), "a"};
  core::TensorDataset b{a.x.clone(), a.y, "b"};
  EXPECT_EQ(engine::dataset_checksum(a), engine::dataset_checksum(b));
  b.x[1234][57] = 1e-7;
  EXPECT_NE(engine::dataset_checksum(a), engine::dataset_checksum(b));
  EXPECT_NE(engine::dataset_checksum(a), engine::dataset_checksum({a.x.narrow(0, 0, 2999), a.y, "c"}));
}

// A cache's files are checked against each other and their ranges before use (distill/
// teacher_cache_file.cpp; the cases tests/fuzz's teacher_cache_fuzz explores): each is refused
// naming the file.
TEST(TeacherCache, RefusesShardsThatDoNotFitTheIndex) {
  TempDir dir;
  auto ds = dataset(6, 3);
  engine::TorchEngine t(core::build_zoo_model("lenet5", 8), "lenet5");
  distill::write_teacher_cache(t, "lenet5", ds, "rand", opts(3), dir.path());
  const std::string index = read_file(dir.file("index.json"));
  const std::string classes = engine::teacher_cache_shard(dir.path(), 0, "classes");
  const std::string probs = engine::teacher_cache_shard(dir.path(), 0, "probs");
  const at::Tensor idx = core::load_npy(classes), p = core::load_npy(probs);
  auto refused = [&](const std::vector<std::string>& parts) {
    expect_input_error([&] { engine::TeacherCacheFile::read(dir.path()); }, parts);
    write_file_atomic(dir.file("index.json"), index);
    core::save_npy(idx, classes);
    core::save_npy(p, probs);
  };
  core::save_npy(idx.clone().fill_(10), classes);
  refused({"shard-0.classes.npy", "outside [-1, 10)"});
  core::save_npy(p.to(at::kFloat).fill_(NAN), probs);
  refused({"shard-0.probs.npy", "NaN"});
  core::save_npy(idx.to(at::kFloat), classes);
  refused({"shard-0.classes.npy", "class indices (integers)"});
  core::save_npy(p.narrow(0, 0, 5), probs);
  refused({"shard-0.probs.npy", "6 rows"});
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = index;
    s.replace(s.find(from), from.size(), to);
    write_file_atomic(dir.file("index.json"), s);
  };
  edit("\"samples\": 6", "\"samples\": 0");
  refused({"index.json", "at least 1"});
  edit("\"classes\": 10", "\"classes\": 2000000000");  // 8 GB of targets a row: refused before use
  refused({"index.json", "classes (2000000000) in [1, 16777216]"});
  edit("\"samples\": 6", "\"samples\": 5.1e58");  // found by teacher_cache_fuzz: UB in the conversion before
  refused({"index.json", "'samples' must be an integer"});
  edit("\"shards\"", "\"shard\"");
  refused({"index.json", "not a pare teacher-cache index"});
  edit("\"rank\": 0", "\"rank\": \"zero\"");
  refused({"index.json", "integers rank, begin and end"});
  edit("\"end\": 6", "\"end\": 7");
  refused({"index.json", "shard 0 covers rows [0, 7)"});
  EXPECT_EQ(engine::TeacherCacheFile::read(dir.path()).samples, 6);
}
