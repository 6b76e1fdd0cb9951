#include "core/onnx_io.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <stdlib.h>
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include "core/error.h"
#include "tests/test_util.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_reader.h"

namespace pare::core {
namespace {

using pare::testing::TempDir;

using pare::testing::bitwise_equal;
using pare::testing::write_bytes;

::testing::AssertionResult attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index())
    return ::testing::AssertionFailure() << "kind " << attr_kind_name(attr_kind(a)) << " vs "
                                         << attr_kind_name(attr_kind(b));
  bool same = false;
  switch (attr_kind(a)) {
    case AttrKind::kTensor: return bitwise_equal(std::get<at::Tensor>(a), std::get<at::Tensor>(b));
    case AttrKind::kInt: same = std::get<int64_t>(a) == std::get<int64_t>(b); break;
    case AttrKind::kFloat: same = std::get<float>(a) == std::get<float>(b); break;
    case AttrKind::kString: same = std::get<std::string>(a) == std::get<std::string>(b); break;
    case AttrKind::kInts: same = std::get<std::vector<int64_t>>(a) == std::get<std::vector<int64_t>>(b); break;
    case AttrKind::kFloats: same = std::get<std::vector<float>>(a) == std::get<std::vector<float>>(b); break;
    case AttrKind::kStrings:
      same = std::get<std::vector<std::string>>(a) == std::get<std::vector<std::string>>(b);
      break;
  }
  if (!same) return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

void expect_value_infos_equal(const std::vector<ValueInfo>& a, const std::vector<ValueInfo>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].name);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].dtype, b[i].dtype);
    EXPECT_EQ(a[i].has_shape, b[i].has_shape);
    EXPECT_EQ(shape_str(a[i].shape), shape_str(b[i].shape));
    EXPECT_TRUE(a[i].shape == b[i].shape);
  }
}

void expect_graphs_equal(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.opset, b.opset);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.doc, b.doc);
  expect_value_infos_equal(a.inputs, b.inputs);
  expect_value_infos_equal(a.outputs, b.outputs);
  expect_value_infos_equal(a.value_info, b.value_info);
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (const auto& [name, t] : a.initializers) {
    ASSERT_TRUE(b.initializers.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(t, b.initializers.at(name))) << name;
  }
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node& x = a.nodes[i];
    const Node& y = b.nodes[i];
    SCOPED_TRACE(x.describe());
    EXPECT_EQ(x.op_type, y.op_type);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.domain, y.domain);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    ASSERT_EQ(x.attrs.size(), y.attrs.size());
    for (const auto& [k, v] : x.attrs) {
      ASSERT_TRUE(y.attrs.count(k)) << k;
      EXPECT_TRUE(attr_equal(v, y.attrs.at(k))) << k;
    }
  }
}

// x [N,4] -> Gemm(transB) -> Relu -> y [N,3]
Graph gemm_relu() {
  at::manual_seed(0);
  Graph g;
  g.name = "tiny";
  g.doc = "a Gemm and a Relu";
  g.metadata = {{"author", "pare tests"}, {"task", "unit"}};
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 4}});
  g.initializers["fc.weight"] = at::randn({3, 4});
  g.initializers["fc.bias"] = at::randn({3});
  g.add_node("Gemm", {"x", "fc.weight", "fc.bias"}, {"h"},
             {{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 1.0f}}, "fc");
  g.add_node("Relu", {"h"}, {"y"}, {}, "relu");
  g.value_info.push_back({"h", at::kFloat, {Dim::sym("N"), 3}});
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 3}});
  return g;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------

TEST(OnnxIo, RoundTripsGemmRelu) {
  const Graph g = gemm_relu();
  g.verify();
  const std::string bytes = serialize_onnx(g);
  const Graph back = parse_onnx(bytes, "tiny.onnx");
  expect_graphs_equal(g, back);

  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  EXPECT_EQ(m.ir_version(), 8);
  EXPECT_EQ(m.producer_name(), "pare");
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "N");
  EXPECT_EQ(m.graph().input_size(), 1);  // initializers are not listed as inputs
  for (const auto& t : m.graph().initializer()) EXPECT_TRUE(t.has_raw_data()) << t.name();
}

