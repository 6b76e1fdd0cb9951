#include "lm/builder.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace pare::lm {

namespace {

std::string sizes_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
  return out + "]";
}

// Emits the graph of one model; every value and node is named after the tensor it comes from.
class Builder {
 public:
  Builder(const LmConfig& c, const std::map<std::string, at::Tensor>& w, const BuildOptions& o, const std::string& what)
      : c_(c), f_(*c.family), w_(w), kv_(o.kv_cache), what_(what), dtype_(o.dtype.value_or(dtype_of(c.dtype))),
        init_(o.init) {
    g_.name = f_.architecture;
    g_.opset = 23;
  }

  core::Graph build() {
    g_.inputs.push_back({"input_ids", at::kLong, {core::Dim::sym("batch"), core::Dim::sym("sequence")}});
    std::string h = op("Gather", {weight(std::string(f_.names.embed) + ".weight", {c_.vocab, c_.hidden}), "input_ids"}, "embed");
    positions();
    if (f_.positions == Positions::kLearned)
      h = op("Add", {h, op("Gather", {weight(std::string(f_.names.positions) + ".weight", {c_.max_positions, c_.hidden}), positions_},
                           "pos_embed")}, "embed_sum");
    for (int64_t i = 0; i < c_.layers; ++i) h = layer(h, i);
    h = norm(h, f_.names.final_norm, "final_norm");
    const char* head = c_.tie_embeddings ? f_.names.embed : f_.names.lm_head;
    std::string logits = linear(h, head, c_.hidden, c_.vocab, false, /*linear_in_out=*/false);
    if (dtype_ != at::kFloat) logits = op("Cast", {logits}, "logits_fp32", {{"to", int64_t{1}}});
    g_.add_node("Identity", {logits}, {"logits"}, {}, "logits");
    g_.outputs.insert(g_.outputs.begin(), core::ValueInfo{"logits", at::kFloat,
                                                          {core::Dim::sym("batch"), core::Dim::sym("sequence"), c_.vocab}});
    leftovers();
    return std::move(g_);
  }

 private:
  // position_ids [batch, sequence]: past, past + 1, ... (past = 0 without a cache).
  void positions() {
    std::string start = constant("zero", at::zeros({}, at::kLong));
    if (kv_) {
      const std::string s = op("Shape", {"past_key.0"}, "past_shape", {{"start", int64_t{2}}, {"end", int64_t{3}}});
      start = op("Squeeze", {s, constant("axis0", at::zeros({1}, at::kLong))}, "past_length");
    }
    const std::string ids_shape = op("Shape", {"input_ids"}, "ids_shape");
    const std::string len = op("Squeeze", {op("Shape", {"input_ids"}, "seq_shape", {{"start", int64_t{1}}, {"end", int64_t{2}}}),
                                           constant("axis0", at::zeros({1}, at::kLong))}, "seq_length");
    const std::string range = op("Range", {start, op("Add", {start, len}, "end_position"),
                                           constant("one", at::ones({}, at::kLong))}, "positions");
    const std::string row = op("Unsqueeze", {range, constant("axis0", at::zeros({1}, at::kLong))}, "position_row");
    positions_ = op("Expand", {row, ids_shape}, "position_ids");
    if (f_.positions == Positions::kRope) {
      auto [cos, sin] = rotary_tables(c_);
      cos_ = constant("rotary.cos", cos.to(dtype_));
      sin_ = constant("rotary.sin", sin.to(dtype_));
    }
  }

