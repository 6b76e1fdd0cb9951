// Core ops, transformer family, with ONNX opset 23's meaning: RMSNormalization, RotaryEmbedding
// and Attention (grouped KV heads, causal mask, KV cache). Attention runs through libtorch's
// fused scaled_dot_product_attention (enable_gqa for grouped KV heads; is_causal when there is
// no cache and no mask, an explicit mask shifted by the cache's length otherwise) wherever its
// attributes allow; softcap, the qk_matmul_output output and a softmax_precision other than the
// inputs' type need the scores themselves, which SDPA never shows, and take the spec's formula.
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::has_input;
using ops::wants_output;
using ops::numel;
using ops::spec_float;
using ops::spec_int;
using Tensors = std::vector<at::Tensor>;
using Sizes = std::vector<std::vector<int64_t>>;

// ---- RMSNormalization ----------------------------------------------------------------------

Tensors rms_norm_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x0 = in.at(0);
  const int64_t rank = x0.dim();
  PARE_CHECK(rank >= 1 && x0.is_floating_point(), n.describe(), ": RMSNormalization needs a floating-point X of rank >= 1, got ",
             x0.scalar_type(), " ", x0.sizes());
  const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), rank, n);
  const double eps = n.attr_float("epsilon", 1e-5f);
  const std::vector<int64_t> norm_shape(x0.sizes().begin() + axis, x0.sizes().end());
  const at::Tensor& scale0 = in.at(1);
  PARE_CHECK(scale0.dim() <= rank - axis, n.describe(), ": scale ", scale0.sizes(),
             " must broadcast to the normalized shape ", at::IntArrayRef(norm_shape));
  for (int64_t i = 1; i <= scale0.dim(); ++i)
    PARE_CHECK(scale0.size(-i) == 1 || scale0.size(-i) == norm_shape[norm_shape.size() - i], n.describe(), ": scale ",
               scale0.sizes(), " must broadcast to the normalized shape ", at::IntArrayRef(norm_shape));
  // stash_type 1 (float): the statistics of low-precision inputs are computed in float32.
  const bool upcast = n.attr_int("stash_type", 1) == 1 && (x0.scalar_type() == at::kHalf || x0.scalar_type() == at::kBFloat16);
  const at::Tensor x = upcast ? x0.to(at::kFloat) : x0;
  const at::Tensor scale = upcast ? scale0.to(at::kFloat) : scale0;
  at::Tensor y;
  if (scale.sizes().vec() == norm_shape && scale.scalar_type() == x.scalar_type()) {
    y = at::rms_norm(x, norm_shape, scale, eps);  // libtorch's fused kernel where it has one
  } else {
    std::vector<int64_t> dims;
    for (int64_t d = axis; d < rank; ++d) dims.push_back(d);
    y = x * at::rsqrt((x * x).mean(dims, true) + eps) * scale;
  }
  return {y.to(x0.scalar_type())};
}

// The scale runs along X's trailing dims (unidirectional broadcasting): its last axis is X's last.
WeightAxes rms_scale_axes(const Node&, int64_t rank) { return WeightAxes{rank >= 1 ? rank - 1 : -1, -1}; }

OpDef rms_normalization_op() {
  OpDef d = ops::op_def("RMSNormalization", 2, 2,
                        "x / sqrt(mean(x^2 over dims [axis, rank)) + epsilon) * scale (opset 23)");
  d.since_opset = 23;
  d.attrs = {spec_int("axis"), spec_float("epsilon"), spec_int("stash_type")};
  d.forward = rms_norm_forward;
  d.flops = ops::flops_per_input(4);  // square, mean, normalise, scale
  d.weights = {WeightInput{1, WeightRole::kScale, rms_scale_axes}};
  return d;
}

// ---- RotaryEmbedding -----------------------------------------------------------------------

