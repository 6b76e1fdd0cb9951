// Small language models for tests/lm: a config of each family, random weights under the
// checkpoint's names and layouts, and the model they build.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "lm/builder.h"
#include "lm/model.h"

namespace pare::lm {

inline LmConfig tiny_config(const char* family) {
  LmConfig c;
  c.family = find_family(family);
  c.vocab = 40, c.hidden = 16, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.intermediate = 24;
  c.max_positions = 64, c.bos = 1, c.eos = 2;
  if (c.family->positions == Positions::kLearned) {
    c.kv_heads = c.heads, c.norm_eps = 1e-5, c.tie_embeddings = true;
  } else {
    c.rope_theta = 50000, c.rope_factor = 8, c.rope_original_max = 16;
  }
  return c;
}

// Random weights under the checkpoint's names and layouts.
inline std::map<std::string, at::Tensor> random_weights(const LmConfig& c) {
  at::manual_seed(3);
  std::map<std::string, at::Tensor> w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { w[name] = at::randn(shape); };
  const int64_t h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, m = c.intermediate;
  if (c.family->positions == Positions::kLearned) {
    add("transformer.wte.weight", {c.vocab, h});
    add("transformer.wpe.weight", {c.max_positions, h});
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      for (const char* n : {"ln_1", "ln_2"}) add(p + n + ".weight", {h}), add(p + n + ".bias", {h});
      add(p + "attn.c_attn.weight", {h, 3 * h}), add(p + "attn.c_attn.bias", {3 * h});
      add(p + "attn.c_proj.weight", {h, h}), add(p + "attn.c_proj.bias", {h});
      add(p + "mlp.c_fc.weight", {h, m}), add(p + "mlp.c_fc.bias", {m});
      add(p + "mlp.c_proj.weight", {m, h}), add(p + "mlp.c_proj.bias", {h});
    }
    add("transformer.ln_f.weight", {h}), add("transformer.ln_f.bias", {h});
    return w;
  }
  add("model.embed_tokens.weight", {c.vocab, h});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}), add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h}), add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h}), add(p + "self_attn.o_proj.weight", {h, q});
    add(p + "mlp.gate_proj.weight", {m, h}), add(p + "mlp.up_proj.weight", {m, h}), add(p + "mlp.down_proj.weight", {h, m});
    if (c.family->qkv_bias)
      add(p + "self_attn.q_proj.bias", {q}), add(p + "self_attn.k_proj.bias", {kv}), add(p + "self_attn.v_proj.bias", {kv});
    if (c.family->qk_norm)
      add(p + "self_attn.q_norm.weight", {c.head_dim}), add(p + "self_attn.k_norm.weight", {c.head_dim});
  }
  add("model.norm.weight", {h});
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab, h});
  return w;
}

inline LmModel make_model(const LmConfig& c, const std::map<std::string, at::Tensor>& w) {
  LmModel m;
  m.config = c;
  m.graph = build_graph(c, w, {}, "test weights");
  return m;
}

}  // namespace pare::lm
