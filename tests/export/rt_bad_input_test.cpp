// pare_rt on hostile files and bad inputs: truncated protobuf, negative dims, huge declared dims
// with missing data, external data outside the model's folder, unknown ops, nodes reading values
// nobody defines. rt::Model::load throws pare::InputError naming the file (and the node or input):
// no crash, no abort, no huge allocation. Wrong inputs at run time name the input.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <ATen/ATen.h>

#include <fstream>

#include "core/error.h"
#include "tests/export/rt_test_util.h"
#include "tests/test_util.h"

namespace pare::rt_testing {
namespace {

using pare::testing::expect_input_error;
using pare::testing::TempDir;

// x [N, 4] -> Gemm (w [3, 4], b [3]) -> Relu -> y [N, 3], as an ONNX ModelProto.
onnx::ModelProto good_model() {
  Builder b;
  const std::string x = b.input({core::Dim::sym("N"), 4}, normal(), at::kFloat, "x");
  b.node("Gemm", {x, b.constant(at::randn({3, 4}), "w"), b.constant(at::randn({3}), "b")}, {"h"},
         {{"transB", int64_t{1}}}, "");
  b.g.nodes.back().name = "fc";
  b.node("Relu", {"h"}, {"y"});
  b.g.nodes.back().name = "act";
  b.output("y");
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(core::serialize_onnx(b.finish())));
  return m;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string write(const TempDir& dir, const std::string& name, const onnx::ModelProto& m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return write(dir, name, bytes);
}

onnx::TensorProto* initializer(onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == name) return &t;
  ADD_FAILURE() << "no initializer " << name;
  return nullptr;
}

TEST(RtBadInput, GoodModelLoads) {
  TempDir dir;
  const std::string path = write(dir, "good.onnx", good_model());
  rt::Model m = rt::Model::load(path);
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].name, "x");
}

TEST(RtBadInput, TruncatedFileNamesTheFile) {
  TempDir dir;
  std::string bytes;
  ASSERT_TRUE(good_model().SerializeToString(&bytes));
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    const std::string path = write(dir, "trunc.onnx", bytes.substr(0, cut));
    expect_input_error([&] { rt::Model::load(path); }, {path});
  }
  expect_input_error([&] { rt::Model::load(write(dir, "junk.onnx", "not a model at all")); }, {"junk.onnx"});
  expect_input_error([&] { rt::Model::load(dir.file("missing.onnx")); }, {"missing.onnx"});
}

TEST(RtBadInput, NegativeDimsAreRefused) {
  TempDir dir;
  {
    onnx::ModelProto m = good_model();
    initializer(m, "w")->set_dims(0, -3);
    const std::string path = write(dir, "neg_init.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'w'", "negative"});
  }
  {
    onnx::ModelProto m = good_model();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(-4);
    const std::string path = write(dir, "neg_input.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'x'", "negative"});
  }
}

// Dims whose product is astronomically large, with 4 bytes of data or none: refused before
// anything is allocated from them.
TEST(RtBadInput, HugeDeclaredDimsWithMissingDataAreRefused) {
  TempDir dir;
  {
    onnx::ModelProto m = good_model();
    onnx::TensorProto* w = initializer(m, "w");
    w->set_dims(0, int64_t{1} << 40);
    w->set_dims(1, int64_t{1} << 30);
    w->set_raw_data("abcd");
    const std::string path = write(dir, "huge.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'w'"});
  }
  {
    onnx::ModelProto m = good_model();
    onnx::TensorProto* w = initializer(m, "w");
    w->set_dims(0, int64_t{1} << 33);  // 32 GiB of float declared, 48 bytes present
    const std::string path = write(dir, "big.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'w'"});
  }
  {
    // Declared as external data of 2^40 bytes in a file that does not exist.
    onnx::ModelProto m = good_model();
    onnx::TensorProto* w = initializer(m, "w");
    w->clear_raw_data();
    w->set_dims(0, int64_t{1} << 38);
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value("weights.bin");
    e = w->add_external_data();
    e->set_key("length");
    e->set_value(std::to_string(int64_t{1} << 40));
    const std::string path = write(dir, "huge_ext.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'w'", "weights.bin"});
  }
}