TEST(OnnxIo, RoundTripsEveryAttributeKind) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("batch"), Dim(), 2}});
  g.outputs.push_back({"y", at::kFloat, {}, false});
  g.add_node("AttrZoo", {"x", ""}, {"y"},
             {{"i", int64_t{-7}},
              {"f", 2.5f},
              {"s", std::string("same\0bytes", 10)},
              {"t", at::arange(6, at::kFloat).reshape({2, 3}).to(at::kHalf)},
              {"t0", at::scalar_tensor(5, at::kLong)},
              {"ints", std::vector<int64_t>{1, -2, 3}},
              {"floats", std::vector<float>{0.25f, -1.0f}},
              {"strings", std::vector<std::string>{"a", "", "c"}},
              {"empty_ints", std::vector<int64_t>{}}},
             "zoo")
      .domain = "pare.test";
  // The checker wants every graph output to have a shape, even an unknown-rank one.
  const std::string msg = message_of([&] { serialize_onnx(g); });
  EXPECT_NE(msg.find("output 'y' has no shape"), std::string::npos) << msg;
  const Graph unchecked = parse_onnx(serialize_onnx(g, false), "a.onnx", OnnxLoadOptions().verify(false));
  expect_graphs_equal(g, unchecked);

  // Custom domains pass the checker; pare itself does not know the op, so skip verify().
  g.outputs[0] = {"y", at::kFloat, {Dim::sym("batch"), 3}};
  const Graph back = parse_onnx(serialize_onnx(g), "attrs.onnx", OnnxLoadOptions().verify(false));
  expect_graphs_equal(g, back);
}

TEST(OnnxIo, RoundTripsInitializersOfEveryDtype) {
  Graph g = gemm_relu();
  const at::ScalarType types[] = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kChar,
                                  at::kByte, at::kShort,    at::kInt,   at::kLong,   at::kBool};
  for (auto type : types) {
    const std::string n = c10::toString(type);
    g.initializers["m_" + n] = (at::randn({2, 3}) * 50).to(type);
    g.initializers["s_" + n] = at::ones({}, type);
    g.initializers["e_" + n] = at::zeros({0, 3}, type);
  }
  expect_graphs_equal(g, parse_onnx(serialize_onnx(g), "dtypes.onnx"));
}

