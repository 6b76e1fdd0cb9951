// lm/weight_quant: AWQ scales a group's input channels and folds the inverse into the norm or linear
// before it, so the model computes what it did (at int8 its logits stay as near the unquantized
// model's as RTN's) while its int4 weights lose less where activations have outlier channels.
// SmoothQuant folds its scales the same way, and its W8A8 loses less than plain W8A8 there.
#include <gtest/gtest.h>

#include <cmath>

#include "core/module.h"
#include "core/onnx_io.h"
#include "lm/weight_quant.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

// A 2-layer model whose norms make four outlier channels in the inputs of q/k/v and of the MLP, as
// trained LMs' activations have.
struct Case {
  const char* family;
  int64_t kv_heads;
};

LmConfig outlier_config(const Case& k) {
  LmConfig c = tiny_config(k.family);
  c.hidden = 64, c.heads = 4, c.head_dim = 16, c.kv_heads = k.kv_heads, c.intermediate = 96;
  return c;
}

std::map<std::string, at::Tensor> outlier_weights(const LmConfig& c) {
  auto w = random_weights(c);
  for (auto& [name, t] : w)
    if (t.dim() == 2) t.mul_(0.15);
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* norm : {c.family->names.attn_norm, c.family->names.mlp_norm})
      w.at(layer_name(norm, i) + ".weight").narrow(0, 0, 4).mul_(10.0);
  return w;
}

double relative_logit_error(const core::Graph& g, const at::Tensor& want, const at::Tensor& tokens) {
  core::Module net(g, core::Module::Use::kFrozen);
  const at::Tensor got = net.forward({tokens})[0];
  return ((got - want).norm() / want.norm()).item<double>();
}

// The model of a Case, its calibration windows, held-out tokens and the unquantized logits on them.
struct Outliers {
  explicit Outliers(const Case& k) : c(outlier_config(k)), w(outlier_weights(c)) {
    at::manual_seed(7);
    windows = at::randint(0, c.vocab, {8, 32}, at::kLong);
    held_out = at::randint(0, c.vocab, {2, 32}, at::kLong);
    want = core::Module(make_model(c, w).graph, core::Module::Use::kFrozen).forward({held_out})[0];
  }
  LmConfig c;
  std::map<std::string, at::Tensor> w;
  at::Tensor windows, held_out, want;
};

TEST(WeightQuant, AwqFoldsItsScalesWithoutChangingWhatTheModelComputes) {
  // Llama with grouped KV heads (o has no fold), with one KV head per query head (o's into v),
  // GPT-2 (LayerNorm's weight and bias, v inside the fused qkv, no fold through GELU).
  for (const Case& k : {Case{"llama", 2}, Case{"llama", 4}, Case{"gpt2", 4}}) {
    SCOPED_TRACE(std::string(k.family) + " kv_heads " + std::to_string(k.kv_heads));
    const Outliers o(k);
    const LmConfig& c = o.c;
    const auto& w = o.w;
    const at::Tensor &windows = o.windows, &held_out = o.held_out, &want = o.want;
    std::map<std::string, double> error;
    int folded = 0;
    for (const int bits : {8, 4}) {
      for (const char* method : {"rtn", "awq", "awq+gptq"}) {
        std::map<std::string, at::Tensor> copy;  // the graph holds the tensors it is given, and quantizing writes them
        for (const auto& [name, t] : w) copy[name] = t.clone();
        LmModel m = make_model(c, copy);
        LmQuantOptions opts;
        opts.bits = bits, opts.group = 32, opts.method = method;
        const LmQuantResult r = quantize_weights(m, windows, opts);
        for (const LmQuantLayer& l : r.layers) folded += l.awq_alpha > 0 || l.awq_duo;
        error[method + std::to_string(bits)] = relative_logit_error(m.graph, want, held_out);
      }
    }
    EXPECT_GT(folded, 0);
    // A wrong fold changes the function by the scales themselves (up to tens of times here).
    EXPECT_LT(error["awq8"], 0.05);
    EXPECT_LT(error["awq8"], 1.5 * error["rtn8"] + 1e-3);
    EXPECT_LT(error["awq4"], error["rtn4"]);
    EXPECT_LT(error["awq+gptq8"], 1.5 * error["rtn8"] + 1e-3);  // GPTQ on the scaled weights: the same folds
    std::printf("%s kv %lld: logit error int8 RTN %.4f AWQ %.4f, int4 RTN %.4f AWQ %.4f\n", k.family,
                static_cast<long long>(k.kv_heads), error["rtn8"], error["awq8"], error["rtn4"], error["awq4"]);
  }
}