// RUNTIME BUG (rt/model.cpp Model::load_bytes, which plans the declared input shape,
// and plan.cpp; reported, not fixed here): a graph input's declared dims are never checked for
// size. x declared [2^62, 4] loads without an error (the byte count overflows int64 and wraps);
// x declared [2^40, 4] makes load try a 13 TB arena and throw pare::Error "out of memory"
// (`pare run` exit 1, not 2); smaller absurd dims (2^34) would be allocated. Expected: InputError
// naming the file and the input, before any allocation.
TEST(RtBadInput, HugeDeclaredInputDimsAreRefused) {
  TempDir dir;
  for (int64_t d : {int64_t{1} << 62, int64_t{1} << 40}) {
    SCOPED_TRACE(d);
    onnx::ModelProto m = good_model();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(d);
    const std::string path = write(dir, "huge_input.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'x'"});
  }
}

TEST(RtBadInput, ExternalDataOutsideTheModelFolderIsRefused) {
  TempDir dir;
  for (const char* location : {"../outside.bin", "/etc/passwd", "sub/../../outside.bin"}) {
    SCOPED_TRACE(location);
    onnx::ModelProto m = good_model();
    onnx::TensorProto* w = initializer(m, "w");
    w->clear_raw_data();
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value(location);
    const std::string path = write(dir, "escape.onnx", m);
    expect_input_error([&] { rt::Model::load(path); }, {path, "'w'", location});
  }
}

TEST(RtBadInput, UnknownOpNamesTheNodeAndTheOp) {
  TempDir dir;
  onnx::ModelProto m = good_model();
  m.mutable_graph()->mutable_node(1)->set_op_type("Frobnicate");
  const std::string path = write(dir, "unknown.onnx", m);
  expect_input_error([&] { rt::Model::load(path); }, {path, "'act'", "Frobnicate"});
  // An op of another domain pare_rt does not run, and control flow.
  m = good_model();
  m.mutable_graph()->mutable_node(1)->set_domain("com.example");
  auto* op = m.add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  const std::string path2 = write(dir, "domain.onnx", m);
  expect_input_error([&] { rt::Model::load(path2); }, {path2, "'act'", "com.example"});
}

TEST(RtBadInput, NodeReadingAnUndefinedValueNamesTheNodeAndTheValue) {
  TempDir dir;
  onnx::ModelProto m = good_model();
  m.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  const std::string path = write(dir, "undefined.onnx", m);
  expect_input_error([&] { rt::Model::load(path); }, {path, "'act'", "'nowhere'"});
  // A graph output no node computes.
  m = good_model();
  m.mutable_graph()->mutable_output(0)->set_name("ghost");
  const std::string path2 = write(dir, "ghost.onnx", m);
  expect_input_error([&] { rt::Model::load(path2); }, {path2, "'ghost'"});
  // A node reading its own output (a cycle).
  m = good_model();
  m.mutable_graph()->mutable_node(0)->set_input(0, "y");
  const std::string path3 = write(dir, "cycle.onnx", m);
  expect_input_error([&] { rt::Model::load(path3); }, {path3, "'y'"});
}

TEST(RtBadInput, BadAttributesAndShapesNameTheNode) {
  TempDir dir;
  onnx::ModelProto m = good_model();
  // w [3, 4] does not fit x [N, 5].
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(5);
  const std::string path = write(dir, "mismatch.onnx", m);
  expect_input_error([&] { rt::Model::load(path); }, {path, "'fc'"});
  // transB given as a string.
  m = good_model();
  auto* a = m.mutable_graph()->mutable_node(0)->mutable_attribute(0);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("yes");
  const std::string path2 = write(dir, "attr.onnx", m);
  expect_input_error([&] { rt::Model::load(path2); }, {path2, "'fc'", "transB"});
}