// cos or sin for every (batch, position) of X: [B or 1, S, rot/2], gathered by position_ids when
// given (a batch of 1 broadcasts, as in the spec's reference).
at::Tensor rotary_table(const Node& n, const at::Tensor& cache, const at::Tensor& pos, int64_t b, int64_t s, int64_t half) {
  PARE_CHECK(cache.dim() >= 1 && cache.size(-1) == half, n.describe(), ": the cos and sin caches' last dim (",
             cache.sizes(), ") must be rotary_embedding_dim / 2 (", half, ")");
  if (!pos.defined()) {
    PARE_CHECK(cache.dim() == 3 && (cache.size(0) == b || cache.size(0) == 1) && cache.size(1) == s, n.describe(),
               ": without position_ids the cos and sin caches must be [batch ", b, " (or 1), sequence ", s, ", ", half,
               "], got ", cache.sizes());
    return cache;
  }
  PARE_CHECK(cache.dim() == 2, n.describe(), ": with position_ids the cos and sin caches must be [positions, ", half,
             "], got ", cache.sizes());
  return cache.index_select(0, pos.reshape({-1})).reshape({pos.size(0), s, half});
}

Tensors rotary_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x0 = in.at(0);
  const int64_t heads_attr = n.attr_int("num_heads", 0);
  PARE_CHECK(x0.dim() == 4 || (x0.dim() == 3 && heads_attr > 0 && x0.size(2) % heads_attr == 0), n.describe(),
             ": RotaryEmbedding needs X [batch, heads, sequence, head_size], or [batch, sequence, hidden] with "
             "num_heads dividing hidden; got ", x0.sizes(), " and num_heads ", heads_attr);
  // As [batch, sequence, heads, head_size].
  const at::Tensor x = x0.dim() == 4 ? x0.transpose(1, 2)
                                     : x0.reshape({x0.size(0), x0.size(1), heads_attr, x0.size(2) / heads_attr});
  const int64_t b = x.size(0), s = x.size(1), head = x.size(3);
  const int64_t rot = n.attr_int("rotary_embedding_dim", 0) == 0 ? head : n.attr_int("rotary_embedding_dim", 0);
  PARE_CHECK(rot > 0 && rot <= head && rot % 2 == 0, n.describe(), ": rotary_embedding_dim (", rot,
             ") must be even and at most the head size (", head, ")");
  at::Tensor pos;
  if (has_input(in, 3)) {
    pos = in[3].to(at::kLong);
    PARE_CHECK(pos.dim() == 2 && (pos.size(0) == b || pos.size(0) == 1) && pos.size(1) == s, n.describe(),
               ": position_ids must be [batch ", b, " (or 1), sequence ", s, "], got ", pos.sizes());
    const int64_t lo = pos.numel() ? pos.min().item<int64_t>() : 0, hi = pos.numel() ? pos.max().item<int64_t>() : 0;
    PARE_CHECK(lo >= 0 && hi < in.at(1).size(0), n.describe(), ": position_ids must be in [0, ", in.at(1).size(0),
               ") (the caches' rows), got ", lo, " to ", hi);
  }
  const at::Tensor cos = rotary_table(n, in.at(1), pos, b, s, rot / 2).unsqueeze(2).to(x.scalar_type());
  const at::Tensor sin = rotary_table(n, in.at(2), pos, b, s, rot / 2).unsqueeze(2).to(x.scalar_type());
  const at::Tensor xr = x.narrow(-1, 0, rot);
  const bool interleaved = n.attr_int("interleaved", 0) != 0;
  // Interleaved pairs are (x[2i], x[2i+1]); otherwise (x[i], x[i + rot/2]).
  const at::Tensor x1 = interleaved ? xr.slice(-1, 0, rot, 2) : xr.narrow(-1, 0, rot / 2);
  const at::Tensor x2 = interleaved ? xr.slice(-1, 1, rot, 2) : xr.narrow(-1, rot / 2, rot / 2);
  const at::Tensor real = cos * x1 - sin * x2, imag = sin * x1 + cos * x2;
  at::Tensor y = interleaved ? at::stack({real, imag}, -1).flatten(-2) : at::cat({real, imag}, -1);
  if (rot < head) y = at::cat({y, x.narrow(-1, rot, head - rot)}, -1);
  return {x0.dim() == 4 ? y.transpose(1, 2) : y.reshape(x0.sizes())};
}