// Builds a model proto by hand: typed data fields, weights listed as inputs, and other things
// pare itself never writes.
onnx::ModelProto hand_model() {
  onnx::ModelProto m;
  m.set_ir_version(6);
  auto* op = m.add_opset_import();
  op->set_domain("ai.onnx");
  op->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("hand");
  g->set_doc_string("graph doc");
  auto add_input = [&](const std::string& name, int elem, std::vector<int64_t> dims) {
    auto* vi = g->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (auto d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  add_input("x", onnx::TensorProto::FLOAT, {2, 3});
  add_input("w", onnx::TensorProto::FLOAT, {3});  // also an initializer
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  for (float v : {1.0f, -2.0f, 3.5f}) w->add_float_data(v);
  auto* node = g->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  auto* tt = out->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  tt->mutable_shape()->add_dim();  // unknown, unnamed
  return m;
}

onnx::TensorProto* add_typed(onnx::ModelProto& m, const std::string& name, int type,
                             std::vector<int64_t> dims) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (auto d : dims) t->add_dims(d);
  return t;
}

TEST(OnnxIo, ReadsTypedDataFieldsAndDropsInitializersFromInputs) {
  onnx::ModelProto m = hand_model();
  auto* b = add_typed(m, "b", onnx::TensorProto::BOOL, {3});
  for (int v : {1, 0, 1}) b->add_int32_data(v);
  auto* i8 = add_typed(m, "i8", onnx::TensorProto::INT8, {2});
  for (int v : {-3, 127}) i8->add_int32_data(v);
  auto* u8 = add_typed(m, "u8", onnx::TensorProto::UINT8, {2});
  for (int v : {255, 7}) u8->add_int32_data(v);
  add_typed(m, "i16", onnx::TensorProto::INT16, {})->add_int32_data(-300);
  auto* f16 = add_typed(m, "f16", onnx::TensorProto::FLOAT16, {2});
  for (int v : {0x3C00, 0xC000}) f16->add_int32_data(v);  // 1.0, -2.0
  add_typed(m, "bf16", onnx::TensorProto::BFLOAT16, {1})->add_int32_data(0x3F80);  // 1.0
  auto* i64 = add_typed(m, "i64", onnx::TensorProto::INT64, {2});
  for (int64_t v : {int64_t{1} << 40, int64_t{-1}}) i64->add_int64_data(v);
  auto* f64 = add_typed(m, "f64", onnx::TensorProto::DOUBLE, {1, 2});
  for (double v : {0.125, 1e300}) f64->add_double_data(v);
  auto* i32 = add_typed(m, "i32", onnx::TensorProto::INT32, {2});
  for (int v : {5, -6}) i32->add_int32_data(v);
  add_typed(m, "empty", onnx::TensorProto::FLOAT, {0});
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const Graph g = parse_onnx(bytes, "hand.onnx");

  EXPECT_EQ(g.name, "hand");
  EXPECT_EQ(g.doc, "graph doc");
  EXPECT_EQ(g.opset, 13);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].name, "x");
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(shape_str(g.outputs[0].shape), shape_str({Dim::sym("N"), Dim()}));
  const auto& I = g.initializers;
  EXPECT_TRUE(bitwise_equal(I.at("w"), at::tensor({1.0f, -2.0f, 3.5f})));
  EXPECT_TRUE(bitwise_equal(I.at("b"), at::tensor({1, 0, 1}).to(at::kBool)));
  EXPECT_TRUE(bitwise_equal(I.at("i8"), at::tensor({-3, 127}).to(at::kChar)));
  EXPECT_TRUE(bitwise_equal(I.at("u8"), at::tensor({255, 7}).to(at::kByte)));
  EXPECT_TRUE(bitwise_equal(I.at("i16"), at::scalar_tensor(-300, at::kShort)));
  EXPECT_TRUE(bitwise_equal(I.at("f16"), at::tensor({1.0, -2.0}).to(at::kHalf)));
  EXPECT_TRUE(bitwise_equal(I.at("bf16"), at::tensor({1.0}).to(at::kBFloat16)));
  EXPECT_TRUE(bitwise_equal(I.at("i64"), at::tensor({int64_t{1} << 40, int64_t{-1}})));
  EXPECT_TRUE(bitwise_equal(I.at("f64"), at::tensor({0.125, 1e300}, at::kDouble).reshape({1, 2})));
  EXPECT_TRUE(bitwise_equal(I.at("i32"), at::tensor({5, -6}, at::kInt)));
  EXPECT_TRUE(bitwise_equal(I.at("empty"), at::zeros({0})));
}

