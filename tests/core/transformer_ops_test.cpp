// RMSNormalization, RotaryEmbedding and Attention (core/ops_transformer.cpp) against plain libtorch
// formulas written here, their gradients against the same formulas, the KV cache against a run in
// one go, and the three ops through ONNX (opset 23) and shape inference.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/onnx_reader.h"
#include "core/op_registry.h"
#include "tests/test_util.h"

namespace pare::core {
namespace {

using Tensors = std::vector<at::Tensor>;
using Attrs = std::map<std::string, AttrValue>;

/// A node with inputs "i0", "i1", ... ("" where the tensor is undefined) and `outputs` outputs.
Node make_node(const std::string& op, const Tensors& in, int outputs = 1, Attrs attrs = {}) {
  Node n;
  n.op_type = op;
  n.name = op + "_test";
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(in[i].defined() ? "i" + std::to_string(i) : "");
  for (int i = 0; i < outputs; ++i) n.outputs.push_back("o" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

Tensors run(const std::string& op, const Tensors& in, int outputs = 1, Attrs attrs = {}) {
  return OpRegistry::global().get(op).forward(make_node(op, in, outputs, std::move(attrs)), in, RunContext{});
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double atol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want.to(at::kDouble), 1e-4, atol))
      << "max difference " << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

// ---- plain references -----------------------------------------------------------------------

at::Tensor plain_rms(const at::Tensor& x, const at::Tensor& scale, int64_t axis, double eps) {
  std::vector<int64_t> dims;
  for (int64_t d = axis; d < x.dim(); ++d) dims.push_back(d);
  return x / at::sqrt((x * x).mean(dims, true) + eps) * scale;
}

/// softmax(Q K^T * scale + bias) V on [B, H, S, D] with the KV heads repeated for each query group.
at::Tensor plain_attention(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& bias = {},
                           double softcap = 0) {
  const int64_t group = q.size(1) / k.size(1);
  k = k.repeat_interleave(group, 1);
  v = v.repeat_interleave(group, 1);
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(q.size(3)));
  if (bias.defined()) s = s + bias;
  if (softcap > 0) s = at::tanh(s / softcap) * softcap;
  return at::matmul(at::softmax(s, -1), v);
}

/// 0 where query i may see key j (j <= i + past), -inf elsewhere: [L, total].
at::Tensor causal_bias(int64_t l, int64_t total, int64_t past) {
  at::Tensor allowed = at::arange(total).unsqueeze(0).le(at::arange(l).unsqueeze(1) + past);
  return at::zeros({l, total}).masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

/// RoPE one element pair at a time, as the paper writes it: [B, H, S, D] with caches [P, rot/2].
at::Tensor plain_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& pos,
                      int64_t rot, bool interleaved) {
  at::Tensor y = x.clone();
  auto xa = x.accessor<float, 4>();
  auto ya = y.accessor<float, 4>();
  auto pa = pos.accessor<int64_t, 2>();
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t h = 0; h < x.size(1); ++h)
      for (int64_t s = 0; s < x.size(2); ++s)
        for (int64_t i = 0; i < rot / 2; ++i) {
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + rot / 2;
          const float c = cos[pa[b][s]][i].item<float>(), sn = sin[pa[b][s]][i].item<float>();
          ya[b][h][s][i1] = c * xa[b][h][s][i1] - sn * xa[b][h][s][i2];
          ya[b][h][s][i2] = sn * xa[b][h][s][i1] + c * xa[b][h][s][i2];
        }
  return y;
}

/// Llama's caches: angle p / theta^(2i / rot) for positions [0, positions).
std::pair<at::Tensor, at::Tensor> rope_caches(int64_t positions, int64_t rot) {
  at::Tensor inv = at::pow(10000.0, -at::arange(0, rot, 2, at::kDouble) / double(rot));
  at::Tensor angle = at::outer(at::arange(positions, at::kDouble), inv).to(at::kFloat);
  return {at::cos(angle), at::sin(angle)};
}

// ---- RMSNormalization -----------------------------------------------------------------------

TEST(RMSNormalization, MatchesTheFormulaOverTheLastAxisAndOverSeveral) {
  at::manual_seed(1);
  at::Tensor x = at::randn({2, 3, 8}), s = at::rand({8}) + 0.5;
  expect_close(run("RMSNormalization", {x, s}, 1, {{"epsilon", 1e-3f}})[0], plain_rms(x, s, 2, 1e-3));
  // axis 1 with a scale that broadcasts over the normalized [3, 8].
  at::Tensor s2 = at::rand({1, 8}) + 0.5;
  expect_close(run("RMSNormalization", {x, s2}, 1, {{"axis", int64_t{1}}})[0], plain_rms(x, s2, 1, 1e-5));
  // bf16 keeps its type, the statistics computed in float32 (stash_type 1).
  at::Tensor y = run("RMSNormalization", {x.to(at::kBFloat16), s.to(at::kBFloat16)})[0];
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  expect_close(y, plain_rms(x, s, 2, 1e-5), 3e-2);
}

TEST(RMSNormalization, GradientsEqualThoseOfThePlainFormula) {
  at::manual_seed(2);
  at::Tensor x = at::randn({3, 5}, at::kDouble).requires_grad_(), s = (at::rand({5}, at::kDouble) + 0.5).requires_grad_();
  at::Tensor w = at::randn({3, 5}, at::kDouble);
  (run("RMSNormalization", {x, s})[0] * w).sum().backward();
  at::Tensor gx = x.grad().clone(), gs = s.grad().clone();
  x.mutable_grad().zero_();
  s.mutable_grad().zero_();
  (plain_rms(x, s, 1, 1e-5) * w).sum().backward();
  expect_close(gx, x.grad(), 1e-10);
  expect_close(gs, s.grad(), 1e-10);
}

TEST(RMSNormalization, DeclaresItsScaleAlongTheLastChannelAxis) {
  const OpDef& op = OpRegistry::global().get("RMSNormalization");
  ASSERT_NE(op.weight(1), nullptr);
  EXPECT_EQ(op.weight(1)->role, WeightRole::kScale);
  EXPECT_EQ(op.weight(1)->axes_on(make_node("RMSNormalization", {at::ones({1}), at::ones({1})}), 1).out, 0);
  EXPECT_EQ(op.weight_inputs(), std::vector<int>{1});
}

// ---- RotaryEmbedding ------------------------------------------------------------------------

TEST(RotaryEmbedding, HalvesAndInterleavedMatchThePairwiseRotation) {
  at::manual_seed(3);
  const int64_t b = 2, h = 3, s = 4, d = 8;
  at::Tensor x = at::randn({b, h, s, d});
  auto [cos, sin] = rope_caches(16, d);
  at::Tensor pos = at::tensor({3, 4, 5, 6, 0, 1, 2, 9}, at::kLong).reshape({b, s});
  for (bool inter : {false, true}) {
    at::Tensor y = run("RotaryEmbedding", {x, cos, sin, pos}, 1, {{"interleaved", int64_t{inter}}})[0];
    expect_close(y, plain_rope(x, cos, sin, pos, d, inter));
  }
}

TEST(RotaryEmbedding, PartialRotationLeavesTheRestOfEachHead) {
  at::manual_seed(4);
  at::Tensor x = at::randn({1, 2, 3, 8});
  auto [cos, sin] = rope_caches(8, 4);
  at::Tensor pos = at::tensor({5, 6, 7}, at::kLong).reshape({1, 3});
  at::Tensor y = run("RotaryEmbedding", {x, cos, sin, pos}, 1, {{"rotary_embedding_dim", int64_t{4}}})[0];
  expect_close(y, plain_rope(x, cos, sin, pos, 4, false));
  EXPECT_TRUE(at::equal(y.narrow(-1, 4, 4), x.narrow(-1, 4, 4)));
}

TEST(RotaryEmbedding, ThreeDInputAndCachesWithoutPositionIdsAgree) {
  at::manual_seed(5);
  const int64_t b = 2, h = 2, s = 3, d = 4;
  at::Tensor x4 = at::randn({b, h, s, d});
  auto [cos, sin] = rope_caches(8, d);
  at::Tensor pos = at::tensor({0, 1, 2, 4, 5, 6}, at::kLong).reshape({b, s});
  at::Tensor want = run("RotaryEmbedding", {x4, cos, sin, pos})[0];
  // [B, S, H*D] with num_heads.
  at::Tensor x3 = x4.transpose(1, 2).reshape({b, s, h * d});
  at::Tensor y3 = run("RotaryEmbedding", {x3, cos, sin, pos}, 1, {{"num_heads", h}})[0];
  expect_close(y3, want.transpose(1, 2).reshape({b, s, h * d}));
  // Caches already gathered per (batch, position): [B, S, D/2], no position_ids.
  at::Tensor y = run("RotaryEmbedding", {x4, cos.index({pos}), sin.index({pos})})[0];
  expect_close(y, want);
}

TEST(RotaryEmbedding, RefusesPositionsOutsideTheCacheAndAnOddDim) {
  auto [cos, sin] = rope_caches(4, 4);
  at::Tensor x = at::randn({1, 1, 2, 4});
  testing::expect_input_error([&] { run("RotaryEmbedding", {x, cos, sin, at::tensor({0, 4}, at::kLong).reshape({1, 2})}); },
                              {"position_ids must be in [0, 4)"});
  testing::expect_input_error(
      [&] { run("RotaryEmbedding", {x, cos, sin, at::zeros({1, 2}, at::kLong)}, 1, {{"rotary_embedding_dim", int64_t{3}}}); },
      {"must be even"});
}

// ---- Attention ------------------------------------------------------------------------------

TEST(Attention, MatchesThePlainFormulaWithAndWithoutTheCausalMask) {
  at::manual_seed(6);
  at::Tensor q = at::randn({2, 4, 5, 8}), k = at::randn({2, 4, 5, 8}), v = at::randn({2, 4, 5, 6});
  expect_close(run("Attention", {q, k, v})[0], plain_attention(q, k, v));
  expect_close(run("Attention", {q, k, v}, 1, {{"is_causal", int64_t{1}}})[0],
               plain_attention(q, k, v, causal_bias(5, 5, 0)));
  // An explicit scale replaces 1/sqrt(head_size).
  expect_close(run("Attention", {q, k, v}, 1, {{"scale", 0.5f}})[0],
               plain_attention(q * std::sqrt(0.5 * std::sqrt(8.0)), k * std::sqrt(0.5 * std::sqrt(8.0)), v));
}

TEST(Attention, GroupedKvHeadsServeTheirQueryGroups) {
  at::manual_seed(7);
  at::Tensor q = at::randn({1, 6, 4, 8}), k = at::randn({1, 2, 4, 8}), v = at::randn({1, 2, 4, 8});
  at::Tensor want = run("Attention", {q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)}, 1, {{"is_causal", int64_t{1}}})[0];
  expect_close(run("Attention", {q, k, v}, 1, {{"is_causal", int64_t{1}}})[0], want);
  expect_close(want, plain_attention(q, k, v, causal_bias(4, 4, 0)));
}

