// exporter::export_model: which initializers --sparse auto|on|off stores as COO, the sizes it
// reports against the files it writes, bit-exact weights, metadata, and --target rt (pare_rt loads
// the file and computes what the dense model computes, or nothing is written).
#include "export/onnx_export.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstring>

#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/zoo.h"
#include "export/rt_bridge.h"
#include "rt/rt.h"
#include "tests/test_util.h"

namespace pare::exporter {
namespace {

using pare::testing::TempDir;

// Zeroes the `share` of `t`'s elements with the smallest magnitude (magnitude pruning).
at::Tensor pruned(const at::Tensor& t, double share) {
  const int64_t k = static_cast<int64_t>(share * static_cast<double>(t.numel()));
  at::Tensor flat = t.detach().clone().reshape({-1});
  if (k > 0) flat.index_fill_(0, std::get<1>(flat.abs().topk(k, 0, /*largest=*/false)), 0);
  return flat.reshape(t.sizes());
}

// The zoo MLP with every weight matrix 90% pruned (biases dense).
core::Graph pruned_mlp(const std::string& spec = "mlp:784-64-32-10") {
  core::Graph g = core::build_zoo_model(spec, 1);
  for (auto& [name, t] : g.initializers)
    if (t.dim() == 2) t = pruned(t, 0.9);
  return g;
}

const InitializerDecision& decision(const ExportResult& r, const std::string& name) {
  for (const auto& d : r.initializers)
    if (d.name == name) return d;
  throw std::runtime_error("no decision for " + name);
}

void expect_same_initializers(const core::Graph& a, const core::Graph& b) {
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (const auto& [name, t] : a.initializers) {
    ASSERT_TRUE(b.initializers.count(name)) << name;
    const at::Tensor& u = b.initializers.at(name);
    ASSERT_EQ(t.scalar_type(), u.scalar_type()) << name;
    ASSERT_EQ(t.sizes(), u.sizes()) << name;
    EXPECT_EQ(std::memcmp(t.contiguous().data_ptr(), u.contiguous().data_ptr(), t.nbytes()), 0) << name;
  }
}

TEST(OnnxExport, AutoStoresSparseOnlyWhereCooIsSmaller) {
  TempDir dir;
  core::Graph g = pruned_mlp();
  // Extra initializers the graph does not read, for the decisions: float32 pays below 1/3
  // density, int8 below 1/9.
  g.initializers["f32_half"] = pruned(at::randn({32, 64}) + 5, 0.5);
  g.initializers["i8_80"] = pruned(at::randint(1, 100, {64, 64}).to(at::kChar), 0.8);
  g.initializers["i8_95"] = pruned(at::randint(1, 100, {64, 64}).to(at::kChar), 0.95);
  g.initializers["zero_point"] = at::zeros({64}, at::kChar);
  g.initializers["scalar"] = at::zeros({});
  const std::string path = dir.file("m.onnx");
  const ExportResult r = export_model(g, path);

  for (const char* w : {"fc1.weight", "fc2.weight", "fc3.weight", "i8_95", "zero_point"}) {
    SCOPED_TRACE(w);
    EXPECT_TRUE(decision(r, w).sparse) << decision(r, w).why;
    EXPECT_LT(decision(r, w).sparse_bytes, decision(r, w).dense_bytes);
  }
  for (const char* w : {"f32_half", "i8_80", "fc1.bias", "scalar"}) {
    SCOPED_TRACE(w);
    EXPECT_FALSE(decision(r, w).sparse) << decision(r, w).why;
  }
  EXPECT_EQ(decision(r, "fc1.bias").why, "no zeros");
  EXPECT_EQ(decision(r, "i8_80").why, "COO would be larger");
  EXPECT_NEAR(decision(r, "fc1.weight").density(), 0.1, 0.001);
  EXPECT_EQ(r.sparse_count(), 5);

  // The sizes it reports are the files': what it wrote, and what save_onnx writes dense.
  const std::string bytes = read_file(path);
  EXPECT_EQ(r.bytes_written, static_cast<int64_t>(bytes.size()));
  {
    core::OnnxFileInfo info;
    const core::Graph back = core::load_onnx(path, core::OnnxLoadOptions(), &info);
    expect_same_initializers(g, back);
    EXPECT_EQ(info.sparse_initializers.size(), 5u);
    EXPECT_EQ(r.bytes_dense, static_cast<int64_t>(core::serialize_onnx(back).size()));
  }
  EXPECT_LT(double(r.bytes_written) * 2.5, double(r.bytes_dense));
}

// Fails without positive_zeros: a mask multiplied into a negative weight leaves -0.0, whose bits
// are not zero, so the "90% pruned" weight kept half its elements as COO values.
TEST(OnnxExport, NegativeZerosLeftByMaskingAreStoredAsZeros) {
  TempDir dir;
  core::Graph g = core::build_zoo_model("mlp:784-64-32-10", 1);
  at::Tensor& w = g.initializers.at("fc1.weight");
  w = w * (at::rand(w.sizes()) > 0.9).to(at::kFloat);  // about 45% of the elements become -0.0
  ASSERT_GT(at::logical_and(w.eq(0), at::signbit(w)).sum().item<int64_t>(), w.numel() / 4);
  const at::Tensor masked = w.clone();
  const ExportResult r = export_model(g, dir.file("m.onnx"));
  EXPECT_TRUE(decision(r, "fc1.weight").sparse);
  EXPECT_NEAR(decision(r, "fc1.weight").density(), 0.1, 0.01);
  const at::Tensor back = core::load_onnx(dir.file("m.onnx")).initializers.at("fc1.weight");
  EXPECT_TRUE(back.equal(masked));  // the same numbers (-0.0 == 0.0)
  EXPECT_FALSE(at::logical_and(back.eq(0), at::signbit(back)).any().item<bool>());
  const at::Tensor& mine = g.initializers.at("fc1.weight");  // the caller's graph keeps its -0.0
  EXPECT_TRUE(at::logical_and(mine.eq(0), at::signbit(mine)).any().item<bool>());
  EXPECT_FALSE(std::signbit(positive_zeros(at::full({1}, -0.0f)).item<float>()));
  const at::Tensor no_zero = at::ones({3});
  EXPECT_TRUE(positive_zeros(no_zero).is_same(no_zero));  // nothing to change: no copy
}

TEST(OnnxExport, OnStoresEveryInitializerWithAZeroAndOffNone) {
  TempDir dir;
  core::Graph g = pruned_mlp();
  g.initializers["f32_half"] = pruned(at::randn({32, 64}) + 5, 0.5);
  g.initializers["empty"] = at::zeros({0, 4});
  const ExportResult on = export_model(g, dir.file("on.onnx"), ExportOptions().sparse(SparseMode::kOn));
  EXPECT_TRUE(decision(on, "f32_half").sparse);
  EXPECT_EQ(decision(on, "f32_half").why, "sparse on (COO is larger)");
  EXPECT_TRUE(decision(on, "fc1.weight").sparse);
  EXPECT_FALSE(decision(on, "fc1.bias").sparse);  // no zeros
  EXPECT_FALSE(decision(on, "empty").sparse);
  expect_same_initializers(g, core::load_onnx(dir.file("on.onnx")));

  const ExportResult off = export_model(g, dir.file("off.onnx"), ExportOptions().sparse(SparseMode::kOff));
  EXPECT_EQ(off.sparse_count(), 0);
  EXPECT_EQ(off.bytes_written, off.bytes_dense);
  core::OnnxFileInfo info;
  expect_same_initializers(g, core::load_onnx(dir.file("off.onnx"), core::OnnxLoadOptions(), &info));
  EXPECT_TRUE(info.sparse_initializers.empty());
}

TEST(OnnxExport, KeepsTheModelsMetadataAndSaysHowItWasExported) {
  TempDir dir;
  core::Graph g = pruned_mlp();
  g.metadata["pare.normalize"] = "0.2860,0.3530";
  const std::string path = dir.file("m.onnx");
  export_model(g, path, ExportOptions().target(Target::kRt).metadata("owner", "tests"));
  const core::Graph back = core::load_onnx(path);
  EXPECT_EQ(back.metadata.at("pare.normalize"), "0.2860,0.3530");
  EXPECT_EQ(back.metadata.at("owner"), "tests");
  EXPECT_FALSE(back.metadata.at("pare.version").empty());
  const std::string how = back.metadata.at("pare.export");
  EXPECT_NE(how.find("(target rt, sparse auto)"), std::string::npos) << how;
  EXPECT_NE(how.find("3 of 6 initializers"), std::string::npos) << how;

  pare::testing::expect_input_error(
      [&] { export_model(g, dir.file("bad.onnx"), ExportOptions().metadata("pare.version", "9")); },
      {"pare.version"});
  EXPECT_FALSE(file_exists(dir.file("bad.onnx")));
}

TEST(OnnxExport, RtTargetLoadsInPareRtAndMatchesTheDenseModel) {
  TempDir dir;
  const core::Graph g = pruned_mlp();
  const std::string path = dir.file("m.rt.onnx");
  const ExportResult r = export_model(g, path, ExportOptions().target(Target::kRt));
  EXPECT_EQ(r.sparse_count(), 3);

  at::manual_seed(3);
  const at::Tensor x = at::rand({5, 1, 28, 28});
  core::Module dense(g, core::Module::Use::kFrozen);
  dense.eval();
  at::NoGradGuard no_grad;
  const at::Tensor want = dense.forward({x})[0];
  rt::Model m = load_rt_model(path);
  const at::Tensor got = from_rt(m.run({rt_view(x)}).at(0));
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LE((got - want).abs().max().item<double>(), 1e-4);
}

TEST(OnnxExport, RtTargetRefusesWhatPareRtCannotRunAndWritesNothing) {
  // FakeQuantize is pare's training op (QAT): pare runs it, pare_rt never will.
  ASSERT_NE(rt::why_unsupported("FakeQuantize", "pare"), "") << "pick an op pare_rt lacks";
  TempDir dir;
  core::Graph g = pruned_mlp();
  g.initializers["fq.scale"] = at::scalar_tensor(0.05f);
  g.initializers["fq.zp"] = at::scalar_tensor(0.0f);
  const std::string logits = g.outputs[0].name;
  for (auto& n : g.nodes)
    for (auto& o : n.outputs)
      if (o == logits) o = "raw_logits";
  core::Node& fq = g.add_node("FakeQuantize", {"raw_logits", "fq.scale", "fq.zp"}, {logits},
                              {{"qmin", int64_t{-128}}, {"qmax", int64_t{127}}}, "logits_fq");
  fq.domain = "pare";
  g.verify();
  const std::string path = dir.file("m.rt.onnx");
  pare::testing::expect_input_error([&] { export_model(g, path, ExportOptions().target(Target::kRt)); },
                                    {path, "target rt", "logits_fq", rt::why_unsupported("FakeQuantize", "pare")});
  EXPECT_TRUE(dir.list().empty());
  // The same graph is a valid ONNX export.
  EXPECT_NO_THROW(export_model(g, path, ExportOptions().target(Target::kOnnx)));
  EXPECT_TRUE(file_exists(path));
}

TEST(OnnxExport, ParsesTargetsAndModesAndNamesTheOption) {
  EXPECT_EQ(parse_target("rt"), Target::kRt);
  EXPECT_EQ(parse_sparse_mode("off"), SparseMode::kOff);
  pare::testing::expect_option_error([] { parse_target("tflite"); }, "target", {"target must", "tflite"});
  pare::testing::expect_option_error([] { parse_sparse_mode("maybe"); }, "sparse", {"sparse must", "maybe"});
}

}  // namespace
}  // namespace pare::exporter
