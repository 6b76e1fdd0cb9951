// Tests for distill/student: students derived from a teacher by keeping some of its layers.
#include "distill/student.h"

#include <ATen/core/grad_mode.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/module.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "core/zoo.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;

namespace {
const char* kTeacher = "transformer:vocab=50,d=16,heads=2,layers=4,classes=5,seq=6";

at::Tensor tokens(int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  return at::randint(50, {n, 6}, gen, at::kLong);
}

at::Tensor run(const core::Graph& g, const at::Tensor& x) {
  core::Module m(g);
  m.eval();
  at::NoGradGuard no_grad;
  return m.forward({x})[0];
}
}  // namespace

TEST(FindLayerBlocks, FindsTheZooTransformerLayers) {
  core::Graph g = core::build_zoo_model(kTeacher, 1);
  auto blocks = distill::find_layer_blocks(g);
  EXPECT_EQ(blocks.prefix, "layer");
  ASSERT_EQ(blocks.nodes.size(), 4u);
  for (auto& [index, nodes] : blocks.nodes)
    for (int i : nodes) EXPECT_EQ(g.nodes[i].name.rfind("layer" + std::to_string(index) + ".", 0), 0u);
}

TEST(DeriveStudent, KeepingLayersEqualsTheShallowModelWithTheTeachersWeights) {
  // Keeping layers 1 and 3 of a 4-layer teacher must compute exactly what a 2-layer model of the
  // same shape computes when given the teacher's embeddings, layers 1 and 3, and head.
  for (const char* norm : {"pre", "post"}) {
    const std::string spec = std::string(kTeacher) + ",norm=" + norm;
    core::Graph teacher = core::build_zoo_model(spec, 1);
    core::Graph student = distill::derive_student(teacher, "from-teacher:layers=1,3");
    core::Graph shallow = core::build_zoo_model(
        "transformer:vocab=50,d=16,heads=2,layers=2,classes=5,seq=6,norm=" + std::string(norm), 2);
    for (auto& [name, t] : shallow.initializers) {
      std::string from = name;
      if (name.rfind("layer0.", 0) == 0) from = "layer1." + name.substr(7);
      if (name.rfind("layer1.", 0) == 0) from = "layer3." + name.substr(7);
      ASSERT_TRUE(teacher.initializers.count(from)) << from;
      t = teacher.initializers.at(from).clone();
      ASSERT_TRUE(student.initializers.count(from)) << from;
    }
    EXPECT_EQ(student.parameter_count(), shallow.parameter_count());
    EXPECT_EQ(student.metadata.count("pare.zoo_spec"), 0u);
    EXPECT_EQ(student.metadata.at("pare.derived_from"), "from-teacher:layers=1,3");
    at::Tensor x = tokens(3);
    EXPECT_TRUE(at::allclose(run(student, x), run(shallow, x), 1e-6, 1e-6)) << norm;
    // The teacher itself is untouched.
    EXPECT_EQ(distill::find_layer_blocks(teacher).nodes.size(), 4u);
  }
}

// PyTorch's exporter stores an equal constant once, as a Constant node named after the first layer
// that uses it, and later layers read it from there: such a node is data, not a value leaving its
// layer, and stays when its layer is dropped (torch 2.x exports of nn.TransformerEncoder do this).
TEST(DeriveStudent, ALaterLayerReadingAConstantOfADroppedLayerKeepsIt) {
  core::Graph teacher = core::build_zoo_model(kTeacher, 1);
  const core::Graph plain = distill::derive_student(teacher, "from-teacher:layers=1,3");
  // Move one weight of layer 3 into a Constant node named after layer 0.
  std::string moved;
  for (auto& n : teacher.nodes)
    if (moved.empty() && n.name.rfind("layer3.", 0) == 0)
      for (auto& in : n.inputs)
        if (moved.empty() && teacher.is_initializer(in)) moved = in;
  ASSERT_FALSE(moved.empty());
  const at::Tensor value = teacher.initializers.at(moved);
  teacher.initializers.erase(moved);
  core::Node c;
  c.op_type = "Constant";
  c.name = "layer0.shared_constant";
  c.outputs = {moved};
  c.attrs["value"] = value;
  teacher.nodes.insert(teacher.nodes.begin(), c);
  ASSERT_EQ(distill::find_layer_blocks(teacher).nodes.at(0).front(), 0);  // counted in layer 0
  const core::Graph student = distill::derive_student(teacher, "from-teacher:layers=1,3");
  const at::Tensor x = tokens(4);
  EXPECT_TRUE(at::equal(run(student, x), run(plain, x)));
}

TEST(DeriveStudent, KeepingEveryLayerIsTheTeacher) {
  core::Graph teacher = core::build_zoo_model(kTeacher, 3);
  core::Graph student = distill::derive_student(teacher, "from-teacher:layers=0,1,2,3");
  at::Tensor x = tokens(2);
  EXPECT_TRUE(at::equal(run(student, x), run(teacher, x)));
}

TEST(DeriveStudent, DropsAResNetStageOnlyWhenItKeepsTheShape) {
  core::Graph teacher = core::build_zoo_model("resnet:2", 0);
  // Stage 1 maps 16 channels to 16 at the same size: it can go. Stage 2 halves the size.
  core::Graph student = distill::derive_student(teacher, "from-teacher:layers=2,3");
  EXPECT_LT(student.parameter_count(), teacher.parameter_count());
  core::Module m(student);
  EXPECT_EQ(m.forward({at::zeros({1, 1, 28, 28})})[0].sizes(), (std::vector<int64_t>{1, 10}));
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:layers=1,3"); },
                     {"cannot drop layer 2", "same shape in and out"});
}

TEST(DeriveStudent, BadSpecsAreInputErrors) {
  core::Graph teacher = core::build_zoo_model(kTeacher, 1);
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:layers=0,7"); },
                     {"no layer 7", "0,1,2,3"});
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:layers=2,0"); }, {"ascending"});
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:layers=a"); }, {"'a'"});
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:layers="); }, {"at least one"});
  expect_input_error([&] { distill::derive_student(teacher, "from-teacher:width=8"); }, {"layers="});
  expect_input_error([&] { distill::derive_student(core::build_zoo_model("mlp:784-30-20-10", 0), "from-teacher:layers=0"); },
                     {"no repeated layers"});
}

// Driven by tests/peer/derived_student_test.sh, which exports a 2-layer nn.TransformerEncoder
// classifier with PyTorch into $PARE_DERIVE_PEER_DIR, with inputs and the outputs of the model
// keeping only layer 1; this test writes the derived student's outputs next to them
// (transformer.b<B>.keep.pare.npy) for the script to compare.
TEST(DerivedStudentPeer, WritesOutputsForTheScript) {
  const char* dir_env = std::getenv("PARE_DERIVE_PEER_DIR");
  if (!dir_env) GTEST_SKIP() << "set by tests/peer/derived_student_test.sh";
  const std::string dir = dir_env;
  core::Graph teacher = core::load_model(dir + "/transformer.onnx");
  auto blocks = distill::find_layer_blocks(teacher);
  EXPECT_EQ(blocks.prefix, "/encoder/layers.");
  EXPECT_EQ(blocks.nodes.size(), 2u);
  core::Graph student = distill::derive_student(teacher, "from-teacher:layers=1");
  EXPECT_LT(student.parameter_count(), teacher.parameter_count());
  for (int b : {1, 5}) {
    const std::string stem = dir + "/transformer.b" + std::to_string(b);
    core::save_npy(run(student, core::load_npy(stem + ".input.npy")), stem + ".keep.pare.npy");
  }
}
