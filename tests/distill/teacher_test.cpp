#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "core/zoo.h"
#include "distill/teacher.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;

namespace {
at::Tensor images(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::rand({n, 1, 28, 28}, gen);
}

}  // namespace

TEST(TorchEngine, LogitsEqualModuleForwardInEvalMode) {
  at::Tensor x = images(8, 1);
  core::Module ref(core::build_zoo_model("cnn", 3));
  ref.eval();
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = ref.forward({x})[0];
  }
  engine::TorchEngine t(core::build_zoo_model("cnn", 3), "cnn");
  auto out = t.forward(x, {});
  ASSERT_EQ(out.size(), 1u);
  // The teacher runs channels-last: the same values up to the kernels' rounding.
  EXPECT_TRUE(at::allclose(out.at("logits"), expected, 1e-5, 1e-6));
  EXPECT_FALSE(t.module().is_training());
  EXPECT_EQ(t.describe(), "graph teacher 'cnn'");
}

TEST(TorchEngine, ReturnsRequestedIntermediateValues) {
  at::Tensor x = images(4, 2);
  core::Module ref(core::build_zoo_model("cnn", 3));
  ref.eval();
  at::NoGradGuard no_grad;
  auto expected = ref.forward_values({x}, {"relu1", "conv2"});
  engine::TorchEngine t(core::build_zoo_model("cnn", 3), "cnn");
  EXPECT_TRUE(t.has_value("relu1"));
  EXPECT_TRUE(t.has_value("logits"));
  EXPECT_FALSE(t.has_value("nope"));
  auto out = t.forward(x, {"relu1", "conv2", "logits"});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(at::allclose(out.at("relu1"), expected.at("relu1"), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(out.at("conv2"), expected.at("conv2"), 1e-5, 1e-6));
  EXPECT_EQ(out.at("relu1").sizes(), (std::vector<int64_t>{4, 32, 28, 28}));
}

TEST(TorchEngine, UnknownValueErrorNamesTheValueAndTeacher) {
  engine::TorchEngine t(core::build_zoo_model("mlp:784-8-3", 0), "small.onnx");
  expect_input_error([&] { t.forward(images(2, 0), {"fc1", "no_such_value"}); },
                     {"no_such_value", "graph teacher 'small.onnx'"});
}

TEST(TorchEngine, LogitsDoNotRequireGrad) {
  engine::TorchEngine t(core::build_zoo_model("cnn", 0), "cnn");
  at::Tensor x = images(2, 3).requires_grad_(true);
  ASSERT_TRUE(at::GradMode::is_enabled());
  auto out = t.forward(x, {"relu2"});
  EXPECT_FALSE(out.at("logits").requires_grad());
  EXPECT_FALSE(out.at("relu2").requires_grad());
}

TEST(TorchEngine, BatchNormRunningStatsAreUntouched) {
  // Inputs far from the initial running mean 0 / var 1, so a training-mode forward would move them.
  at::Tensor x = images(16, 4) * 5 + 3;
  {  // sanity: the same forward in training mode does update them
    core::Module m(core::build_zoo_model("cnn", 0));
    at::Tensor before = m.initializer("bn1.running_mean").clone();
    m.train();
    at::NoGradGuard no_grad;
    m.forward({x});
    ASSERT_FALSE(at::equal(before, m.initializer("bn1.running_mean")));
  }
  engine::TorchEngine t(core::build_zoo_model("cnn", 0), "cnn");
  std::vector<std::string> names = {"bn1.running_mean", "bn1.running_var", "bn3.running_mean", "bn3.running_var"};
  std::vector<at::Tensor> before;
  for (auto& n : names) before.push_back(t.module().initializer(n).clone());
  t.forward(x, {"relu1"});
  t.forward(x, {});
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_TRUE(at::equal(before[i], t.module().initializer(names[i]))) << names[i];
}

TEST(TorchEngine, NumClassesFromAProbeForward) {
  engine::TorchEngine a(core::build_zoo_model("cnn", 0), "cnn");
  EXPECT_EQ(a.num_classes(images(3, 0)), 10);
  engine::TorchEngine b(core::build_zoo_model("mlp:784-8-5", 0), "mlp");
  EXPECT_EQ(b.num_classes(images(1, 0)), 5);
  expect_input_error([&] { engine::TorchEngine(core::build_zoo_model("mlp:784-8-5", 0), "m")
                               .num_classes(at::zeros({0, 1, 28, 28})); },
                     {"N >= 1"});
}

TEST(TorchEngine, CastsAFloat64BatchToTheModelDtype) {
  engine::TorchEngine t(core::build_zoo_model("mlp:784-8-3", 0), "mlp");
  at::Tensor x = images(4, 5);
  at::Tensor a = t.logits(x), b = t.logits(x.to(at::kDouble));
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(a, b));
}