  std::string layer(const std::string& h, int64_t i) {
    const std::string p = "layer" + std::to_string(i) + ".";
    const int64_t q_width = c_.heads * c_.head_dim, kv_width = c_.kv_heads * c_.head_dim;
    const std::string x = norm(h, layer_name(f_.names.attn_norm, i), p + "attn_norm");
    std::string q, k, v;
    if (*f_.names.qkv) {  // GPT-2's c_attn: one [hidden, 3 hidden] projection, split
      const std::string qkv = linear(x, layer_name(f_.names.qkv, i), c_.hidden, q_width + 2 * kv_width, true,
                                     f_.linear_in_out);
      q = p + "q", k = p + "k", v = p + "v";
      g_.add_node("Split", {qkv, constant(p + "qkv_split", at::tensor({q_width, kv_width, kv_width}, at::kLong))},
                  {q, k, v}, {{"axis", int64_t{-1}}}, p + "qkv_split");
    } else {
      const bool qkv_bias = f_.qkv_bias || c_.attention_bias;
      q = linear(x, layer_name(f_.names.q, i), c_.hidden, q_width, qkv_bias, f_.linear_in_out);
      k = linear(x, layer_name(f_.names.k, i), c_.hidden, kv_width, qkv_bias, f_.linear_in_out);
      v = linear(x, layer_name(f_.names.v, i), c_.hidden, kv_width, qkv_bias, f_.linear_in_out);
    }
    if (f_.qk_norm) {
      q = head_norm(q, layer_name(f_.names.q_norm, i), c_.heads, p + "q_norm");
      k = head_norm(k, layer_name(f_.names.k_norm, i), c_.kv_heads, p + "k_norm");
    }
    if (f_.positions == Positions::kRope) {
      q = op("RotaryEmbedding", {q, cos_, sin_, positions_}, p + "q_rotary", {{"num_heads", c_.heads}});
      k = op("RotaryEmbedding", {k, cos_, sin_, positions_}, p + "k_rotary", {{"num_heads", c_.kv_heads}});
    }
    const std::string y = attention(q, k, v, i);
    const std::string o = linear(y, layer_name(f_.names.o, i), q_width, c_.hidden,
                                 f_.all_biases || c_.attention_bias, f_.linear_in_out);
    const std::string h2 = op("Add", {h, o}, p + "attn_residual");
    const std::string x2 = norm(h2, layer_name(f_.names.mlp_norm, i), p + "mlp_norm");
    const bool b = f_.all_biases || c_.mlp_bias;
    std::string a;
    if (f_.mlp == Mlp::kSwiGlu) {
      const std::string gate = linear(x2, layer_name(f_.names.gate, i), c_.hidden, c_.intermediate, b, false);
      const std::string up = linear(x2, layer_name(f_.names.up, i), c_.hidden, c_.intermediate, b, false);
      const std::string silu = op("Mul", {gate, op("Sigmoid", {gate}, p + "gate_sigmoid")}, p + "gate_silu");
      a = op("Mul", {silu, up}, p + "swiglu");
    } else {
      a = gelu_tanh(linear(x2, layer_name(f_.names.up, i), c_.hidden, c_.intermediate, b, f_.linear_in_out),
                    p + "gelu");
    }
    const std::string d = linear(a, layer_name(f_.names.down, i), c_.intermediate, c_.hidden, b, f_.linear_in_out);
    return op("Add", {h2, d}, p + "mlp_residual");
  }

  // Attention over [batch, sequence, heads x head_dim], causal, with the layer's KV cache.
  std::string attention(const std::string& q, const std::string& k, const std::string& v, int64_t i) {
    const std::string p = "layer" + std::to_string(i) + ".";
    std::vector<std::string> ins = {q, k, v}, outs = {p + "attention"};
    if (kv_) {
      const std::string pk = "past_key." + std::to_string(i), pv = "past_value." + std::to_string(i);
      const core::Shape cache = {core::Dim::sym("batch"), c_.kv_heads, core::Dim::sym("past"), c_.head_dim};
      g_.inputs.push_back({pk, dtype_, cache});
      g_.inputs.push_back({pv, dtype_, cache});
      ins.insert(ins.end(), {"", pk, pv});
      const std::string ok = "present_key." + std::to_string(i), ov = "present_value." + std::to_string(i);
      outs.insert(outs.end(), {ok, ov});
      const core::Shape present = {core::Dim::sym("batch"), c_.kv_heads, core::Dim::sym("total"), c_.head_dim};
      g_.outputs.push_back({ok, dtype_, present});
      g_.outputs.push_back({ov, dtype_, present});
    }
    g_.add_node("Attention", ins, outs,
                {{"is_causal", int64_t{1}}, {"q_num_heads", c_.heads}, {"kv_num_heads", c_.kv_heads}},
                p + "attention");
    return outs[0];
  }

