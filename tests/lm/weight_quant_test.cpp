// lm/weight_quant: AWQ scales a group's input channels and folds the inverse into the norm or linear
// before it, so the model computes what it did (at int8 its logits stay as near the unquantized
// model's as RTN's) while its int4 weights lose less where activations have outlier channels.
#include <gtest/gtest.h>

#include <cmath>

#include "core/module.h"
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

double relative_logit_error(const LmModel& m, const at::Tensor& want, const at::Tensor& tokens) {
  core::Module net(m.graph, core::Module::Use::kFrozen);
  const at::Tensor got = net.forward({tokens})[0];
  return ((got - want).norm() / want.norm()).item<double>();
}

TEST(WeightQuant, AwqFoldsItsScalesWithoutChangingWhatTheModelComputes) {
  // Llama with grouped KV heads (o has no fold), with one KV head per query head (o's into v),
  // GPT-2 (LayerNorm's weight and bias, v inside the fused qkv, no fold through GELU).
  for (const Case& k : {Case{"llama", 2}, Case{"llama", 4}, Case{"gpt2", 4}}) {
    SCOPED_TRACE(std::string(k.family) + " kv_heads " + std::to_string(k.kv_heads));
    const LmConfig c = outlier_config(k);
    const auto w = outlier_weights(c);
    at::manual_seed(7);
    const at::Tensor windows = at::randint(0, c.vocab, {8, 32}, at::kLong);
    const at::Tensor held_out = at::randint(0, c.vocab, {2, 32}, at::kLong);
    const LmModel fp = make_model(c, w);
    const at::Tensor want = core::Module(fp.graph, core::Module::Use::kFrozen).forward({held_out})[0];
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
        error[method + std::to_string(bits)] = relative_logit_error(m, want, held_out);
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

TEST(WeightQuant, RefusesAnUnknownMethod) {
  const LmConfig c = outlier_config({"llama", 2});
  LmModel m = make_model(c, outlier_weights(c));
  LmQuantOptions opts;
  opts.method = "smoothquant";
  EXPECT_THROW(quantize_weights(m, at::zeros({1, 8}, at::kLong), opts), InputError);
}

}  // namespace
}  // namespace pare::lm
