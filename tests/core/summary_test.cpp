// core::summarize on quantized and sparse models: quantization ops count no FLOPs, the sparsity
// and shape of a layer whose weight comes through DequantizeLinear (or FakeQuantize,
// MatMulInteger, MatMulNBits) are those of the stored weight, and a file's size and sparse
// initializers are reported.
#include "core/summary.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <sys/stat.h>

#include "core/graph.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "tests/test_util.h"

namespace pare::core {
namespace {

using pare::testing::TempDir;

// A [out, in] weight with the first `zeros` elements (in row-major order) zero and the rest nonzero.
at::Tensor weight_with_zeros(int64_t out, int64_t in, int64_t zeros) {
  at::Tensor w = at::rand({out * in}) + 0.5;
  w.narrow(0, 0, zeros).zero_();
  return w.reshape({out, in});
}

// x [N,16] -> Gemm(W [8,16], transB) -> y [N,8], the float model.
Graph float_gemm(const at::Tensor& w) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 16}});
  g.initializers["fc.weight"] = w;
  g.initializers["fc.bias"] = at::ones({8});
  g.add_node("Gemm", {"x", "fc.weight", "fc.bias"}, {"y"}, {{"transB", int64_t{1}}}, "fc");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  return g;
}

// The same as static QDQ: x -> Q -> DQ, W as int8 codes (per output channel, zero point `zp`)
// through DequantizeLinear, bias int32 through DequantizeLinear.
Graph qdq_gemm(const at::Tensor& w, int zp = 0, at::ScalarType code_type = at::kChar) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 16}});
  at::Tensor scale = w.abs().amax(1).clamp_min(1e-6) / 100;
  at::Tensor codes = (at::round(w / scale.unsqueeze(1)) + zp).to(code_type);
  g.initializers["x.scale"] = at::scalar_tensor(1.0f / 255);
  g.initializers["x.zp"] = at::scalar_tensor(0, at::kByte);
  g.initializers["fc.weight_q"] = codes;
  g.initializers["fc.weight_scale"] = scale;
  g.initializers["fc.weight_zp"] = at::full({8}, zp, code_type);
  g.initializers["fc.bias_q"] = at::ones({8}, at::kInt);
  g.initializers["fc.bias_scale"] = scale / 255;
  g.add_node("QuantizeLinear", {"x", "x.scale", "x.zp"}, {"xq"}, {}, "x_q");
  g.add_node("DequantizeLinear", {"xq", "x.scale", "x.zp"}, {"xd"}, {}, "x_dq");
  g.add_node("DequantizeLinear", {"fc.weight_q", "fc.weight_scale", "fc.weight_zp"}, {"w"}, {{"axis", int64_t{0}}},
             "w_dq");
  g.add_node("DequantizeLinear", {"fc.bias_q", "fc.bias_scale"}, {"b"}, {{"axis", int64_t{0}}}, "b_dq");
  g.add_node("Gemm", {"xd", "w", "b"}, {"y"}, {{"transB", int64_t{1}}}, "fc");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  return g;
}

const LayerSummary* layer(const ModelSummary& s, const std::string& name) {
  for (const auto& l : s.layers)
    if (l.name == name) return &l;
  return nullptr;
}

// Fails before the fix: QuantizeLinear/DequantizeLinear counted 2 FLOPs per element, so the QDQ
// model counted the weights' and activations' (de)quantization on top of the Gemm.
TEST(Summary, QuantizationOpsCountNoFlops) {
  const at::Tensor w = weight_with_zeros(8, 16, 0);
  const ModelSummary f = summarize(float_gemm(w));
  const ModelSummary q = summarize(qdq_gemm(w));
  EXPECT_EQ(f.flops_per_sample, 2 * 8 * 16);
  EXPECT_EQ(q.flops_per_sample, f.flops_per_sample);

  for (const char* op : {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "FakeQuantize"}) {
    const OpDef& d = OpRegistry::global().get(op);
    ASSERT_TRUE(static_cast<bool>(d.flops)) << op;
    EXPECT_EQ(d.flops(Node{}, {{4, 16}, {}, {}}, {{4, 16}, {}, {}}), 0) << op;
  }
}

TEST(Summary, MatMulIntegerCountsItsMultiplyAddsLikeMatMul) {
  const auto& reg = OpRegistry::global();
  const std::vector<std::vector<int64_t>> in = {{4, 16}, {16, 8}}, out = {{4, 8}};
  EXPECT_EQ(reg.get("MatMulInteger").flops(Node{}, in, out), reg.get("MatMul").flops(Node{}, in, out));
  EXPECT_EQ(reg.get("MatMulInteger").flops(Node{}, in, out), 2 * 4 * 8 * 16);
}