  // RMSNorm (or LayerNorm with its bias) over the last axis.
  std::string norm(const std::string& x, const std::string& name, const std::string& out) {
    const std::string w = weight(name + ".weight", {c_.hidden});
    if (f_.norm == Norm::kLayer) {
      const std::string b = weight(name + ".bias", {c_.hidden});
      return op("LayerNormalization", {x, w, b}, out, {{"axis", int64_t{-1}}, {"epsilon", float(c_.norm_eps)}}, name);
    }
    return op("RMSNormalization", {x, w}, out, {{"axis", int64_t{-1}}, {"epsilon", float(c_.norm_eps)}}, name);
  }

  // Qwen3's RMSNorm of each head of q or k: [b, s, heads x hd] -> [b, s, heads, hd] -> norm -> back.
  std::string head_norm(const std::string& x, const std::string& name, int64_t heads, const std::string& out) {
    const std::string w = weight(name + ".weight", {c_.head_dim});
    const std::string split = op("Reshape", {x, constant(out + ".heads", at::tensor({int64_t{0}, int64_t{0}, heads, c_.head_dim}))},
                                 out + "_heads");
    const std::string n = op("RMSNormalization", {split, w}, out + "_normed",
                             {{"axis", int64_t{-1}}, {"epsilon", float(c_.norm_eps)}}, name);
    return op("Reshape", {n, constant(out + ".flat", at::tensor({int64_t{0}, int64_t{0}, heads * c_.head_dim}))}, out);
  }

  // x @ W (+ b). nn.Linear stores W as [out, in]: the graph holds its transposed view (no copy).
  std::string linear(const std::string& x, const std::string& name, int64_t in, int64_t out, bool bias, bool in_out) {
    const std::string base = name;
    const bool embedding = base == f_.names.embed;  // the tied head reads the embedding [vocab, hidden]
    const std::string wname = base + ".weight";
    at::Tensor w = take(wname, in_out ? std::vector<int64_t>{in, out} : std::vector<int64_t>{out, in});
    const std::string init = embedding ? wname + ".T" : wname;
    g_.initializers[init] = in_out ? w : w.t();
    std::string y = op("MatMul", {x, init}, base, {}, base);
    if (bias) y = op("Add", {y, weight(base + ".bias", {out})}, base + "_bias", {}, base + ".bias_add");
    return y;
  }

  // GPT-2's gelu_new, written as Hugging Face writes it:
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  std::string gelu_tanh(const std::string& x, const std::string& p) {
    // 0-d constants: a Module trains no 0-d tensor (a [1] one it would, and export would drop it).
    auto scalar = [&](const std::string& n, double v) { return constant(p + "." + n, at::scalar_tensor(v, dtype_)); };
    const std::string cube = op("Pow", {x, scalar("three", 3.0)}, p + "_cube");
    const std::string inner = op("Add", {x, op("Mul", {cube, scalar("c", 0.044715)}, p + "_cube_scaled")}, p + "_inner");
    const std::string t = op("Tanh", {op("Mul", {inner, scalar("k", std::sqrt(2.0 / M_PI))}, p + "_arg")}, p + "_tanh");
    const std::string one_plus = op("Add", {t, scalar("one", 1.0)}, p + "_one_plus");
    return op("Mul", {op("Mul", {x, scalar("half", 0.5)}, p + "_half_x"), one_plus}, p);
  }

  std::string op(const std::string& type, std::vector<std::string> ins, const std::string& out,
                 std::map<std::string, core::AttrValue> attrs = {}, const std::string& node = "") {
    g_.add_node(type, std::move(ins), {out}, std::move(attrs), node.empty() ? out : node);
    return out;
  }

  std::string constant(const std::string& name, const at::Tensor& t) {
    if (!g_.initializers.count(name)) g_.initializers[name] = t;
    return name;
  }

  // A checkpoint tensor by name, checked against `shape`, converted to the graph's type.
  at::Tensor take(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = w_.find(name);
    if (it == w_.end() && init_) {
      used_.insert(name);
      auto made = made_.find(name);
      if (made == made_.end()) made = made_.emplace(name, init_(name, shape).to(dtype_)).first;
      return made->second;
    }
    PARE_CHECK(it != w_.end(), what_, ": tensor '", name, "' is missing (", f_.architecture, " with ", c_.layers,
               " layers needs it)");
    PARE_CHECK(it->second.sizes() == at::IntArrayRef(shape), what_, ": tensor '", name, "' has shape ",
               sizes_str(it->second.sizes()), ", the config says ", sizes_str(shape));
    used_.insert(name);
    const at::Tensor& t = it->second;
    return t.scalar_type() == dtype_ ? t : t.to(dtype_);
  }