TEST(OnnxIo, RejectsDataThatDoesNotMatchTheShape) {
  onnx::ModelProto m = hand_model();
  add_typed(m, "short", onnx::TensorProto::FLOAT, {4})->add_float_data(1.0f);
  add_typed(m, "raw", onnx::TensorProto::FLOAT, {1LL << 40, 1LL << 30})->set_raw_data("abcd");
  add_typed(m, "str", onnx::TensorProto::STRING, {1})->add_string_data("s");
  for (const char* bad : {"short", "raw", "str"}) {
    onnx::ModelProto one = m;
    auto* inits = one.mutable_graph()->mutable_initializer();
    for (int i = inits->size() - 1; i >= 0; --i)
      if (inits->Get(i).name() != bad && inits->Get(i).name() != "w") inits->DeleteSubrange(i, 1);
    const std::string msg = message_of([&] { parse_onnx(one.SerializeAsString(), "bad.onnx"); });
    EXPECT_NE(msg.find("'bad.onnx'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
  }
}

TEST(OnnxIo, GraphAttributeIsRejectedNamingTheNode) {
  onnx::ModelProto m = hand_model();
  auto* node = m.mutable_graph()->add_node();
  node->set_op_type("If");
  node->set_name("branch");
  node->add_input("x");
  node->add_output("z");
  auto* a = node->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("then");
  EXPECT_THROW(parse_onnx(m.SerializeAsString(), "if.onnx"), InputError);
  const std::string msg = message_of([&] { parse_onnx(m.SerializeAsString(), "if.onnx"); });
  EXPECT_NE(msg.find("branch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("control flow"), std::string::npos) << msg;
}

TEST(OnnxIo, UnknownOpThrowsInputErrorNamingIt) {
  Graph g = gemm_relu();
  g.nodes[1].op_type = "FancyActivation";
  const std::string bytes = serialize_onnx(g, /*check=*/false);
  EXPECT_THROW(parse_onnx(bytes, "fancy.onnx"), InputError);
  const std::string msg = message_of([&] { parse_onnx(bytes, "fancy.onnx"); });
  EXPECT_NE(msg.find("FancyActivation"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fancy.onnx"), std::string::npos) << msg;
  EXPECT_NO_THROW(parse_onnx(bytes, "fancy.onnx", OnnxLoadOptions().verify(false)));
}

TEST(OnnxIo, TruncatedOrGarbageFileThrowsInputErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.file("m.onnx");
  save_onnx(gemm_relu(), path);
  const std::string full = read_file(path);
  for (size_t keep : {full.size() - 1, full.size() / 2, full.size() / 3, size_t{7}, size_t{1}, size_t{0}}) {
    SCOPED_TRACE(keep);
    write_bytes(path, full.substr(0, keep));
    try {
      load_onnx(path);
      ADD_FAILURE() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  write_bytes(path, "\x93NUMPY this is not a model at all, just bytes\xff\xff\xff\xff");
  EXPECT_THROW(load_onnx(path), InputError);
  EXPECT_THROW(load_onnx(dir.file("missing.onnx")), InputError);
}

TEST(OnnxIo, SaveLoadRoundTripThroughAFile) {
  TempDir dir;
  const Graph g = gemm_relu();
  save_onnx(g, dir.file("m.onnx"));
  expect_graphs_equal(g, load_onnx(dir.file("m.onnx")));
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.onnx"});  // no temporary left, no data file
}

TEST(OnnxIo, ExternalDataRoundTrip) {
  TempDir dir;
  Graph g = gemm_relu();
  g.initializers["big"] = at::randn({32, 32});           // 4 KiB: goes external
  g.initializers["big16"] = at::randn({40, 20}).to(at::kHalf);
  const std::string path = dir.file("ext.onnx");
  save_onnx(g, path, OnnxSaveOptions().external_data(true).external_threshold(1024));
  ASSERT_TRUE(file_exists(path + ".data"));
  EXPECT_EQ(read_file(path + ".data").size(), 32u * 32 * 4 + 40 * 20 * 2);

  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(read_file(path)));
  int external = 0;
  for (const auto& t : m.graph().initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) {
      EXPECT_TRUE(t.has_raw_data()) << t.name();
      continue;
    }
    ++external;
    EXPECT_FALSE(t.has_raw_data());
    std::map<std::string, std::string> kv;
    for (const auto& e : t.external_data()) kv[e.key()] = e.value();
    EXPECT_EQ(kv["location"], "ext.onnx.data");
    EXPECT_TRUE(kv.count("offset") && kv.count("length")) << t.name();
  }
  EXPECT_EQ(external, 2);  // fc.weight (48 bytes) and fc.bias stay inline
  expect_graphs_equal(g, load_onnx(path));

  // External tensors are mapped privately: changed in place (training), the file stays as it was.
  Graph loaded = load_onnx(path);
  const std::string before = read_file(path + ".data");
  loaded.initializers["big"].add_(1);
  EXPECT_TRUE(at::allclose(loaded.initializers["big"], g.initializers["big"] + 1));
  EXPECT_EQ(read_file(path + ".data"), before);

  // Moved together, the model still finds its data relative to its own folder.
  TempDir other;
  std::rename(path.c_str(), other.file("moved.onnx").c_str());
  std::rename((path + ".data").c_str(), other.file("ext.onnx.data").c_str());
  expect_graphs_equal(g, load_onnx(other.file("moved.onnx")));

  // A data file that is too short names the tensor and the file.
  const std::string data = read_file(other.file("ext.onnx.data"));
  write_bytes(other.file("ext.onnx.data"), data.substr(0, data.size() - 10));
  const std::string msg = message_of([&] { load_onnx(other.file("moved.onnx")); });
  EXPECT_NE(msg.find("ext.onnx.data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("moved.onnx"), std::string::npos) << msg;
  std::remove(other.file("ext.onnx.data").c_str());
  EXPECT_THROW(load_onnx(other.file("moved.onnx")), InputError);
}

TEST(OnnxIo, ExternalDataMustStayInsideTheModelFolder) {
  onnx::ModelProto m = hand_model();
  auto* t = add_typed(m, "evil", onnx::TensorProto::FLOAT, {1});
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("../../etc/passwd");
  const std::string msg = message_of([&] { parse_onnx(m.SerializeAsString(), "/tmp/x/evil.onnx"); });
  EXPECT_NE(msg.find("'evil'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("relative path"), std::string::npos) << msg;
}

TEST(OnnxIo, SaveLeavesNoFileWhenTheCheckerRejects) {
  TempDir dir;
  Graph g = gemm_relu();
  g.nodes[1].op_type = "NotAnOnnxOp";
  const std::string path = dir.file("bad.onnx");
  try {
    save_onnx(g, path, OnnxSaveOptions().external_data(true).external_threshold(0));
    FAIL() << "expected the checker to reject the model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NotAnOnnxOp"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.list().empty());
  EXPECT_THROW(serialize_onnx(g), Error);
  EXPECT_NO_THROW(save_onnx(g, path, OnnxSaveOptions().check(false)));
  EXPECT_TRUE(file_exists(path));
}

// Zeros at every other position, a -0.0 and a NaN, an all-zero and an empty tensor, in every dtype.
Graph sparse_graph() {
  Graph g = gemm_relu();
  at::Tensor w = g.initializers["fc.weight"].clone();
  w.view({-1}).slice(0, 0, 12, 2).zero_();
  w.view({-1})[1] = -0.0f;
  w.view({-1})[3] = std::numeric_limits<float>::quiet_NaN();
  g.initializers["fc.weight"] = w;
  const at::ScalarType types[] = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kChar,
                                  at::kByte, at::kShort,    at::kInt,   at::kLong,   at::kBool};
  for (auto type : types) {
    const std::string n = c10::toString(type);
    at::Tensor m = (at::randn({3, 5}) * 50).to(type);
    m.view({-1}).slice(0, 0, 15, 3).zero_();
    g.initializers["m_" + n] = m;
    g.initializers["z_" + n] = at::zeros({2, 2}, type);
    g.initializers["e_" + n] = at::zeros({0, 3}, type);
  }
  return g;
}

// Those ONNX allows as sparse initializers: rank >= 1, positive dims.
std::set<std::string> sparse_able(const Graph& g) {
  std::set<std::string> r;
  for (const auto& [name, t] : g.initializers)
    if (t.dim() >= 1 && t.numel() > 0) r.insert(name);
  return r;
}

TEST(OnnxIo, SparseInitializersRoundTripBitExact) {
  const Graph g = sparse_graph();
  const auto names = sparse_able(g);
  const std::string bytes = serialize_onnx(g, OnnxSaveOptions().sparse(names));  // the checker passes it
  expect_graphs_equal(g, parse_onnx(bytes, "sparse.onnx"));

  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  const auto& gp = m.graph();
  EXPECT_EQ(gp.initializer_size(), 10);  // the empty tensors, which ONNX cannot store sparse
  EXPECT_EQ(gp.sparse_initializer_size(), static_cast<int>(names.size()));
  EXPECT_EQ(gp.input_size(), 1);  // sparse initializers are not graph inputs
  for (const auto& sp : gp.sparse_initializer()) {
    const std::string& name = sp.values().name();
    SCOPED_TRACE(name);
    ASSERT_TRUE(g.initializers.count(name));
    const at::Tensor& dense = g.initializers.at(name);
    EXPECT_EQ(std::vector<int64_t>(sp.dims().begin(), sp.dims().end()), dense.sizes().vec());
    ASSERT_EQ(sp.values().dims_size(), 1);
    ASSERT_EQ(sp.indices().dims_size(), 1);  // linear indices
    EXPECT_EQ(sp.indices().data_type(), onnx::TensorProto::INT64);
    const int64_t nnz = sp.values().dims(0);
    EXPECT_EQ(sp.indices().dims(0), nnz);
    if (name != "fc.bias") EXPECT_LT(nnz, dense.numel());  // all but the bias have zeros
    std::vector<int64_t> idx(static_cast<size_t>(nnz));
    if (nnz) std::memcpy(idx.data(), sp.indices().raw_data().data(), idx.size() * 8);
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  }
  // -0.0 is a value, not a zero: it comes back with its sign.
  const at::Tensor back = parse_onnx(bytes, "sparse.onnx").initializers.at("fc.weight");
  EXPECT_TRUE(std::signbit(back.view({-1})[1].item<float>()));
}

TEST(OnnxIo, SparseNamesMustBeNonEmptyInitializersOfRankOneOrMore) {
  Graph g = gemm_relu();
  g.initializers["s"] = at::zeros({});
  g.initializers["e"] = at::zeros({0, 3});
  pare::testing::expect_input_error([&] { serialize_onnx(g, OnnxSaveOptions().sparse({"nope"})); },
                                    {"'nope'", "no initializer"});
  pare::testing::expect_input_error([&] { serialize_onnx(g, OnnxSaveOptions().sparse({"s"})); },
                                    {"'s'", "rank >= 1"});
  pare::testing::expect_input_error([&] { serialize_onnx(g, OnnxSaveOptions().sparse({"e"})); },
                                    {"'e'", "positive dims"});
  EXPECT_THROW(sparse_cost("e", g.initializers.at("e")), InputError);
  TempDir dir;
  pare::testing::expect_input_error([&] { save_onnx(g, dir.file("m.onnx"), OnnxSaveOptions().sparse({"s"})); },
                                    {"'s'"});
  EXPECT_TRUE(dir.list().empty());
}

TEST(OnnxIo, SparseInitializersStayInlineWithExternalDataAndTheFileSaysWhich) {
  TempDir dir;
  const Graph g = sparse_graph();
  const std::string path = dir.file("m.onnx");
  save_onnx(g, path, OnnxSaveOptions().external_data(true).external_threshold(0).sparse({"fc.weight", "m_Float"}));
  OnnxFileInfo info;
  const Graph back = load_onnx(path, OnnxLoadOptions(), &info);
  expect_graphs_equal(g, back);
  EXPECT_EQ(info.sparse_initializers, (std::vector<std::string>{"fc.weight", "m_Float"}));
  EXPECT_EQ(info.file_bytes, static_cast<int64_t>(read_file(path).size()));
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(read_file(path)));
  for (const auto& sp : m.graph().sparse_initializer())
    EXPECT_NE(sp.values().data_location(), onnx::TensorProto::EXTERNAL) << sp.values().name();
}

TEST(OnnxIo, SparseCostIsWhatTheFileGainsOrLoses) {
  Graph g = gemm_relu();
  at::Tensor w = at::randn({64, 32});
  w.view({-1}).narrow(0, 0, 64 * 32 * 9 / 10).zero_();  // 90% zeros: COO is smaller
  g.initializers["big"] = w;
  g.add_node("Identity", {"big"}, {"big_out"}, {}, "keep");
  g.outputs.push_back({"big_out", at::kFloat, {64, 32}});
  for (const std::string name : {"big", "fc.bias"}) {  // fc.bias: no zeros, COO is larger
    SCOPED_TRACE(name);
    const SparseCost c = sparse_cost(name, g.initializers.at(name));
    EXPECT_EQ(c.elements, g.initializers.at(name).numel());
    const int64_t dense = static_cast<int64_t>(serialize_onnx(g).size());
    const int64_t sparse = static_cast<int64_t>(serialize_onnx(g, OnnxSaveOptions().sparse({name})).size());
    EXPECT_EQ(dense - sparse, c.dense_bytes - c.sparse_bytes);
  }
  const SparseCost big = sparse_cost("big", w);
  EXPECT_EQ(big.nonzeros, 64 * 32 - 64 * 32 * 9 / 10);
  EXPECT_LT(big.sparse_bytes, big.dense_bytes);
  EXPECT_NEAR(double(big.sparse_bytes), 12.0 * double(big.nonzeros), 64);  // 4 value + 8 index bytes
  const SparseCost bias = sparse_cost("fc.bias", g.initializers.at("fc.bias"));
  EXPECT_EQ(bias.nonzeros, 3);
  EXPECT_GT(bias.sparse_bytes, bias.dense_bytes);
}

TEST(OnnxLoadModel, ReadsFilesAndZooSpecsAndExplainsAnythingElse) {
  TempDir dir;
  save_onnx(gemm_relu(), dir.file("m.onnx"));
  EXPECT_EQ(load_model(dir.file("m.onnx")).nodes.size(), 2u);
  const Graph mlp = load_model("mlp:784-30-10", 3);
  EXPECT_FALSE(mlp.nodes.empty());

  const std::string msg = message_of([&] { load_model(dir.file("nothing.onnx")); });
  EXPECT_NE(msg.find("neither an ONNX file nor a zoo model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlp:"), std::string::npos) << msg;
  EXPECT_THROW(load_model("nothing-here"), InputError);
}

TEST(OnnxLoadModel, ZooModelsSurviveTheCheckerAndARoundTrip) {
  TempDir dir;
  for (const char* spec : {"mlp:784-30-10", "cnn"}) {
    SCOPED_TRACE(spec);
    const Graph g = load_model(spec, 1);
    save_onnx(g, dir.file("z.onnx"));
    expect_graphs_equal(g, load_onnx(dir.file("z.onnx")));
  }
}

}  // namespace
}  // namespace pare::core

namespace pare::core {
namespace {

// What a model may declare (reader::kMinOpset..kMaxOpset, known domains, kMaxRank, kMaxDim): an
// opset from the future runs silently nowhere; ONNX Runtime refuses it too.
TEST(OnnxIo, OpsetsOutsideWhatPareImplementsAreRefusedNamingTheRange) {
  for (int64_t v : {int64_t{0}, reader::kMaxOpset + 1, int64_t{99}}) {
    onnx::ModelProto m = hand_model();
    m.mutable_opset_import(0)->set_version(v);
    pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "future.onnx"); },
                                      {"'future.onnx'", "opset " + std::to_string(v), "opsets 6 to 23"});
  }
  // Opsets before 6 are read when every op means there what it means in pare (Relu only dropped
  // consumed_inputs), and refused naming the first op that does not (Add had `broadcast`).
  for (int64_t v : {int64_t{1}, reader::kMinOpset - 1}) {
    onnx::ModelProto m = hand_model();
    m.mutable_opset_import(0)->set_version(v);
    EXPECT_EQ(parse_onnx(m.SerializeAsString(), "old.onnx").opset, v);
    m.mutable_graph()->mutable_node(0)->set_op_type("Add");
    pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "old.onnx"); },
                                      {"'old.onnx'", "opset " + std::to_string(v), "opsets 6 to 23",
                                       "older ones only for ops unchanged since", "Add is not"});
  }
  for (int64_t v : {reader::kMinOpset, reader::kMaxOpset}) {
    onnx::ModelProto m = hand_model();
    m.mutable_opset_import(0)->set_version(v);
    EXPECT_EQ(parse_onnx(m.SerializeAsString(), "ok.onnx").opset, v);
  }
}

// Before opset 13, Softmax, LogSoftmax and Hardmax normalise the input flattened to 2-D at `axis`
// (default 1): an old model gets that function, not the opset-13 one along a single axis.
TEST(OnnxIo, SoftmaxOfOpsetsBefore13NormalisesTheFlattenedRows) {
  at::Tensor x = at::randn({2, 3, 4}) * 3;
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    SCOPED_TRACE(op);
    for (int64_t opset : {11, 13}) {
      Graph g;
      g.opset = opset;
      g.inputs.push_back({"x", at::kFloat, {2, 3, 4}});
      g.add_node(op, {"x"}, {"y"}, {}, "sm");
      g.outputs.push_back({"y", at::kFloat, {2, 3, 4}});
      Module m(parse_onnx(serialize_onnx(g), "old.onnx"), Module::Use::kFrozen);
      at::Tensor y = m.forward({x})[0];
      at::Tensor rows = x.reshape({2, 12}), last = x;
      at::Tensor want;
      if (std::string(op) == "Softmax") want = opset < 13 ? at::softmax(rows, 1).reshape({2, 3, 4}) : at::softmax(last, -1);
      else if (std::string(op) == "LogSoftmax") want = opset < 13 ? at::log_softmax(rows, 1).reshape({2, 3, 4}) : at::log_softmax(last, -1);
      else {
        at::Tensor t = opset < 13 ? rows : last;
        want = at::zeros_like(t).scatter(-1, t.argmax(-1, true), 1).reshape({2, 3, 4});
      }
      EXPECT_TRUE(at::allclose(y, want, 1e-6, 1e-6)) << "opset " << opset;
    }
  }
  // The last axis needs no rewrite: the node stays one node.
  Graph g;
  g.opset = 11;
  g.inputs.push_back({"x", at::kFloat, {2, 3, 4}});
  g.add_node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{2}}}, "sm");
  g.outputs.push_back({"y", at::kFloat, {2, 3, 4}});
  EXPECT_EQ(parse_onnx(serialize_onnx(g), "old.onnx").nodes.size(), 1u);
}