TEST(EnsembleTeacher, WeightedMeanOfLogitsExactly) {
  at::Tensor x = images(6, 7);
  engine::TorchEngine ra(core::build_zoo_model("mlp:784-8-4", 1), "a");
  engine::TorchEngine rb(core::build_zoo_model("mlp:784-8-4", 2), "b");
  at::Tensor la = ra.logits(x), lb = rb.logits(x);
  ASSERT_FALSE(at::equal(la, lb));

  std::vector<std::unique_ptr<distill::Teacher>> members;
  members.push_back(std::make_unique<engine::TorchEngine>(core::build_zoo_model("mlp:784-8-4", 1), "a"));
  members.push_back(std::make_unique<engine::TorchEngine>(core::build_zoo_model("mlp:784-8-4", 2), "b"));
  distill::EnsembleTeacher e(std::move(members), {1.0, 3.0});
  EXPECT_EQ(e.weights(), (std::vector<double>{0.25, 0.75}));
  at::Tensor l = e.logits(x);
  EXPECT_TRUE(at::equal(l, la * 0.25 + lb * 0.75));
  EXPECT_FALSE(l.requires_grad());
  EXPECT_EQ(e.num_classes(x), 4);
  EXPECT_FALSE(e.has_value("fc1"));
  EXPECT_NE(e.describe().find("graph teacher 'b' weight 0.75"), std::string::npos) << e.describe();
}

namespace {
// A teacher that answers every batch with the same logits row (for the ensemble's combinations).
class FixedLogitsTeacher : public distill::Teacher {
 public:
  explicit FixedLogitsTeacher(std::vector<float> row) : row_(std::move(row)) {}
  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x, const std::vector<std::string>&) override {
    return {{"logits", at::tensor(row_).unsqueeze(0).expand({x.size(0), int64_t(row_.size())}).contiguous()}};
  }
  bool has_value(const std::string& n) const override { return n == "logits"; }
  std::string describe() const override { return "fixed"; }
  void to(const at::Device&) override {}

 private:
  std::vector<float> row_;
};
}  // namespace

TEST(EnsembleTeacher, MedianAndTrimmedMeanIgnoreAnOutlyingMember) {
  // Five members, one of them (the last) far off: per class the values are
  //   class 0: 1, 2, 3, 4, 100     median 3, trimmed (drop 1 each end) mean(2, 3, 4) = 3
  //   class 1: 0, 0, 1, 1, -50     sorted -50, 0, 0, 1, 1: median 0, trimmed mean(0, 0, 1) = 1/3
  auto make = [] {
    std::vector<std::unique_ptr<distill::Teacher>> m;
    for (auto row : std::vector<std::vector<float>>{{1, 0}, {2, 0}, {3, 1}, {4, 1}, {100, -50}})
      m.push_back(std::make_unique<FixedLogitsTeacher>(row));
    return m;
  };
  const at::Tensor x = at::zeros({2, 1, 28, 28});
  distill::EnsembleTeacher mean(make(), {});
  EXPECT_TRUE(at::allclose(mean.logits(x)[0], at::tensor({22.0f, -9.6f})));
  distill::EnsembleTeacher med(make(), {});
  med.set_combine(distill::EnsembleTeacher::Combine::kMedian);
  EXPECT_TRUE(at::equal(med.logits(x), at::tensor({3.0f, 0.0f}).expand({2, 2})));
  distill::EnsembleTeacher trim(make(), {});
  trim.set_combine(distill::EnsembleTeacher::Combine::kTrimmedMean, 0.2);  // floor(0.2 * 5) = 1 each end
  EXPECT_TRUE(at::allclose(trim.logits(x)[1], at::tensor({3.0f, 1.0f / 3})));
  // An even count: the median is the mean of the two middle values (members 1..4: 2,3,4,100 -> 3.5).
  std::vector<std::unique_ptr<distill::Teacher>> four = make();
  four.erase(four.begin());
  distill::EnsembleTeacher even(std::move(four), {});
  even.set_combine(distill::EnsembleTeacher::Combine::kMedian);
  EXPECT_TRUE(at::allclose(even.logits(x)[0], at::tensor({3.5f, 0.5f})));
  expect_input_error([&] { trim.set_combine(distill::EnsembleTeacher::Combine::kTrimmedMean, 0.5); }, {"[0, 0.5)"});
}