TEST(Attention, ThreeDInputsWithHeadCountsEqualTheFourDForm) {
  at::manual_seed(8);
  const int64_t b = 2, s = 3, qh = 4, kvh = 2, d = 4;
  at::Tensor q = at::randn({b, s, qh * d}), k = at::randn({b, s, kvh * d}), v = at::randn({b, s, kvh * d});
  auto heads = [&](const at::Tensor& t, int64_t h) { return t.reshape({b, s, h, d}).transpose(1, 2); };
  Tensors got = run("Attention", {q, k, v}, 3, {{"q_num_heads", qh}, {"kv_num_heads", kvh}, {"is_causal", int64_t{1}}});
  at::Tensor want = run("Attention", {heads(q, qh), heads(k, kvh), heads(v, kvh)}, 1, {{"is_causal", int64_t{1}}})[0];
  expect_close(got[0], want.transpose(1, 2).reshape({b, s, qh * d}));
  expect_close(got[1], heads(k, kvh));  // present_key is 4-D
}

TEST(Attention, TokenByTokenWithTheCacheEqualsTheWholeSequence) {
  at::manual_seed(9);
  const int64_t s = 6;
  at::Tensor q = at::randn({2, 4, s, 8}), k = at::randn({2, 2, s, 8}), v = at::randn({2, 2, s, 8});
  const Attrs causal = {{"is_causal", int64_t{1}}};
  at::Tensor whole = run("Attention", {q, k, v}, 1, causal)[0];
  // A prompt of 2 tokens, then one token at a time with past -> present.
  Tensors step = run("Attention", {q.narrow(2, 0, 2), k.narrow(2, 0, 2), v.narrow(2, 0, 2)}, 3, causal);
  std::vector<at::Tensor> ys = {step[0]};
  for (int64_t t = 2; t < s; ++t) {
    step = run("Attention", {q.narrow(2, t, 1), k.narrow(2, t, 1), v.narrow(2, t, 1), at::Tensor(), step[1], step[2]}, 3,
               causal);
    ys.push_back(step[0]);
  }
  expect_close(at::cat(ys, 2), whole);
  expect_close(step[1], k);
  expect_close(step[2], v);
  // Two new tokens on a past of 3: the causal mask is shifted by the past length.
  Tensors past = run("Attention", {q.narrow(2, 0, 3), k.narrow(2, 0, 3), v.narrow(2, 0, 3)}, 3, causal);
  at::Tensor two = run("Attention", {q.narrow(2, 3, 2), k.narrow(2, 3, 2), v.narrow(2, 3, 2), at::Tensor(), past[1], past[2]},
                       3, causal)[0];
  expect_close(two, whole.narrow(2, 3, 2));
}