  std::string weight(const std::string& name, const std::vector<int64_t>& shape) {
    if (!g_.initializers.count(name)) g_.initializers[name] = take(name, shape);
    return name;
  }

  // Buffers some checkpoints carry that are no weights (rotary tables, GPT-2's causal masks).
  static bool is_buffer(const std::string& name) {
    auto ends = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
    return ends(".rotary_emb.inv_freq") || ends(".attn.bias") || ends(".attn.masked_bias");
  }

  void leftovers() const {
    for (const auto& [name, t] : w_) {
      if (used_.count(name) || is_buffer(name)) continue;
      // A tied head may be saved too; it must then equal the embedding.
      if (c_.tie_embeddings && name == std::string(f_.names.lm_head) + ".weight") continue;
      throw InputError(what_ + ": tensor '" + name + "' is not read by pare's " + f_.architecture +
                       " (a different architecture or config?); refusing rather than ignoring it");
    }
  }

  const LmConfig& c_;
  const Family& f_;
  const std::map<std::string, at::Tensor>& w_;
  bool kv_;
  std::string what_;
  at::ScalarType dtype_;
  core::Graph g_;
  std::set<std::string> used_;
  std::function<at::Tensor(const std::string&, const std::vector<int64_t>&)> init_;
  std::map<std::string, at::Tensor> made_;  ///< tensors init_ made, by name (a tied head reuses the embedding)
  std::string positions_, cos_, sin_;
};

}  // namespace

at::ScalarType dtype_of(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return at::kBFloat16;
  if (torch_dtype == "float16") return at::kHalf;
  return at::kFloat;
}

std::pair<std::string, std::string> head_of(const core::Graph& g, const std::string& what) {
  std::string v = "logits";
  int n = g.producer(v);
  while (n >= 0 && (g.nodes[n].op_type == "Identity" || g.nodes[n].op_type == "Cast")) n = g.producer(g.nodes[n].inputs[0]);
  PARE_CHECK(n >= 0 && g.nodes[n].op_type == "MatMul" && g.nodes[n].inputs.size() == 2 &&
                 g.producer(g.nodes[n].inputs[0]) >= 0 && g.is_initializer(g.nodes[n].inputs[1]) &&
                 g.initializers.at(g.nodes[n].inputs[1]).dim() == 2,
             what, ": its logits do not come from a product of the last hidden state and a head [hidden, vocab] (",
             n >= 0 ? g.nodes[n].describe() : std::string("no node makes 'logits'"), ")");
  return {g.nodes[n].inputs[0], g.nodes[n].inputs[1]};
}

std::pair<at::Tensor, at::Tensor> rotary_tables(const LmConfig& c) {
  const int64_t dim = c.head_dim;
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim);
  if (c.rope_factor > 0) {  // llama3
    const double old_len = static_cast<double>(c.rope_original_max);
    const double low_wavelen = old_len / c.rope_low_freq, high_wavelen = old_len / c.rope_high_freq;
    const at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / c.rope_factor, inv_freq);
    const at::Tensor smooth = (old_len / wavelen - c.rope_low_freq) / (c.rope_high_freq - c.rope_low_freq);
    const at::Tensor smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
    const at::Tensor medium = at::logical_not(wavelen < high_wavelen) * at::logical_not(wavelen > low_wavelen);
    inv_freq = at::where(medium, smoothed, scaled);
  }
  const at::Tensor freqs = at::outer(at::arange(c.max_positions, at::kLong).to(at::kFloat), inv_freq);
  return {freqs.cos(), freqs.sin()};
}

core::Graph build_graph(const LmConfig& c, const std::map<std::string, at::Tensor>& weights, const BuildOptions& opts,
                        const std::string& what) {
  PARE_ASSERT(c.family != nullptr);
  return Builder(c, weights, opts, what).build();
}

}  // namespace pare::lm
