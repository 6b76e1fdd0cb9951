// lm/minitron: the importance of heads, neurons, channels and layers comes from what they contribute
// on the calibration windows, so units made to contribute nothing rank last and pruning them leaves
// the model's logits as they were; the smaller model is one its family's config can say.
#include "lm/minitron.h"

#include <gtest/gtest.h>

#include "core/module.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

using testing::expect_option_error;

at::Tensor logits(const LmModel& m, const at::Tensor& tokens) {
  return core::Module(m.graph, core::Module::Use::kFrozen).forward({tokens})[0];
}

// Weights where KV group 1 (its v rows), MLP neurons 0..7 (their up rows and biases) and all of
// layer 1's writes to the residual stream (o, down and their biases) are zero: they contribute nothing.
std::map<std::string, at::Tensor> idle_units(const LmConfig& c) {
  auto w = random_weights(c);
  const TensorNames& n = c.family->names;
  const bool in_out = c.family->linear_in_out;
  for (int64_t i = 0; i < c.layers; ++i) {
    if (*n.v) w.at(layer_name(n.v, i) + ".weight").narrow(0, c.head_dim, c.head_dim).zero_();
    w.at(layer_name(n.up, i) + ".weight").narrow(in_out ? 1 : 0, 0, 8).zero_();
    if (w.count(layer_name(n.up, i) + ".bias")) w.at(layer_name(n.up, i) + ".bias").narrow(0, 0, 8).zero_();
  }
  for (const char* role : {n.o, n.down}) {
    w.at(layer_name(role, 1) + ".weight").zero_();
    if (w.count(layer_name(role, 1) + ".bias")) w.at(layer_name(role, 1) + ".bias").zero_();
  }
  return w;
}

TEST(Minitron, PruningWhatContributesNothingKeepsTheLogits) {
  // Llama with grouped KV heads (heads, neurons, a layer) and GPT-2 (Conv1D layouts: neurons, a layer).
  for (const char* family : {"llama", "gpt2"}) {
    SCOPED_TRACE(family);
    LmConfig c = tiny_config(family);
    c.layers = 3;
    const LmModel m = make_model(c, idle_units(c));
    at::manual_seed(5);
    const at::Tensor windows = at::randint(0, c.vocab, {4, 12}, at::kLong);
    const Importance imp = importance(m, windows);
    EXPECT_EQ(imp.tokens, 48);
    EXPECT_NEAR(imp.layers[1], 0.0, 1e-9);
    EXPECT_GT(imp.layers[0], 1e-3);
    EXPECT_GT(imp.layers[2], 1e-3);
    EXPECT_NEAR(imp.neurons[0].narrow(0, 0, 8).abs().max().item<double>(), 0.0, 1e-12);
    EXPECT_GT(imp.neurons[0].narrow(0, 8, c.intermediate - 8).min().item<double>(), 0.0);
    const bool gqa = std::string(family) == "llama";
    PruneTargets t;
    t.layers = 2, t.intermediate = c.intermediate - 8, t.heads = gqa ? 2 : 0;
    const Keep k = choose(c, imp, t, "test");
    EXPECT_EQ(k.layers, (std::vector<int64_t>{0, 2}));
    if (gqa) EXPECT_EQ(k.kv_groups, (std::vector<std::vector<int64_t>>{{0}, {0}}));
    ASSERT_EQ(k.neurons.size(), 2u);
    EXPECT_EQ(k.neurons[0].front(), 8);
    const LmModel p = slice(m, k, "test");
    EXPECT_EQ(p.config.layers, 2);
    EXPECT_EQ(p.config.intermediate, c.intermediate - 8);
    EXPECT_EQ(p.config.heads, gqa ? 2 : c.heads);
    EXPECT_EQ(p.config.kv_heads, gqa ? 1 : c.kv_heads);
    EXPECT_EQ(p.config.head_dim, c.head_dim);
    EXPECT_LT(p.config.parameter_count(), c.parameter_count());
    const at::Tensor held_out = at::randint(0, c.vocab, {2, 9}, at::kLong);
    EXPECT_LT((logits(p, held_out) - logits(m, held_out)).abs().max().item<double>(), 1e-5);
  }
}

TEST(Minitron, HiddenChannelsRankByWhatTheNormsLetThrough) {
  // Qwen2 (q/k/v biases) and Qwen3 (per-head q/k norms, untouched): channel 5, zeroed by every norm,
  // ranks last and goes; the smaller model builds and runs, with its heads pruned as well.
  for (const char* family : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(family);
    const LmConfig c = tiny_config(family);
    auto w = random_weights(c);
    for (auto& [name, t] : w)
      if (name.find("norm") != std::string::npos && name.find("q_norm") == std::string::npos &&
          name.find("k_norm") == std::string::npos)
        t[5] = 0;
    const LmModel m = make_model(c, w);
    at::manual_seed(5);
    const Importance imp = importance(m, at::randint(0, c.vocab, {3, 10}, at::kLong));
    EXPECT_EQ(imp.hidden.argmin().item<int64_t>(), 5);
    PruneTargets t;
    t.hidden = c.hidden - 4, t.heads = 2;
    const Keep k = choose(c, imp, t, "test");
    EXPECT_EQ(std::count(k.hidden.begin(), k.hidden.end(), 5), 0);
    const LmModel p = slice(m, k, "test");
    EXPECT_EQ(p.config.hidden, c.hidden - 4);
    EXPECT_EQ(p.config.heads, 2);
    const at::Tensor out = logits(p, at::randint(0, c.vocab, {1, 7}, at::kLong));
    EXPECT_EQ(out.sizes(), (at::IntArrayRef{1, 7, c.vocab}));
    EXPECT_TRUE(out.isfinite().all().item<bool>());
  }
}

TEST(Minitron, RefusesWhatTheConfigCannotSay) {
  const LmConfig llama = tiny_config("llama");  // 2 layers, 4 heads in 2 groups of 2, hidden 16
  auto validate = [](const LmConfig& c, PruneTargets t) { return [c, t] { t.validate(c, "m"); }; };
  expect_option_error(validate(llama, {0, 0, 3, 0}), "heads",
                      {"heads 3 must keep whole query groups (a multiple of 2)"});
  expect_option_error(validate(llama, {4, 0, 0, 0}), "layers",
                      {"layers 4 is not between 1 and the 2 decoder layers of m"});
  expect_option_error(validate(llama, {0, 17, 0, 0}), "hidden", {"hidden 17"});
  expect_option_error(validate(tiny_config("gpt2"), {0, 8, 0, 0}), "hidden", {"GPT2LMHeadModel ties the head size"});
  EXPECT_NO_THROW(PruneTargets({1, 8, 2, 12}).validate(llama, "m"));
}

}  // namespace
}  // namespace pare::lm