TEST(OnnxIo, UnknownDomainsAreRefusedAndKnownOnesRead) {
  onnx::ModelProto m = hand_model();
  auto* op = m.add_opset_import();
  op->set_domain("com.example.secret");
  op->set_version(1);
  pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "dom.onnx"); },
                                    {"'dom.onnx'", "domain 'com.example.secret'", "com.microsoft"});
  for (const char* known : {"ai.onnx.ml", "com.microsoft", "pare"}) {
    onnx::ModelProto k = hand_model();
    auto* o = k.add_opset_import();
    o->set_domain(known);
    o->set_version(1);
    EXPECT_NO_THROW(parse_onnx(k.SerializeAsString(), "known.onnx")) << known;
  }
}

TEST(OnnxIo, RanksAndDimensionsPastTheLimitsAreRefusedBeforeAllocating) {
  {  // an initializer of 33 dimensions (one element: its data is honest)
    onnx::ModelProto m = hand_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_dims();
    w->clear_float_data();
    for (size_t i = 0; i <= reader::kMaxRank; ++i) w->add_dims(1);
    w->add_float_data(1);
    pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "rank.onnx"); },
                                      {"'rank.onnx'", "33 dimensions", "at most 32"});
  }
  {  // a declared input dimension of 2^41
    onnx::ModelProto m = hand_model();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)
        ->set_dim_value(int64_t{1} << 41);
    pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "dim.onnx"); },
                                      {"'dim.onnx'", "input 'x'", "2199023255552"});
  }
  {  // an initializer claiming 2^41 elements with no data: refused by the limit, nothing allocated
    onnx::ModelProto m = hand_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_dims();
    w->add_dims(int64_t{1} << 41);
    pare::testing::expect_input_error([&] { parse_onnx(m.SerializeAsString(), "big.onnx"); },
                                      {"'big.onnx'", "initializer 'w'", "at most 1099511627776"});
  }
}

}  // namespace
}  // namespace pare::core