OpDef rotary_embedding_op() {
  OpDef d = ops::op_def("RotaryEmbedding", 3, 4,
                        "rotates pairs of each head's first rotary_embedding_dim features by the angles of "
                        "cos_cache/sin_cache at position_ids, halves or interleaved (opset 23)");
  d.since_opset = 23;
  d.attrs = {spec_int("interleaved"), spec_int("num_heads"), spec_int("rotary_embedding_dim")};
  d.forward = rotary_forward;
  d.flops = ops::flops_per_output(3);
  // Channel pruning does not follow heads through it yet, so it stops there; tensor parallelism
  // splits it by heads with a rule of its own (dist/shard_facets.cpp).
  d.traits.opaque_channels = true;
  return d;
}

// ---- Attention -----------------------------------------------------------------------------

/// The node's Q, K, V as [batch, heads, sequence, head_size] and what the attributes say.
struct AttentionShape {
  at::Tensor q, k, v;  ///< K and V already concatenated after past_key / past_value
  int64_t q_heads = 0, kv_heads = 0, past = 0;
  bool three_d = false;
};

// [batch, sequence, heads * size] -> [batch, heads, sequence, size].
at::Tensor split_heads(const at::Tensor& t, int64_t heads) {
  return t.reshape({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
}

AttentionShape attention_shape(const Node& n, const Tensors& in) {
  const at::Tensor &q = in.at(0), &k = in.at(1), &v = in.at(2);
  AttentionShape a;
  a.three_d = q.dim() == 3;
  PARE_CHECK((q.dim() == 3 || q.dim() == 4) && k.dim() == q.dim() && v.dim() == q.dim(), n.describe(),
             ": Attention needs Q, K and V all 4-D [batch, heads, sequence, head_size] or all 3-D [batch, sequence, "
             "hidden]; got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  PARE_CHECK(q.is_floating_point() && k.scalar_type() == q.scalar_type(), n.describe(),
             ": Q and K must be of one floating-point type, got ", q.scalar_type(), " and ", k.scalar_type());
  if (a.three_d) {
    a.q_heads = n.attr_int("q_num_heads", 0);
    a.kv_heads = n.attr_int("kv_num_heads", 0);
    PARE_CHECK(a.q_heads > 0 && a.kv_heads > 0 && q.size(2) % a.q_heads == 0 && k.size(2) % a.kv_heads == 0 &&
                   v.size(2) % a.kv_heads == 0,
               n.describe(), ": 3-D Q, K, V need q_num_heads and kv_num_heads dividing their hidden sizes (", q.size(2),
               ", ", k.size(2), ", ", v.size(2), "); got ", a.q_heads, " and ", a.kv_heads);
    a.q = split_heads(q, a.q_heads);
    a.k = split_heads(k, a.kv_heads);
    a.v = split_heads(v, a.kv_heads);
  } else {
    a.q = q, a.k = k, a.v = v;
    a.q_heads = q.size(1), a.kv_heads = k.size(1);
  }
  PARE_CHECK(a.k.size(0) == a.q.size(0) && a.v.size(0) == a.q.size(0) && a.v.size(1) == a.kv_heads &&
                 a.v.size(2) == a.k.size(2) && a.k.size(3) == a.q.size(3),
             n.describe(), ": K and V must share batch, heads and sequence with each other (and batch and head size "
             "with Q): Q ", a.q.sizes(), ", K ", a.k.sizes(), ", V ", a.v.sizes(), " as [batch, heads, sequence, size]");
  PARE_CHECK(a.q_heads % a.kv_heads == 0, n.describe(), ": the query heads (", a.q_heads,
             ") must be a multiple of the key/value heads (", a.kv_heads, ")");
  PARE_CHECK(has_input(in, 4) == has_input(in, 5), n.describe(), ": past_key and past_value come together");
  if (has_input(in, 4)) {
    const at::Tensor &pk = in[4], &pv = in[5];
    PARE_CHECK(pk.dim() == 4 && pv.dim() == 4 && pk.size(0) == a.k.size(0) && pk.size(1) == a.kv_heads &&
                   pk.size(3) == a.k.size(3) && pv.sizes().slice(0, 3) == pk.sizes().slice(0, 3) &&
                   pv.size(3) == a.v.size(3),
               n.describe(), ": past_key and past_value must be [batch, kv heads, past, size] matching K and V; got ",
               pk.sizes(), " and ", pv.sizes());
    a.past = pk.size(2);
    a.k = at::cat({pk.to(a.k.scalar_type()), a.k}, 2);
    a.v = at::cat({pv.to(a.v.scalar_type()), a.v}, 2);
  }
  return a;
}

// The mask as SDPA takes it (bool: true takes part; float: added to the scores), the causal part
// included, padded to the total sequence; undefined when nothing is masked.
at::Tensor attention_mask(const Node& n, const Tensors& in, const AttentionShape& a) {
  const int64_t lq = a.q.size(2), total = a.k.size(2);
  at::Tensor mask;
  if (has_input(in, 3)) {
    mask = in[3];
    PARE_CHECK(mask.dim() >= 1 && mask.dim() <= 4 && mask.size(-1) <= total &&
                   (mask.scalar_type() == at::kBool || mask.is_floating_point()),
               n.describe(), ": attn_mask must be bool or float, rank 1 to 4, with at most ", total,
               " (past + new) keys in its last dim; got ", mask.scalar_type(), " ", mask.sizes());
    if (mask.size(-1) < total)  // the keys beyond the mask take no part
      mask = mask.scalar_type() == at::kBool
                 ? at::constant_pad_nd(mask.to(at::kFloat), {0, total - mask.size(-1)}, 0).to(at::kBool)
                 : at::constant_pad_nd(mask, {0, total - mask.size(-1)}, -std::numeric_limits<double>::infinity());
    if (mask.is_floating_point()) mask = mask.to(a.q.scalar_type());
  }
  // Query i sees the keys up to past + i: the upper-left causal mask, shifted by the cache. One
  // new token sees them all.
  if (n.attr_int("is_causal", 0) == 0 || (lq == 1 && total == a.past + 1)) return mask;
  const auto opts = a.q.options().dtype(at::kLong);
  const at::Tensor causal = at::arange(total, opts).unsqueeze(0).le(at::arange(lq, opts).unsqueeze(1) + a.past);
  if (!mask.defined()) return causal;
  if (mask.scalar_type() == at::kBool) return mask.logical_and(causal);
  return mask.masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
}

// The type the softmax runs in: softmax_precision (an ONNX element type) or the scores' own.
at::ScalarType softmax_type(const Node& n, at::ScalarType scores) {
  const int64_t p = n.attr_int("softmax_precision", 0);
  if (p == 0) return scores;
  const auto t = scalar_type_from_onnx(static_cast<int>(p));
  PARE_CHECK(t && at::isFloatingType(*t), n.describe(), ": softmax_precision must be a floating-point ONNX type, got ", p);
  return *t;
}

// The spec's formula step by step, for what SDPA cannot show or do: the scores (qk_matmul_output
// and its modes), softcap, a softmax in another precision.
std::pair<at::Tensor, at::Tensor> attention_explicit(const Node& n, const AttentionShape& a, const at::Tensor& mask,
                                                     double scale) {
  at::Tensor k = a.k, v = a.v;
  if (a.q_heads != a.kv_heads) {  // query head h reads key/value head h / group
    k = k.repeat_interleave(a.q_heads / a.kv_heads, 1);
    v = v.repeat_interleave(a.q_heads / a.kv_heads, 1);
  }
  const double root = std::sqrt(scale);
  at::Tensor scores = at::matmul(a.q * root, (k * root).transpose(-1, -2));
  const int64_t mode = n.attr_int("qk_matmul_output_mode", 0);
  PARE_CHECK(mode >= 0 && mode <= 3, n.describe(), ": qk_matmul_output_mode must be 0 to 3, got ", mode);
  at::Tensor qk = scores;
  if (mask.defined())
    scores = mask.scalar_type() == at::kBool
                 ? scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity())
                 : scores + mask;
  if (mode == 1) qk = scores;
  const double softcap = n.attr_float("softcap", 0.0f);
  if (softcap > 0) scores = at::tanh(scores / softcap) * softcap;
  if (mode == 2) qk = scores;
  const at::ScalarType precision = softmax_type(n, scores.scalar_type());
  at::Tensor probs = at::softmax(scores.to(precision), -1).to(scores.scalar_type());
  if (mode == 3) qk = probs;
  return {at::matmul(probs, v.to(probs.scalar_type())), qk};
}

Tensors attention_forward(const Node& n, const Tensors& in, const RunContext&) {
  const AttentionShape a = attention_shape(n, in);
  const double scale = n.has_attr("scale") ? n.attr_float("scale", 1.0f) : 1.0 / std::sqrt(double(a.q.size(3)));
  const bool explicit_scores = wants_output(n, 3) || n.attr_float("softcap", 0.0f) > 0 ||
                               softmax_type(n, a.q.scalar_type()) != a.q.scalar_type();
  // Without a cache or a mask, ONNX's causal mask is SDPA's own (upper left): its fused kernels
  // then skip the masked blocks instead of reading a mask.
  const bool sdpa_causal =
      !explicit_scores && n.attr_int("is_causal", 0) != 0 && a.past == 0 && !has_input(in, 3);
  at::Tensor y, qk;
  if (explicit_scores) {
    std::tie(y, qk) = attention_explicit(n, a, attention_mask(n, in, a), scale);
  } else {
    c10::optional<at::Tensor> m;
    if (!sdpa_causal)
      if (at::Tensor mask = attention_mask(n, in, a); mask.defined()) m = mask;
    y = at::scaled_dot_product_attention(a.q, a.k, a.v.to(a.q.scalar_type()), m, 0.0, sdpa_causal, scale,
                                         a.q_heads != a.kv_heads);
  }
  if (a.three_d) y = y.transpose(1, 2).reshape({y.size(0), y.size(2), -1});
  Tensors out = {y, a.k, a.v, qk};
  out.resize(std::max<size_t>(1, n.outputs.size()));
  return out;
}

// A multiply-add per (query, key, feature) in Q K^T and again in the weighted sum of V (head
// sizes of K and V taken as equal).
int64_t attention_flops(const Node&, const Sizes& in, const Sizes& out) {
  if (in.size() < 2 || out.empty() || in[1].size() < 3) return 0;
  int64_t total = in[1].size() == 4 ? in[1][2] : in[1][1];
  if (in.size() > 4 && in[4].size() == 4) total += in[4][2];
  return 4 * numel(out[0]) * total;
}

OpDef attention_op() {
  OpDef d = ops::op_def("Attention", 3, 6,
                        "softmax(Q K^T * scale + mask) V with grouped KV heads, is_causal, softcap and a KV cache "
                        "(past_key/past_value in, present_key/present_value out; opset 23)");
  d.since_opset = 23;
  d.outputs_max = 4;
  d.attrs = {spec_int("is_causal"), spec_int("kv_num_heads"), spec_int("q_num_heads"), spec_int("qk_matmul_output_mode"),
             spec_float("scale"), spec_float("softcap"), spec_int("softmax_precision")};
  d.forward = attention_forward;
  d.flops = attention_flops;
  d.traits.opaque_channels = true;  // as RotaryEmbedding: pruning stops here, dist splits it by heads
  return d;
}

}  // namespace

void register_transformer_ops(OpRegistry& reg) {
  reg.add(rms_normalization_op());
  reg.add(rotary_embedding_op());
  reg.add(attention_op());
}

}  // namespace pare::core