TEST(Attention, BoolAndAdditiveMasksAgreeAndAShortMaskIsPadded) {
  at::manual_seed(10);
  at::Tensor q = at::randn({1, 2, 3, 4}), k = at::randn({1, 2, 5, 4}), v = at::randn({1, 2, 5, 4});
  at::Tensor keep = at::tensor({1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1}, at::kLong).reshape({3, 5}).ne(0);
  at::Tensor bias = at::zeros({3, 5}).masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor want = plain_attention(q, k, v, bias);
  expect_close(run("Attention", {q, k, v, keep})[0], want);
  expect_close(run("Attention", {q, k, v, bias})[0], want);
  // A mask over the first 4 keys: the fifth takes no part.
  at::Tensor short_keep = keep.narrow(1, 0, 4);
  at::Tensor padded = at::cat({short_keep, at::zeros({3, 1}, at::kBool)}, 1);
  expect_close(run("Attention", {q, k, v, short_keep})[0],
               plain_attention(q, k, v, at::zeros({3, 5}).masked_fill(padded.logical_not(), -INFINITY)));
}

TEST(Attention, SoftcapAndTheScoresOutputTakeTheSpelledOutPath) {
  at::manual_seed(11);
  at::Tensor q = at::randn({1, 2, 3, 4}) * 3, k = at::randn({1, 2, 3, 4}) * 3, v = at::randn({1, 2, 3, 4});
  expect_close(run("Attention", {q, k, v}, 1, {{"softcap", 2.0f}})[0], plain_attention(q, k, v, {}, 2.0));
  Tensors out = run("Attention", {q, k, v}, 4, {{"is_causal", int64_t{1}}, {"qk_matmul_output_mode", int64_t{0}}});
  expect_close(out[3], at::matmul(q, k.transpose(-1, -2)) / 2.0);  // raw scores, before the mask
  expect_close(out[0], plain_attention(q, k, v, causal_bias(3, 3, 0)));
  out = run("Attention", {q, k, v}, 4, {{"qk_matmul_output_mode", int64_t{3}}});
  expect_close(out[3].sum(-1), at::ones({1, 2, 3}));  // the softmax
}