TEST(RtBadInput, WrongInputsAtRunTimeNameTheInput) {
  rt::Model m = rt::Model::load_bytes(good_model().SerializeAsString(), "model.onnx");
  std::vector<float> x(2 * 4);
  std::vector<int64_t> xi(2 * 4);
  expect_input_error([&] { m.run({rt::TensorView::of(xi.data(), {2, 4})}); }, {"'x'", "float32", "int64"});
  expect_input_error([&] { m.run({rt::TensorView::of(x.data(), {8})}); }, {"'x'", "rank 2"});
  expect_input_error([&] { m.run({rt::TensorView::of(x.data(), {2, 5})}); }, {"'x'", "dim 1 = 4"});
  expect_input_error([&] { m.run({}); }, {"model.onnx", "1 input"});
  expect_input_error([&] { m.run({rt::TensorView::of(static_cast<float*>(nullptr), {2, 4})}); }, {"'x'", "no data"});
  // Still runs after the refusals.
  EXPECT_EQ(m.run({rt::TensorView::of(x.data(), {2, 4})}).at(0).dims, (std::vector<int64_t>{2, 3}));
}

// Data the graph cannot take, found while running: an InputError naming the node.
TEST(RtBadInput, OutOfRangeIndicesAndIntegerDivisionByZeroNameTheNode) {
  Builder b;
  b.input({3}, ints(0, 3), at::kLong, "i");
  b.input({3}, ints(1, 3), at::kLong, "d");
  b.node("Gather", {b.constant(at::randn({5, 2}), "table"), "i"}, {"y"});
  b.g.nodes.back().name = "lookup";
  b.node("Div", {b.constant(at::tensor({6, 7, 8}, at::kLong), "n"), "d"}, {"q"});
  b.g.nodes.back().name = "divide";
  b.output("y", at::kFloat, {3, 2}).output("q", at::kLong, {3});
  rt::Model m = load_rt(b.g, "data.onnx");
  std::vector<int64_t> i = {0, 7, 1}, d = {1, 2, 3};
  expect_input_error([&] { m.run({rt::TensorView::of(i.data(), {3}), rt::TensorView::of(d.data(), {3})}); },
                     {"'lookup'", "7"});
  i = {0, -5, 4};
  d = {1, 0, 3};
  expect_input_error([&] { m.run({rt::TensorView::of(i.data(), {3}), rt::TensorView::of(d.data(), {3})}); },
                     {"'divide'", "division by zero"});
  d = {1, 2, 3};
  const auto ys = m.run({rt::TensorView::of(i.data(), {3}), rt::TensorView::of(d.data(), {3})});
  EXPECT_EQ(static_cast<const int64_t*>(ys.at(1).data)[1], 3);
}

// Mod: an integer remainder by zero is refused while running, naming the node; a float Mod
// without fmod = 1 (which ONNX does not define) is refused at load.
TEST(RtBadInput, ModByZeroAndAFloatModWithoutFmodAreRefused) {
  Builder b;
  b.input({3}, ints(1, 3), at::kLong, "d");
  b.node("Mod", {b.constant(at::tensor({6, -7, 8}, at::kLong), "n"), "d"}, {"r"});
  b.g.nodes.back().name = "remainder";
  b.output("r", at::kLong, {3});
  rt::Model m = load_rt(b.g, "mod.onnx");
  std::vector<int64_t> d = {4, 0, 3};
  expect_input_error([&] { m.run({rt::TensorView::of(d.data(), {3})}); }, {"'remainder'", "remainder by zero"});
  d = {4, 3, 3};
  EXPECT_EQ(static_cast<const int64_t*>(m.run({rt::TensorView::of(d.data(), {3})}).at(0).data)[1], 2);  // -7 mod 3

  Builder f;
  f.input({3}, normal(), at::kFloat, "x");
  f.node("Mod", {"x", f.constant(at::tensor({2.f}), "two")}, {"r"});
  f.g.nodes.back().name = "float_mod";
  f.output("r", at::kFloat, {3});
  expect_input_error([&] { load_rt(f.g, "float_mod.onnx"); }, {"float_mod", "fmod = 1"});
}

}  // namespace
}  // namespace pare::rt_testing