TEST(EnsembleTeacher, EmptyWeightsMeanEqualWeights) {
  at::Tensor x = images(3, 8);
  auto e = distill::load_teachers({"mlp:784-8-4", "lenet5,classes=4"}, {}, 0);
  auto* ens = dynamic_cast<distill::EnsembleTeacher*>(e.get());
  ASSERT_NE(ens, nullptr);
  EXPECT_EQ(ens->weights(), (std::vector<double>{0.5, 0.5}));
  at::Tensor expected = ens->member(0).logits(x) * 0.5 + ens->member(1).logits(x) * 0.5;
  EXPECT_TRUE(at::equal(e->logits(x), expected));
}

TEST(EnsembleTeacher, ProvidesLogitsOnly) {
  auto e = distill::load_teachers({"mlp:784-8-4", "mlp:784-6-4"}, {0.5, 0.5}, 0);
  EXPECT_NO_THROW(e->forward(images(2, 0), {"logits"}));
  expect_input_error([&] { e->forward(images(2, 0), {"fc1"}); }, {"fc1", "logits only"});
}

TEST(EnsembleTeacher, MembersWithDifferentClassCountsAreRejected) {
  auto e = distill::load_teachers({"mlp:784-8-4", "mlp:784-8-5"}, {}, 0);
  expect_input_error([&] { e->num_classes(images(1, 0)); }, {"4 classes", "has 5"});
  expect_input_error([&] { e->logits(images(2, 0)); }, {"[2, 4]", "[2, 5]"});
}

TEST(TeacherWeights, BadWeightsAreInputErrors) {
  std::vector<std::string> two = {"mlp:784-8-4", "mlp:784-6-4"};
  expect_input_error([&] { distill::load_teachers(two, {1.0}); }, {"expected one per teacher (2), got 1"});
  expect_input_error([&] { distill::load_teachers(two, {1.0, -0.5}); }, {"weight 2 is -0.5"});
  expect_input_error([&] { distill::load_teachers(two, {std::nan(""), 1.0}); }, {"weight 1"});
  expect_input_error([&] { distill::load_teachers(two, {0.0, 0.0}); }, {"sum to 0"});
  expect_input_error([&] { distill::load_teachers({"mlp:784-8-4"}, {0.0}); }, {"sum to 0"});
  expect_input_error([&] { distill::load_teachers({}, {}); }, {"no teacher"});
  std::vector<std::unique_ptr<distill::Teacher>> members;
  members.push_back(engine::load("mlp:784-8-4"));
  expect_input_error([&] { distill::EnsembleTeacher(std::move(members), {1.0, 1.0}); }, {"got 2"});
  EXPECT_EQ(distill::normalize_teacher_weights({0.7, 0.3}, 2), (std::vector<double>{0.7, 0.3}));
}

TEST(LoadTeachers, OneSpecReturnsThatTeacher) {
  auto t = distill::load_teachers({"mlp:784-8-4"}, {}, 0);
  EXPECT_NE(dynamic_cast<engine::TorchEngine*>(t.get()), nullptr);
}

TEST(LoadTeacher, ZooSpecIsSeeded) {
  at::Tensor x = images(2, 0);
  auto a = engine::load("mlp:784-8-3", 1), b = engine::load("mlp:784-8-3", 1),
       c = engine::load("mlp:784-8-3", 2);
  EXPECT_TRUE(at::equal(a->logits(x), b->logits(x)));
  EXPECT_FALSE(at::equal(a->logits(x), c->logits(x)));
}

TEST(LoadTeacher, MissingOrUnknownNamesTheFile) {
  expect_input_error([] { engine::load("no/such/teacher.onnx"); }, {"no/such/teacher.onnx"});
  expect_input_error([] { engine::load("no/such/teacher.pt"); }, {"no/such/teacher.pt", "does not exist"});
  expect_input_error([] { engine::load("no/such/teacher.torchscript"); }, {"no/such/teacher.torchscript"});
  expect_input_error([] { engine::load("bogus-model"); }, {"bogus-model"});
}