TEST(Attention, GradientsThroughSdpaEqualThoseOfThePlainFormula) {
  at::manual_seed(12);
  auto make = [](std::vector<int64_t> s) { return at::randn(s, at::kDouble).requires_grad_(); };
  at::Tensor q = make({1, 4, 3, 4}), k = make({1, 2, 3, 4}), v = make({1, 2, 3, 4}), w = at::randn({1, 4, 3, 4}, at::kDouble);
  (run("Attention", {q, k, v}, 1, {{"is_causal", int64_t{1}}})[0] * w).sum().backward();
  Tensors got = {q.grad().clone(), k.grad().clone(), v.grad().clone()};
  for (auto* t : {&q, &k, &v}) t->mutable_grad().zero_();
  (plain_attention(q, k, v, causal_bias(3, 3, 0).to(at::kDouble)) * w).sum().backward();
  expect_close(got[0], q.grad(), 1e-9);
  expect_close(got[1], k.grad(), 1e-9);
  expect_close(got[2], v.grad(), 1e-9);
}

TEST(Attention, RefusesHeadsThatDoNotGroupAndAHalfCache) {
  at::Tensor q = at::randn({1, 3, 2, 4}), k = at::randn({1, 2, 2, 4});
  testing::expect_input_error([&] { run("Attention", {q, k, k}); }, {"multiple of the key/value heads"});
  at::Tensor q4 = at::randn({1, 2, 2, 4});
  testing::expect_input_error([&] { run("Attention", {q4, k, k, at::Tensor(), k}); }, {"past_key and past_value come together"});
  testing::expect_input_error([&] { run("Attention", {at::randn({1, 2, 8}), at::randn({1, 2, 8}), at::randn({1, 2, 8})}); },
                              {"q_num_heads and kv_num_heads"});
}

