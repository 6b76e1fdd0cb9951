#include <gtest/gtest.h>

#include "core/module.h"
#include "lm/data.h"
#include "lm/spec.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

TEST(LmSpec, ReadsEveryKeyAndTheTokenizersVocabulary) {
  const LmConfig c = parse_lm_spec("llama:layers=3,dim=64,heads=4,kv-heads=2,ff=96,ctx=32", 300);
  EXPECT_EQ(c.family->architecture, std::string("LlamaForCausalLM"));
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(parse_lm_spec("qwen3:dim=64,heads=4,head-dim=24,vocab=50", 300).vocab, 50);
  EXPECT_TRUE(parse_lm_spec("gpt2:dim=32,heads=2", 10).tie_embeddings);
}

TEST(LmSpec, RefusesWhatItCannotBuild) {
  testing::expect_input_error([] { parse_lm_spec("llama:layers=2,wings=3", 10); }, {"unknown key 'wings'"});
  testing::expect_input_error([] { parse_lm_spec("llama:heads=4,kv-heads=3", 10); }, {"multiple of num_key_value_heads"});
  testing::expect_input_error([] { parse_lm_spec("llama:dim=x", 10); }, {"dim=x is not a number"});
  testing::expect_input_error([] { parse_lm_spec("llama:layers=100000,dim=8192", 10); }, {"parameters"});
  EXPECT_FALSE(is_new_lm_spec("mlp:784-10"));
  EXPECT_FALSE(is_new_lm_spec("hf:dir"));
}

TEST(LmSpec, ANewModelRunsAndItsLogitsAreNearUniform) {
  const LmModel m = init_model(parse_lm_spec("llama:layers=2,dim=32,heads=4,kv-heads=2,ff=48,ctx=16", 100), 7);
  core::Module net(m.graph, core::Module::Use::kFrozen);
  const at::Tensor logits = net.forward({at::randint(0, 100, {2, 10}, at::kLong)})[0];
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 100}));
  EXPECT_LT(logits.abs().max().item<double>(), 1.0);  // std 0.02 weights: close to log(100) perplexity
  // Seeded: the same spec and seed give the same weights.
  const LmModel again = init_model(m.config, 7);
  EXPECT_TRUE(testing::bitwise_equal(m.graph.initializers.at("model.layers.1.mlp.up_proj.weight"),
                                     again.graph.initializers.at("model.layers.1.mlp.up_proj.weight")));
}

TEST(LmData, WindowsPredictTheNextToken) {
  std::vector<int64_t> ids(23);
  for (int64_t i = 0; i < 23; ++i) ids[i] = i;
  const core::TensorDataset ds = token_windows(ids, 5, "t");
  ASSERT_EQ(ds.x.sizes(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ds.x[1][0].item<int64_t>(), 5);
  EXPECT_EQ(ds.y[1][4].item<int64_t>(), 10);
  testing::expect_input_error([] { token_windows({1, 2, 3}, 5, "short"); }, {"short", "fewer than one window"});
}

}  // namespace
}  // namespace pare::lm
