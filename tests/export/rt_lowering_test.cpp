// pare_rt's load-time passes, Before/After in numbers: tiny float graphs quantized with
// quantize::quantize_static (the QDQ form `pare quantize` writes), loaded with the int8 lowering
// (rt::Options() default) and as the exact float simulation (Options().int8(false)), and run by
// core::Module. The int8 kernels must agree with the simulation within one quantization step of
// the output; the report must say what was lowered; one Model must serve several batch sizes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "quantize/ptq.h"
#include "tests/export/rt_test_util.h"

namespace pare::rt_testing {
namespace {

using core::Dim;
using core::Graph;
using Ints = std::vector<int64_t>;



/// `fp32` quantized by quantize_static on `calib`, then its output requantized (a
/// QuantizeLinear/DequantizeLinear pair with the simulated output's range, as the next layer's
/// input would be) so that it lies on a grid whose step is returned in `step`. Weights are 7-bit
/// by default: 8-bit ones overflow oneDNN's int8 kernels on CPUs without VNNI (see
/// DISABLED_EightBitWeightsStayWithinOneStepWithoutVnni).
Graph quantized(const Graph& fp32, const at::Tensor& calib, double* step,
                quantize::PtqOptions opts = quantize::PtqOptions().weight_bits(7)) {
  Graph q = quantize::quantize_static(fp32, calib, opts).graph;
  const at::Tensor y = run_core(q, {calib}).at(0);
  const double lo = std::min(0.0, y.min().item<double>()), hi = std::max(0.0, y.max().item<double>());
  const float scale = static_cast<float>((hi - lo) / 255);
  const int64_t zero = std::llround(-lo / scale);
  const std::string out = q.outputs.at(0).name;
  for (auto& n : q.nodes)
    for (auto& o : n.outputs)
      if (o == out) o = out + "_float";
  q.initializers[out + "_ys"] = f32s(scale);
  q.initializers[out + "_yz"] = at::scalar_tensor(zero, at::kByte);
  q.add_node("QuantizeLinear", {out + "_float", out + "_ys", out + "_yz"}, {out + "_q"});
  q.add_node("DequantizeLinear", {out + "_q", out + "_ys", out + "_yz"}, {out});
  *step = scale;
  return q;
}

/// Counts of outputs a, b that differ by more than `steps` steps of `step`, and the largest
/// difference in steps.
struct StepDiff {
  int64_t beyond = 0;
  double max_steps = 0;
};
StepDiff step_diff(const at::Tensor& a, const at::Tensor& b, double step, double steps = 1) {
  const at::Tensor d = (a.to(at::kDouble) - b.to(at::kDouble)).abs() / step;
  return {d.gt(steps + 1e-3).sum().item<int64_t>(), d.numel() ? d.max().item<double>() : 0};
}

bool has_note(const rt::LoweringReport& r, const std::string& part) {
  for (auto& n : r.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

/// int8 pare_rt vs its float simulation vs core::Module on `q`, at each batch size: the two
/// simulations agree (within one step: oneDNN's scaled reorder may round a tie the other way),
/// and the int8 kernels stay within `steps` steps of the simulation.
void expect_within_steps(const Graph& q, double step, const std::vector<int64_t>& batches, const Ints& item_dims,
                         double steps = 1, std::function<at::Tensor(int64_t batch)> draw = {}) {
  rt::Model int8 = load_rt(q, "int8.onnx");
  rt::Model sim = load_rt(q, "sim.onnx", rt::Options().int8(false));
  for (int64_t batch : batches) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Ints dims = {batch};
    dims.insert(dims.end(), item_dims.begin(), item_dims.end());
    at::manual_seed(100 + batch);
    const at::Tensor x = draw ? draw(batch) : at::randn(dims);
    const at::Tensor want = run_core(q, {x}).at(0);
    const at::Tensor s = run_rt(sim, {x}).at(0);
    const at::Tensor y = run_rt(int8, {x}).at(0);
    ASSERT_EQ(y.sizes(), want.sizes());
    const StepDiff ds = step_diff(s, want, step);
    EXPECT_EQ(ds.beyond, 0) << "simulation vs core: max " << ds.max_steps << " steps";
    const StepDiff di = step_diff(y, s, step, steps);
    EXPECT_EQ(di.beyond, 0) << "int8 vs simulation: " << di.beyond << " of " << y.numel() << " outputs beyond " << steps
                            << " step(s), max " << di.max_steps;
  }
}

at::Tensor calib(Ints dims) {
  at::manual_seed(5);
  return at::randn(dims);
}

// ---------------------------------------------------------------------------------------------
// Float graphs

Graph conv_relu(int64_t group, Ints pads, Ints strides) {
  at::manual_seed(1);
  Builder b;
  const std::string x = b.input({N, 4, 8, 8});
  b.node("Conv", {x, b.constant(at::randn({8, 4 / group, 3, 3}) * 0.3, "w"), b.constant(at::randn({8}) * 0.1, "b")}, {"c"},
         {{"group", group}, {"pads", pads}, {"strides", strides}}, "");
  b.node("Relu", {"c"}, {"y"});
  b.output("y");
  return b.finish();
}

// x -> conv -> relu -> conv -> + x -> relu [-> conv 1x1]: a residual block.
Graph residual_block(bool head = true) {
  at::manual_seed(2);
  Builder b;
  const std::string x = b.input({N, 4, 6, 6});
  const Ints p1 = {1, 1, 1, 1};
  b.node("Conv", {x, b.constant(at::randn({4, 4, 3, 3}) * 0.3), b.constant(at::randn({4}) * 0.1)}, {"c1"}, {{"pads", p1}});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", b.constant(at::randn({4, 4, 3, 3}) * 0.3), b.constant(at::randn({4}) * 0.1)}, {"c2"}, {{"pads", p1}});
  b.node("Add", {"c2", x}, {"s"});
  b.node("Relu", {"s"}, {head ? "r2" : "y"});
  if (head) b.node("Conv", {"r2", b.constant(at::randn({3, 4, 1, 1}) * 0.5), b.constant(at::randn({3}) * 0.1)}, {"y"});
  b.output("y");
  return b.finish();
}

// Two branches (each conv with its own fused Relu) added: an int8 Add that stays an Add.
Graph two_branches() {
  at::manual_seed(3);
  Builder b;
  const std::string x = b.input({N, 3, 6, 6});
  b.node("Conv", {x, b.constant(at::randn({4, 3, 3, 3}) * 0.3)}, {"a"}, {{"pads", Ints{1, 1, 1, 1}}});
  b.node("Relu", {"a"}, {"ra"});
  b.node("Conv", {x, b.constant(at::randn({4, 3, 1, 1}) * 0.5)}, {"b"});
  b.node("Relu", {"b"}, {"rb"});
  b.node("Add", {"ra", "rb"}, {"s"});
  b.node("Conv", {"s", b.constant(at::randn({2, 4, 1, 1}) * 0.5)}, {"y"});
  b.output("y");
  return b.finish();
}

// Gemm -> Relu -> Gemm (transB, biases) on x [N, 16].
Graph mlp() {
  at::manual_seed(4);
  Builder b;
  const std::string x = b.input({N, 16});
  b.node("Gemm", {x, b.constant(at::randn({12, 16}) * 0.3), b.constant(at::randn({12}) * 0.1)}, {"h"},
         {{"transB", int64_t{1}}});
  b.node("Relu", {"h"}, {"r"});
  b.node("Gemm", {"r", b.constant(at::randn({5, 12}) * 0.3), b.constant(at::randn({5}) * 0.1)}, {"y"},
         {{"transB", int64_t{1}}});
  b.output("y");
  return b.finish();
}

// x [N, 4, 16] @ W [16, 8]: a batched int8 MatMul.
Graph matmul3d() {
  at::manual_seed(6);
  Builder b;
  const std::string x = b.input({N, 4, 16});
  b.node("MatMul", {x, b.constant(at::randn({16, 8}) * 0.3)}, {"y"});
  b.output("y");
  return b.finish();
}

// Conv -> BatchNormalization -> Relu -> MaxPool -> Flatten -> Gemm.
Graph conv_bn_net() {
  at::manual_seed(7);
  Builder b;
  const std::string x = b.input({N, 1, 6, 6});
  b.node("Conv", {x, b.constant(at::randn({4, 1, 3, 3}) * 0.5), b.constant(at::randn({4}) * 0.1)}, {"c1"},
         {{"pads", Ints{1, 1, 1, 1}}});
  b.node("BatchNormalization", {"c1", b.constant(at::rand({4}) + 0.5), b.constant(at::randn({4}) * 0.1),
                                b.constant(at::randn({4}) * 0.1), b.constant(at::rand({4}) + 0.5)},
         {"n1"});
  b.node("Relu", {"n1"}, {"r1"});
  b.node("MaxPool", {"r1"}, {"p1"}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{3, 3}}});
  b.node("Flatten", {"p1"}, {"f1"});
  b.node("Gemm", {"f1", b.constant(at::randn({3, 16}) * 0.3), b.constant(at::randn({3}) * 0.1)}, {"y"},
         {{"transB", int64_t{1}}});
  b.output("y");
  return b.finish();
}

// ---------------------------------------------------------------------------------------------
// Tests

// x -> Q -> DQ (a); x -> GlobalAveragePool -> Q -> DQ (b, [N, C, 1, 1]); Add(a, b) -> Q -> DQ:
// an int8 Add whose second input is broadcast, written by hand (quantize_static keeps Add in
// float unless its output feeds a quantized op).
Graph broadcast_add(float* step) {
  Builder b;
  const std::string x = b.input({N, 4, 5, 5});
  auto qdq = [&](const std::string& v, float scale, int64_t zero, const std::string& out) {
    const std::string s = b.constant(f32s(scale), v + "_s"), z = b.constant(at::scalar_tensor(zero, at::kByte), v + "_z");
    b.node("QuantizeLinear", {v, s, z}, {v + "_q"});
    b.node("DequantizeLinear", {v + "_q", s, z}, {out});
  };
  qdq(x, 8.f / 255, 128, "a");
  b.node("GlobalAveragePool", {x}, {"g"});
  qdq("g", 2.f / 255, 128, "gb");
  b.node("Add", {"a", "gb"}, {"s"});
  *step = 10.f / 255;
  qdq("s", *step, 128, "y");
  b.output("y");
  return b.finish();
}

const std::vector<int64_t> kBatches = {1, 2, 5};

TEST(RtLowering, ConvReluBecomesOneInt8ConvWithTheReluFused) {
  double step = 0;
  const Graph q = quantized(conv_relu(1, {1, 1, 1, 1}, {1, 1}), calib({16, 4, 8, 8}), &step);
  const rt::LoweringReport r = load_rt(q, "conv_relu.onnx").report();
  EXPECT_EQ(r.int8_ops, 1) << r.to_text();
  EXPECT_EQ(r.fp32_ops, 0) << r.to_text();
  EXPECT_EQ(r.fused_activations, 1) << r.to_text();
  EXPECT_TRUE(has_note(r, "int8 uint8 x int8 -> uint8, Relu fused")) << r.to_text();
  expect_within_steps(q, step, kBatches, {4, 8, 8});
}

// No padding: the activation's zero point is folded into the bias (another code path than the
// padded conv above, where oneDNN applies it).
TEST(RtLowering, UnpaddedStridedConvFoldsTheZeroPointIntoTheBias) {
  double step = 0;
  const Graph q = quantized(conv_relu(1, {0, 0, 0, 0}, {2, 2}), calib({16, 4, 8, 8}), &step);
  EXPECT_EQ(load_rt(q, "conv_s2.onnx").report().int8_ops, 1);
  expect_within_steps(q, step, kBatches, {4, 8, 8});
}

TEST(RtLowering, GroupedAndDepthwiseConvsRunInt8) {
  for (int64_t group : {2, 4}) {
    SCOPED_TRACE("group " + std::to_string(group));
    double step = 0;
    const Graph q = quantized(conv_relu(group, {0, 1, 1, 0}, {1, 1}), calib({16, 4, 8, 8}), &step);
    EXPECT_EQ(load_rt(q, "conv_grouped.onnx").report().int8_ops, 1);
    expect_within_steps(q, step, kBatches, {4, 8, 8});
  }
}

TEST(RtLowering, PerTensorWeights) {
  double step = 0;
  const auto opts = quantize::PtqOptions().weight_bits(7).per_channel(false);
  const Graph q = quantized(conv_relu(1, {1, 1, 1, 1}, {1, 1}), calib({16, 4, 8, 8}), &step, opts);
  EXPECT_EQ(load_rt(q, "conv_pt.onnx").report().int8_ops, 1);
  expect_within_steps(q, step, kBatches, {4, 8, 8});
}

// RUNTIME BUG (rt/ops_quant.cpp build_qconv/build_qmatmul, reported, not fixed here):
// on CPUs without VNNI (these AVX2 machines: AMD EPYC, avx2 only) oneDNN's int8 kernels
// (jit_uni_int8:avx2 conv, gemm:jit u8s8 matmul) add pairs of u8 x s8 products in int16 with
// saturation (vpmaddubsw), so 8-bit weights (codes up to +-127) times u8 activations overflow:
// outputs land up to 86 steps away from the exact simulation. With 7-bit weights (|code| <= 63,
// 2 * 255 * 63 < 32767) the very same graphs stay within one step (the tests above). ONNX Runtime
// has the same hazard on AVX2 and documents reduce_range / U8U8 for it. pare_rt now says so in
// its report (EightBitWeightsWithoutVnniAreNoted) but still computes the saturated numbers, while
// `pare quantize` writes 8-bit weights by default; it could run such layers some other way where
// the ISA lacks VNNI. Passes on VNNI hardware.
TEST(RtLowering, DISABLED_EightBitWeightsStayWithinOneStepWithoutVnni) {
  for (bool conv : {true, false}) {
    SCOPED_TRACE(conv ? "conv" : "matmul");
    double step = 0;
    const auto opts = quantize::PtqOptions().weight_bits(8);
    const Graph q = conv ? quantized(conv_relu(1, {1, 1, 1, 1}, {1, 1}), calib({16, 4, 8, 8}), &step, opts)
                         : quantized(matmul3d(), calib({8, 4, 16}), &step, opts);
    expect_within_steps(q, step, kBatches, conv ? Ints{4, 8, 8} : Ints{4, 16});
  }
}

TEST(RtLowering, EightBitWeightsWithoutVnniAreNoted) {
  double step = 0;
  const Graph q = quantized(matmul3d(), calib({8, 4, 16}), &step, quantize::PtqOptions().weight_bits(8));
  const std::string isa = rt::backend_version();
  const bool vnni = isa.find("vnni") != std::string::npos || isa.find("bf16") != std::string::npos ||
                    isa.find("amx") != std::string::npos;
  const rt::LoweringReport r = load_rt(q, "w8.onnx").report();
  EXPECT_EQ(has_note(r, "no VNNI"), !vnni) << isa << "\n" << r.to_text();
  const Graph q7 = quantized(matmul3d(), calib({8, 4, 16}), &step);
  EXPECT_FALSE(has_note(load_rt(q7, "w7.onnx").report(), "no VNNI"));
}

// With symmetric int8 activations (PtqOptions().activations(kSymmetricInt8)) oneDNN's AVX2 int8 conv
// would take s8 sources by halving the weights ("wei_s8 ... sa0.5": about 16% of the outputs 2 to 6
// steps off); pare_rt feeds them as u8 instead (x ^ 0x80, zero point + 128: exact).
TEST(RtLowering, SymmetricInt8ActivationsStayWithinOneStepWithoutVnni) {
  double step = 0;
  const auto opts = quantize::PtqOptions().weight_bits(7).activations(quantize::QScheme::kSymmetricInt8);
  const Graph q = quantized(conv_relu(1, {1, 1, 1, 1}, {1, 1}), calib({16, 4, 8, 8}), &step, opts);
  const rt::LoweringReport r = load_rt(q, "conv_s8.onnx").report();
  EXPECT_TRUE(has_note(r, "int8 int8 x int8")) << r.to_text();
  expect_within_steps(q, step, kBatches, {4, 8, 8});
}

// The residual Add becomes the second conv's sum post-op; the conv's own rounding and clamp to its
// grid stay (as post-ops), so the block's output is the QDQ graph's within one step. Inputs from
// the calibration data: inside the calibrated ranges (the next test goes outside).
TEST(RtLowering, ResidualAddIsFusedIntoTheConvBeforeIt) {
  double step = 0;
  const at::Tensor data = calib({16, 4, 6, 6});
  const Graph q = quantized(residual_block(false), data, &step);
  const rt::LoweringReport r = load_rt(q, "residual.onnx").report();
  EXPECT_EQ(r.int8_ops, 3) << r.to_text();  // 2 convs and the add, now inside the second conv
  EXPECT_TRUE(has_note(r, "fused into QConv 'Conv_2' (residual sum)")) << r.to_text();
  EXPECT_TRUE(has_note(r, "int8 add -> uint8, Relu fused")) << r.to_text();
  expect_within_steps(q, step, kBatches, {4, 6, 6}, 1,
                      [&](int64_t batch) { return data.narrow(0, 16 - batch, batch).contiguous(); });
}

// Inputs beyond the calibrated ranges (any percentile or entropy calibration clips on purpose):
// the second conv's output saturates on its own grid before the sum, in the fused kernel as in the
// QDQ model. (An earlier fusion skipped that clamp: outputs up to 158 steps off.)
TEST(RtLowering, ResidualFusionSaturatesLikeTheSimulation) {
  double step = 0;
  const Graph q = quantized(residual_block(false), calib({16, 4, 6, 6}), &step);
  EXPECT_TRUE(has_note(load_rt(q, "residual.onnx").report(), "residual sum"));
  expect_within_steps(q, step, kBatches, {4, 6, 6}, 1, [](int64_t batch) { return at::randn({batch, 4, 6, 6}) * 2; });
}

TEST(RtLowering, AddOfTwoActivatedBranchesStaysAnInt8Add) {
  double step = 0;
  const Graph q = quantized(two_branches(), calib({16, 3, 6, 6}), &step);
  const rt::LoweringReport r = load_rt(q, "branches.onnx").report();
  EXPECT_EQ(r.int8_ops, 4) << r.to_text();
  EXPECT_EQ(r.fused_activations, 2) << r.to_text();
  EXPECT_TRUE(has_note(r, "Add 'Add_4': int8 add -> uint8")) << r.to_text();
  EXPECT_FALSE(has_note(r, "residual sum")) << r.to_text();
  expect_within_steps(q, step, kBatches, {3, 6, 6});
}

TEST(RtLowering, BroadcastInt8Add) {
  float step = 0;
  const Graph g = broadcast_add(&step);
  const rt::LoweringReport r = load_rt(g, "badd.onnx").report();
  EXPECT_EQ(r.int8_ops, 1) << r.to_text();
  expect_within_steps(g, step, kBatches, {4, 5, 5});
}

TEST(RtLowering, GemmReluGemmRunAsInt8MatMuls) {
  double step = 0;
  const Graph q = quantized(mlp(), calib({32, 16}), &step);
  const rt::LoweringReport r = load_rt(q, "mlp.onnx").report();
  EXPECT_EQ(r.int8_ops, 2) << r.to_text();
  EXPECT_EQ(r.fused_activations, 1) << r.to_text();
  EXPECT_TRUE(has_note(r, "Gemm 'Gemm_0': int8 uint8 x int8 -> uint8, Relu fused")) << r.to_text();
  expect_within_steps(q, step, kBatches, {16});
}

TEST(RtLowering, BatchedMatMulRunsInt8) {
  double step = 0;
  const Graph q = quantized(matmul3d(), calib({8, 4, 16}), &step);
  EXPECT_EQ(load_rt(q, "matmul.onnx").report().int8_ops, 1);
  expect_within_steps(q, step, kBatches, {4, 16});
}

TEST(RtLowering, MaxPoolAndFlattenRunOnInt8Values) {
  double step = 0;
  const Graph q = quantized(conv_bn_net(), calib({16, 1, 6, 6}), &step);
  const rt::LoweringReport r = load_rt(q, "pool.onnx").report();
  EXPECT_EQ(r.int8_ops, 2) << r.to_text();
  EXPECT_TRUE(has_note(r, "MaxPool 'MaxPool_3': runs on int8 values")) << r.to_text();
  EXPECT_TRUE(has_note(r, "Flatten 'Flatten_4': runs on int8 values")) << r.to_text();
  expect_within_steps(q, step, kBatches, {1, 6, 6});
}

// Before: Conv -> BatchNormalization -> Relu in float. After: one Conv with the BatchNorm in its
// weights and the Relu as a post-op; same numbers as the interpreter.
TEST(RtLowering, FloatBatchNormIsFoldedAndReluFused) {
  const Graph g = conv_bn_net();
  rt::Model m = load_rt(g, "conv_bn.onnx");
  const rt::LoweringReport& r = m.report();
  EXPECT_EQ(r.folded_batch_norms, 1) << r.to_text();
  EXPECT_EQ(r.fused_activations, 1) << r.to_text();
  EXPECT_EQ(r.int8_ops, 0) << r.to_text();
  EXPECT_EQ(r.fp32_ops, 2) << r.to_text();
  for (int64_t batch : kBatches) {
    at::manual_seed(batch);
    const at::Tensor x = at::randn({batch, 1, 6, 6});
    expect_same(run_rt(m, {x}).at(0), run_core(g, {x}).at(0), 1e-4, "batch " + std::to_string(batch));
  }
}

TEST(RtLowering, Int8OffRunsEveryQdqNodeInFloat) {
  double step = 0;
  const Graph q = quantized(residual_block(), calib({16, 4, 6, 6}), &step);
  const rt::LoweringReport r = load_rt(q, "sim.onnx", rt::Options().int8(false)).report();
  EXPECT_EQ(r.int8_ops, 0) << r.to_text();
  EXPECT_EQ(r.fp32_ops, 3) << r.to_text();
}

// One Model, plans per input shape: batches 1, 2, 5 and 2 again; the second run at batch 2 reuses
// its plan (no new arena) and gives the same bytes.
TEST(RtLowering, OneModelServesSeveralBatchSizes) {
  double step = 0;
  const Graph q = quantized(residual_block(), calib({16, 4, 6, 6}), &step);
  rt::Model m = load_rt(q, "batches.onnx");
  const int64_t arena1 = m.arena_bytes();
  EXPECT_GT(arena1, 0);
  at::manual_seed(9);
  const at::Tensor x2 = at::randn({2, 4, 6, 6});
  const at::Tensor first = run_rt(m, {x2}).at(0);
  for (int64_t batch : {1, 5}) {
    const at::Tensor x = at::randn({batch, 4, 6, 6});
    const at::Tensor y = run_rt(m, {x}).at(0);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{batch, 3, 6, 6}));
    // Row k of a batch is the model applied to sample k alone.
    const at::Tensor one = run_rt(m, {x.narrow(0, batch - 1, 1).contiguous()}).at(0);
    EXPECT_TRUE(y.narrow(0, batch - 1, 1).equal(one)) << "batch " << batch;
  }
  const int64_t arena3 = m.arena_bytes();
  EXPECT_GT(arena3, arena1);
  EXPECT_TRUE(run_rt(m, {x2}).at(0).equal(first));
  EXPECT_EQ(m.arena_bytes(), arena3);
}

}  // namespace
}  // namespace pare::rt_testing