// ---- the three in a graph: ONNX, shapes, training ---------------------------------------------

/// x [N, 4, 8] -> RMSNorm -> q, k, v projections -> RoPE (3-D, 2 heads) -> Attention (causal,
/// 2 query heads over 1 KV head, with a cache) -> y, present_key, present_value.
Graph small_decoder_layer() {
  at::manual_seed(13);
  Graph g;
  g.inputs = {{"x", at::kFloat, {Dim::sym("N"), 4, 8}},
              {"pos", at::kLong, {Dim::sym("N"), 4}},
              {"past_k", at::kFloat, {Dim::sym("N"), 1, 2, 4}},
              {"past_v", at::kFloat, {Dim::sym("N"), 1, 2, 4}}};
  g.outputs = {{"y", at::kFloat, {}}, {"present_k", at::kFloat, {}}, {"present_v", at::kFloat, {}}};
  g.initializers["norm.scale"] = at::rand({8}) + 0.5;
  g.initializers["wq"] = at::randn({8, 8}) * 0.3;
  g.initializers["wk"] = at::randn({8, 4}) * 0.3;
  g.initializers["wv"] = at::randn({8, 4}) * 0.3;
  auto [cos, sin] = rope_caches(16, 4);
  g.initializers["cos"] = cos;
  g.initializers["sin"] = sin;
  g.add_node("RMSNormalization", {"x", "norm.scale"}, {"h"}, {{"epsilon", 1e-6f}});
  g.add_node("MatMul", {"h", "wq"}, {"q"});
  g.add_node("MatMul", {"h", "wk"}, {"k"});
  g.add_node("MatMul", {"h", "wv"}, {"v"});
  g.add_node("RotaryEmbedding", {"q", "cos", "sin", "pos"}, {"qr"}, {{"num_heads", int64_t{2}}});
  g.add_node("RotaryEmbedding", {"k", "cos", "sin", "pos"}, {"kr"}, {{"num_heads", int64_t{1}}});
  g.add_node("Attention", {"qr", "kr", "v", "", "past_k", "past_v"}, {"y", "present_k", "present_v"},
             {{"is_causal", int64_t{1}}, {"q_num_heads", int64_t{2}}, {"kv_num_heads", int64_t{1}}});
  return g;
}

Tensors layer_inputs() {
  return {at::randn({3, 4, 8}), at::arange(2, 6, at::kLong).repeat({3, 1}), at::randn({3, 1, 2, 4}), at::randn({3, 1, 2, 4})};
}

TEST(TransformerOps, ALayerInfersShapesAndRoundTripsThroughOnnxOpset23) {
  Graph g = small_decoder_layer();
  g.verify();
  infer_shapes(g);
  EXPECT_EQ(shape_str(g.outputs[0].shape), "[N,4,8]");
  EXPECT_EQ(shape_str(g.outputs[1].shape), "[N,1,6,4]");
  testing::TempDir dir;
  const std::string path = dir.file("layer.onnx");
  save_onnx(g, path);
  EXPECT_EQ(reader::read_model(path).opset, 23);  // the graph said 17: raised for the new ops
  const Tensors in = layer_inputs();
  Module a(g, Module::Use::kFrozen), b(load_onnx(path), Module::Use::kFrozen);
  const Tensors ya = a.forward(in), yb = b.forward(in);
  ASSERT_EQ(yb.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_close(yb[i], ya[i], 0);
}

TEST(TransformerOps, ALayerTrainsItsNormScaleAndProjections) {
  Module m(small_decoder_layer());
  const Tensors in = layer_inputs();
  m.forward(in)[0].pow(2).sum().backward();
  int with_grad = 0;
  for (const auto& p : m.parameters()) with_grad += p.grad().defined() && p.grad().abs().sum().item<double>() > 0;
  EXPECT_EQ(with_grad, 4);  // norm.scale, wq, wk, wv (cos/sin feed no weight input)
}

}  // namespace
}  // namespace pare::core