TEST(LoadTeacher, CorruptFilesAreInputErrorsNamingTheFile) {
  pare::testing::TempDir tmp;
  std::string dir = tmp.path();
  std::string pt = dir + "/corrupt.pt", onnx = dir + "/corrupt.onnx", zip = dir + "/zip_no_suffix";
  std::ofstream(pt) << "this is not a TorchScript archive";
  std::ofstream(onnx) << "this is not an ONNX model either";
  std::ofstream(zip) << "PK\x03\x04 truncated";
  expect_input_error([&] { engine::load(pt); }, {pt, "TorchScript"});
  expect_input_error([&] { engine::load(onnx); }, {onnx});
  expect_input_error([&] { engine::load(zip); }, {zip, "TorchScript"});
}

TEST(CheckCompatible, ClassCountMismatchIsAnInputError) {
  engine::TorchEngine t(core::build_zoo_model("cnn", 0), "cnn.onnx");
  core::Module student(core::build_zoo_model("mlp:784-16-5", 0));
  student.train();
  expect_input_error([&] { engine::check_compatible(t, student, images(4, 0)); },
                     {"graph teacher 'cnn.onnx' has 10 classes but student", "has 5"});
  EXPECT_TRUE(student.is_training());

  core::Module ok(core::build_zoo_model("mlp:784-16-10", 0));
  ok.train();
  EXPECT_NO_THROW(engine::check_compatible(t, ok, images(4, 0)));
  EXPECT_TRUE(ok.is_training());
}

// Driven by tests/peer/torchscript_teacher_test.sh, which writes TorchScript models saved by PyTorch,
// an input batch and PyTorch's logits into $PARE_TS_PEER_DIR; this test writes pare's logits next to
// them (<case>.pare.npy) for the script to compare with numpy.
TEST(TorchScriptTeacherPeer, WritesLogitsForTheScript) {
  const char* dir_env = std::getenv("PARE_TS_PEER_DIR");
  if (!dir_env) GTEST_SKIP() << "set by tests/peer/torchscript_teacher_test.sh";
  std::string dir = dir_env;
  at::Tensor x = core::load_npy(dir + "/x.npy");
  int cases = 0;
  for (std::string name : {"scripted", "traced_tuple", "float64"}) {
    std::string path = dir + "/" + name + ".pt";
    if (!file_exists(path)) continue;
    ++cases;
    auto t = engine::load(path);
    ASSERT_NE(dynamic_cast<engine::TorchScriptEngine*>(t.get()), nullptr) << path;
    EXPECT_EQ(t->describe(), "TorchScript teacher '" + path + "'");
    at::Tensor l = t->logits(x);
    EXPECT_EQ(l.scalar_type(), at::kFloat) << name;
    EXPECT_FALSE(l.requires_grad()) << name;
    EXPECT_EQ(t->num_classes(x), l.size(-1)) << name;
    EXPECT_FALSE(t->has_value("features"));
    expect_input_error([&] { t->forward(x, {"features"}); }, {"features", path});
    core::save_npy(l, dir + "/" + name + ".pare.npy");
    // A float64 batch is cast to float32 and gives the same logits.
    EXPECT_TRUE(at::equal(t->logits(x.to(at::kDouble)), l)) << name;
    // Running twice gives the same logits: eval mode (no dropout, no batch statistics).
    EXPECT_TRUE(at::equal(t->logits(x), l)) << name;
    // Wrong input shape: an InputError naming the teacher, not a crash.
    expect_input_error([&] { t->logits(at::zeros({2, 3})); }, {path});
  }
  EXPECT_GT(cases, 0) << "no *.pt files in " << dir;
  if (file_exists(dir + "/corrupt.pt"))
    expect_input_error([&] { engine::load(dir + "/corrupt.pt"); }, {dir + "/corrupt.pt"});
  // A student that disagrees on the number of classes.
  if (file_exists(dir + "/scripted.pt")) {
    auto t = engine::load(dir + "/scripted.pt");
    core::Module student(core::build_zoo_model("mlp:784-16-7", 0));
    expect_input_error([&] { engine::check_compatible(*t, student, x); }, {"classes but student", "has 7"});
  }
}