TEST(WeightQuant, SmoothQuantMovesOutliersIntoTheWeightsAndHelpsW8A8) {
  for (const Case& k : {Case{"llama", 2}, Case{"llama", 4}, Case{"gpt2", 4}}) {
    SCOPED_TRACE(std::string(k.family) + " kv_heads " + std::to_string(k.kv_heads));
    const Outliers o(k);
    quantize::PtqOptions opts;
    opts.activations(quantize::QScheme::kSymmetricInt8).batch_size(4);
    const quantize::PtqResult plain = quantize_w8a8(make_model(o.c, o.w), o.windows, opts);

    std::map<std::string, at::Tensor> copy;  // smoothing writes the graph's tensors
    for (const auto& [name, t] : o.w) copy[name] = t.clone();
    LmModel m = make_model(o.c, copy);
    const LmSmoothResult s = smooth_activations(m, o.windows, 0.5);
    EXPECT_LT(relative_logit_error(m.graph, o.want, o.held_out), 1e-5);  // the function is kept
    int smoothed = 0;
    for (const LmSmoothGroup& g : s.groups)
      if (g.scale_min != 1 || g.scale_max != 1) {
        ++smoothed;
        EXPECT_LT(g.input_max_after, 0.5 * g.input_max_before) << g.weights.front();
      }
    EXPECT_GE(smoothed, 2 * o.c.layers);  // q/k/v and the MLP's input at least
    const quantize::PtqResult sq = quantize_w8a8(m, o.windows, opts);
    const double plain_error = relative_logit_error(plain.graph, o.want, o.held_out);
    const double sq_error = relative_logit_error(sq.graph, o.want, o.held_out);
    EXPECT_LT(sq_error, plain_error);
    std::printf("%s kv %lld: W8A8 logit error plain %.4f, SmoothQuant 0.5 %.4f\n", k.family,
                static_cast<long long>(k.kv_heads), plain_error, sq_error);

    // The ONNX file reads back as the language model: its config, its graph's logits.
    testing::TempDir dir;
    core::save_onnx(sq.graph, dir.file("w8a8.onnx"));
    const LmModel back = load_lm(dir.file("w8a8.onnx"));
    EXPECT_EQ(back.config.hidden, o.c.hidden);
    EXPECT_EQ(back.config.family, o.c.family);
    auto logits = [&](const core::Graph& g) {
      return core::Module(g, core::Module::Use::kFrozen).forward({o.held_out})[0];
    };
    EXPECT_TRUE(testing::bitwise_equal(logits(back.graph), logits(sq.graph)));
  }
  const LmConfig c = outlier_config({"llama", 2});
  LmModel m = make_model(c, outlier_weights(c));
  EXPECT_THROW(smooth_activations(m, at::zeros({1, 8}, at::kLong), 1.5), InputError);
}

TEST(WeightQuant, RefusesAnUnknownMethod) {
  const LmConfig c = outlier_config({"llama", 2});
  LmModel m = make_model(c, outlier_weights(c));
  LmQuantOptions opts;
  opts.method = "smoothquant";
  EXPECT_THROW(quantize_weights(m, at::zeros({1, 8}, at::kLong), opts), InputError);
}

}  // namespace
}  // namespace pare::lm