// Fails before the fix: the Gemm's weight is not an initializer, so the int8 model showed 0.0%
// sparsity and no layer at all.
TEST(Summary, SparsityCountsZeroCodesOfDequantizedWeights) {
  const at::Tensor w = weight_with_zeros(8, 16, 96);  // 75% zeros
  const ModelSummary f = summarize(float_gemm(w));
  EXPECT_DOUBLE_EQ(f.sparsity(), 0.75);
  for (auto [zp, type] : {std::pair<int, at::ScalarType>{0, at::kChar}, {128, at::kByte}}) {
    SCOPED_TRACE(zp);
    const ModelSummary q = summarize(qdq_gemm(w, zp, type));
    EXPECT_DOUBLE_EQ(q.sparsity(), 0.75);
    EXPECT_EQ(q.weight_elements, 8 * 16);
    ASSERT_EQ(q.layers.size(), 1u);  // the Gemm; the DequantizeLinear nodes are no layers
    const LayerSummary* fc = layer(q, "fc");
    ASSERT_NE(fc, nullptr);
    EXPECT_EQ(fc->op, "Gemm");
    EXPECT_EQ(fc->weight_shape, (std::vector<int64_t>{8, 16}));
    EXPECT_DOUBLE_EQ(fc->sparsity(), 0.75);
    EXPECT_EQ(fc->params, 8 * 16 + 8);  // int8 weight codes and int32 bias codes
    EXPECT_EQ(fc->flops, 2 * 8 * 16);
  }
}

TEST(Summary, MatMulIntegerAndMatMulNBitsWeightsShowTheirSparsity) {
  // Dynamic quantization: x -> DynamicQuantizeLinear -> MatMulInteger(B [16, 8] int8, b_zp 0).
  Graph d;
  d.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 16}});
  at::Tensor b = at::randint(1, 100, {16, 8}).to(at::kChar);
  b.view({-1}).narrow(0, 0, 64).zero_();  // half of the codes
  d.initializers["fc.weight_q"] = b;
  d.initializers["fc.weight_zp"] = at::zeros({8}, at::kChar);
  d.add_node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"}, {}, "x_dq");
  d.add_node("MatMulInteger", {"xq", "fc.weight_q", "xz", "fc.weight_zp"}, {"y"}, {}, "fc");
  d.outputs.push_back({"y", at::kInt, {Dim::sym("N"), 8}});
  ModelSummary s = summarize(d);
  EXPECT_DOUBLE_EQ(s.sparsity(), 0.5);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].weight_shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(s.flops_per_sample, 2 * 16 * 8);

  // MatMulNBits: W [N=8, K=32] as 4-bit codes in blocks of 16, default zero point 8: a code of 8
  // is a zero weight.
  Graph n;
  n.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 32}});
  at::Tensor codes = at::randint(0, 16, {8, 2, 16}, at::kLong);
  codes.select(1, 0).fill_(8);  // the first block of every row: 16 of 32 weights
  codes.select(1, 1).clamp_max_(7);
  const at::Tensor pairs = codes.reshape({8, 2, 8, 2});  // two codes per byte, low nibble first
  const at::Tensor packed = (pairs.select(3, 0) + pairs.select(3, 1) * 16).to(at::kByte);
  n.initializers["fc.B"] = packed;
  n.initializers["fc.scales"] = at::ones({16});
  n.add_node("MatMulNBits", {"x", "fc.B", "fc.scales"}, {"y"},
             {{"K", int64_t{32}}, {"N", int64_t{8}}, {"bits", int64_t{4}}, {"block_size", int64_t{16}}}, "fc");
  n.nodes.back().domain = "com.microsoft";
  n.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  s = summarize(n);
  EXPECT_DOUBLE_EQ(s.sparsity(), 0.5);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].weight_shape, (std::vector<int64_t>{8, 32}));
}

TEST(Summary, FakeQuantizeWeightsBelongToTheirLayer) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 16}});
  g.initializers["fc.weight"] = weight_with_zeros(8, 16, 32);  // 25% zeros
  g.initializers["fc.weight_scale"] = at::full({8}, 0.01f);
  g.initializers["fc.weight_zp"] = at::zeros({8});
  g.add_node("FakeQuantize", {"fc.weight", "fc.weight_scale", "fc.weight_zp"}, {"w"},
             {{"axis", int64_t{0}}, {"qmin", int64_t{-127}}, {"qmax", int64_t{127}}}, "w_fq");
  g.nodes.back().domain = "pare";
  g.add_node("Gemm", {"x", "w"}, {"y"}, {{"transB", int64_t{1}}}, "fc");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  const ModelSummary s = summarize(g);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].op, "Gemm");
  EXPECT_DOUBLE_EQ(s.layers[0].sparsity(), 0.25);
  EXPECT_EQ(s.flops_per_sample, 2 * 8 * 16);
}

TEST(Summary, FileShowsBytesOnDiskAndSparseInitializers) {
  TempDir dir;
  const std::string path = dir.file("m.onnx");
  save_onnx(float_gemm(weight_with_zeros(8, 16, 120)), path, OnnxSaveOptions().sparse({"fc.weight"}));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const ModelSummary s = summarize_model(path);
  EXPECT_EQ(s.file_bytes, static_cast<int64_t>(st.st_size));
  EXPECT_EQ(s.sparse_initializers, (std::vector<std::string>{"fc.weight"}));
  EXPECT_EQ(s.initializers, 2);
  EXPECT_EQ(s.bytes, (8 * 16 + 8) * 4);  // in memory the weights are dense again
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["file_bytes"], s.file_bytes);
  EXPECT_EQ(j["sparse_initializers"].size(), 1u);
  EXPECT_NE(to_text(s).find("1 of 2 initializers stored sparse"), std::string::npos) << to_text(s);

  const ModelSummary zoo = summarize_model("mlp:784-30-10");
  EXPECT_EQ(zoo.file_bytes, 0);
  EXPECT_TRUE(zoo.sparse_initializers.empty());
  pare::testing::expect_input_error([&] { summarize_model(dir.file("missing.onnx")); }, {"missing.onnx"});
}

}  // namespace
}  // namespace pare::core
