// Attaches dist's sharding rules to the core ops: the "dist.shard" facet, which emits the shard
// of one node for the tensor-parallel pass (see dist/tensor_parallel.h). The weight axes a rule
// slices along come from the op's weight declaration in core.
#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "dist/shard_internal.h"
#include "dist/tensor_parallel.h"

namespace pare::dist::detail {
namespace {

using core::Node;
using Pass = TensorParallelPass;
using ShardFn = std::function<void(const Node&, Pass&)>;
// A rule for a node whose input 0 is split along `in`.
using SplitFn = std::function<void(const Node&, Pass&, const TpLayout& in)>;

int64_t tp_axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// Why a node whose input is whole runs whole: an embedding table stays whole.
std::string whole_input_reason(const Node& n) {
  const auto& weights = core::OpRegistry::global().get(n.op_type).weights;
  const bool table = std::any_of(weights.begin(), weights.end(),
                                 [](const core::WeightInput& w) { return w.role == core::WeightRole::kTable; });
  return table ? "embeddings stay whole" : "its input is whole";
}

void tp_mixes(const Node& n, Pass& p) { p.replicate(n, "it mixes the split axis"); }

// Runs `rule` when input 0 is split; otherwise the node runs whole.
ShardFn when_split(SplitFn rule) {
  return [rule](const Node& n, Pass& p) {
    const TpLayout in = p.input_layout(n);
    if (in.kind != TpLayout::kSplit) return p.replicate(n, whole_input_reason(n));
    rule(n, p, in);
  };
}

// The rule of ops that say nothing of their own (opaque ops included): run whole.
const ShardFn tp_default = when_split([](const Node& n, Pass& p, const TpLayout&) { tp_mixes(n, p); });

// Conv: by output channels when the input is whole, by input channels (partial sums) when the
// input is split by channels; depthwise convolutions follow their input's split.
void tp_conv(const Node& n, Pass& p) {
  const std::string& x = n.inputs[0];
  const at::Tensor& w = p.init(n, 1);
  const core::WeightAxes wa = core::weight_axes(n, 1, w.dim());
  const int64_t bias_axis = core::weight_axes(n, 2, 1).out;
  const int64_t group = n.attr_int("group", 1), out_ch = w.size(wa.out);
  const bool bias = n.has_input(2);
  if (bias && !p.is_init(n, 2)) return p.replicate(n, "its bias is computed");
  if (group == 1 && p.is_split(x, 1)) {
    std::vector<std::string> ins = {p.local(x), p.split_init(n, 1, wa.in)};
    if (bias && p.rank() == 0) ins.push_back(n.inputs[2]);
    return p.emit_as(n, ins, TpLayout{TpLayout::kPartial});
  }
  if (group > 1 && p.is_split(x, 1) && group == p.layout(x).full && out_ch == group) {
    std::vector<std::string> ins = {p.local(x), p.split_init(n, 1, wa.out)};
    if (bias) ins.push_back(p.split_init(n, 2, bias_axis));
    return p.emit_as(n, ins, p.split_layout(1, out_ch), {{"group", p.block(group)}});
  }
  if (group == 1 && out_ch % p.ranks() == 0) {
    std::vector<std::string> ins = {p.whole(x), p.split_init(n, 1, wa.out)};
    if (bias) ins.push_back(p.split_init(n, 2, bias_axis));
    return p.emit_as(n, ins, p.split_layout(1, out_ch));
  }
  p.replicate(n, group == 1 ? "its output channels do not split evenly" : "grouped convolution");
}

// Gemm: A [M, K] times B; row split when A is split along K, else column split.
void tp_gemm(const Node& n, Pass& p) {
  const std::string& a = n.inputs[0];
  if (n.attr_int("transA", 0) != 0) return p.replicate(n, "transA");
  const at::Tensor& b = p.init(n, 1);
  const core::WeightAxes wb = core::weight_axes(n, 1, b.dim());
  const int64_t cols = b.size(wb.out);
  if (p.is_split(a, 1)) {
    std::vector<std::string> ins = {p.local(a), p.split_init(n, 1, wb.in)};
    if (n.has_input(2) && p.rank() == 0) ins.push_back(p.whole(n.inputs[2]));  // added once, by rank 0
    return p.emit_as(n, ins, TpLayout{TpLayout::kPartial});
  }
  if (cols % p.ranks() == 0 && (!n.has_input(2) || p.is_init(n, 2))) {
    std::vector<std::string> ins = {p.whole(a), p.split_init(n, 1, wb.out)};
    if (n.has_input(2)) {
      const at::Tensor& c = p.init(n, 2);
      const int64_t c_n = core::weight_axes(n, 2, c.dim()).out;
      ins.push_back(c_n >= 0 && c.size(c_n) == cols ? p.split(n.inputs[2], c_n, cols) : n.inputs[2]);
    }
    return p.emit_as(n, ins, p.split_layout(1, cols));
  }
  p.replicate(n, "its output columns do not split evenly");
}

// MatMul with a 2-D weight: row or column split as Gemm. Between two activations split along
// the same batch axis (attention heads): each rank multiplies its own heads.
void tp_matmul(const Node& n, Pass& p) {
  const std::string &a = n.inputs[0], &b = n.inputs[1];
  const int64_t rank_a = static_cast<int64_t>(p.full_shape(a).size());
  const int64_t rank_out = static_cast<int64_t>(p.full_shape(n.outputs[0]).size());
  const core::WeightAxes wb = p.is_init(n, 1) ? core::weight_axes(n, 1, p.init(n, 1).dim()) : core::WeightAxes{};
  if (wb.out >= 0 && !p.graph().is_initializer(a)) {
    const int64_t cols = p.init(n, 1).size(wb.out);
    if (p.is_split(a, rank_a - 1))
      return p.emit_as(n, {p.local(a), p.split_init(n, 1, wb.in)}, TpLayout{TpLayout::kPartial});
    if (cols % p.ranks() == 0)
      return p.emit_as(n, {p.whole(a), p.split_init(n, 1, wb.out)}, p.split_layout(rank_out - 1, cols));
    return p.replicate(n, "its output columns do not split evenly");
  }
  const TpLayout la = p.layout(a), lb = p.layout(b);
  if (la.kind == TpLayout::kSplit && lb.kind == TpLayout::kSplit && la.axis == lb.axis && la.full == lb.full &&
      rank_a == static_cast<int64_t>(p.full_shape(b).size()) && la.axis < rank_a - 2)
    return p.emit_as(n, {p.local(a), p.local(b)}, la);
  p.replicate(n, "its operands are not split alike");
}

// Elementwise with broadcasting: keeps a split when every operand is split the same way or
// broadcasts along the split axis; a whole operand of full size there is sliced.
void tp_broadcast(const Node& n, Pass& p) {
  const int64_t rank_out = static_cast<int64_t>(p.full_shape(n.outputs[0]).size());
  TpLayout out;
  for (auto& i : n.inputs) {
    if (i.empty()) continue;
    TpLayout l = p.layout(i);
    if (l.kind == TpLayout::kPartial) return p.replicate(n, "a partial sum meets an elementwise op");
    if (l.kind == TpLayout::kSplit && out.kind == TpLayout::kWhole)
      out = p.split_layout(l.axis + rank_out - static_cast<int64_t>(p.full_shape(i).size()), l.full);
  }
  if (out.kind == TpLayout::kWhole) return p.replicate(n, "its inputs are whole");
  // Decide every input before emitting anything, so that giving up leaves no dead Slice behind.
  std::vector<int64_t> slice_axis(n.inputs.size(), -1);  // -1: as it is (split, or broadcast)
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const std::string& i = n.inputs[k];
    if (i.empty()) continue;
    const auto& s = p.full_shape(i);
    const int64_t axis = out.axis - (rank_out - static_cast<int64_t>(s.size()));
    const TpLayout l = p.layout(i);
    if (l.kind == TpLayout::kSplit) {
      if (l.axis != axis || l.full != out.full) return p.replicate(n, "its inputs are split differently");
    } else if (axis >= 0 && s[axis] != 1) {
      if (s[axis] != out.full) return p.replicate(n, "an input does not broadcast along the split axis");
      slice_axis[k] = axis;
    }
  }
  std::vector<std::string> ins;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const std::string& i = n.inputs[k];
    ins.push_back(i.empty() ? i : slice_axis[k] >= 0 ? p.split(i, slice_axis[k], out.full)
                                : p.layout(i).kind == TpLayout::kSplit ? p.local(i) : p.whole(i));
  }
  p.emit_as(n, ins, out);
}

// Reshape with a constant shape: the split stays when this rank's block is contiguous in one
// output axis (splitting [N,S,D] into [N,S,H,D/H] heads, merging them back).
void tp_reshape(const Node& n, Pass& p, const TpLayout& in) {
  if (!p.is_init(n, 1)) return tp_mixes(n, p);
  const auto& si = p.full_shape(n.inputs[0]);
  const auto& so = p.full_shape(n.outputs[0]);
  const int64_t outer = prod(si, 0, in.axis), inner = prod(si, in.axis + 1, si.size());
  const int64_t len = p.block(in.full) * inner;  // elements of one rank's block per outer index
  std::vector<int64_t> target = core::to_int_vector(p.init(n, 1));
  for (size_t b = 0; b < so.size(); ++b) {
    if (prod(so, 0, b) != outer) continue;
    const int64_t inner_out = prod(so, b + 1, so.size());
    if (so[b] % p.ranks() != 0 || len % inner_out != 0 || len / inner_out != p.block(so[b])) continue;
    if (target.size() != so.size()) break;
    bool copies_split = false;  // a 0 entry copies the input's (now local) dim
    for (size_t j = 0; j < target.size(); ++j)
      copies_split |= target[j] == 0 && static_cast<int64_t>(j) == in.axis && j != b;
    if (copies_split) break;
    target[b] = p.block(so[b]);
    const std::string shape =
        p.add_initializer(n.inputs[1] + "/rank" + std::to_string(p.rank()), at::tensor(target, at::kLong));
    return p.emit_as(n, {p.local(n.inputs[0]), shape}, p.split_layout(static_cast<int64_t>(b), so[b]));
  }
  p.replicate(n, "the split does not stay contiguous");
}

// BatchNormalization on a split channel axis: each rank normalizes its channels.
void tp_batch_norm(const Node& n, Pass& p, const TpLayout& in) {
  if (!(in.axis == 1 && n.outputs.size() == 1 && p.is_init(n, 1) && p.is_init(n, 2) && p.is_init(n, 3) &&
        p.is_init(n, 4)))
    return tp_mixes(n, p);
  std::vector<std::string> ins = {p.local(n.inputs[0])};
  for (int i = 1; i < 5; ++i) ins.push_back(p.split_init(n, static_cast<size_t>(i), core::weight_axes(n, i, 1).out));
  p.emit_as(n, ins, in);
}

void tp_transpose(const Node& n, Pass& p, const TpLayout& in) {
  const int64_t rank = static_cast<int64_t>(p.full_shape(n.inputs[0]).size());
  auto perm = n.attr_ints("perm");
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  auto b = std::find(perm.begin(), perm.end(), in.axis) - perm.begin();
  p.keep_split(n, p.split_layout(b, in.full));
}

// Softmax, LogSoftmax (along `axis`), LayerNormalization and RMSNormalization (over [axis, rank)) keep a split
// they do not normalise over.
void tp_softmax(const Node& n, Pass& p, const TpLayout& in) {
  const int64_t axis = tp_axis(n.attr_int("axis", -1), static_cast<int64_t>(p.full_shape(n.inputs[0]).size()));
  if (axis != in.axis) return p.keep_split(n, in);
  p.replicate(n, "the split axis is normalised");
}
void tp_layer_norm(const Node& n, Pass& p, const TpLayout& in) {
  const int64_t axis = tp_axis(n.attr_int("axis", -1), static_cast<int64_t>(p.full_shape(n.inputs[0]).size()));
  if (in.axis < axis) return p.keep_split(n, in);
  p.replicate(n, "the split axis is normalised");
}

void tp_flatten(const Node& n, Pass& p, const TpLayout& in) {
  const auto& s = p.full_shape(n.inputs[0]);
  const int64_t axis = tp_axis(n.attr_int("axis", 1), static_cast<int64_t>(s.size()));
  if (axis != in.axis) return p.replicate(n, "it flattens the split axis into another");
  p.keep_split(n, p.split_layout(1, in.full * prod(s, in.axis + 1, s.size())));
}

// Reduce* over `axes` (attribute): the split stays when it is not reduced.
void tp_reduce(const Node& n, Pass& p, const TpLayout& in) {
  if (n.inputs.size() != 1) return tp_mixes(n, p);
  const int64_t rank = static_cast<int64_t>(p.full_shape(n.inputs[0]).size());
  auto axes = n.attr_ints("axes");
  for (auto& a : axes) a = tp_axis(a, rank);
  if (axes.empty() || std::find(axes.begin(), axes.end(), in.axis) != axes.end())
    return p.replicate(n, "the split axis is reduced");
  int64_t out_axis = in.axis;
  if (n.attr_int("keepdims", 1) == 0)
    out_axis -= std::count_if(axes.begin(), axes.end(), [&](int64_t a) { return a < in.axis; });
  p.keep_split(n, p.split_layout(out_axis, in.full));
}

// Pooling keeps N and C: a split along C stays.
void tp_pool(const Node& n, Pass& p, const TpLayout& in) {
  if (in.axis == 1 && n.outputs.size() == 1) return p.keep_split(n, in);
  tp_mixes(n, p);
}

void tp_unary(const Node& n, Pass& p, const TpLayout& in) {
  if (n.outputs.size() == 1) return p.keep_split(n, in);
  tp_mixes(n, p);
}

// RotaryEmbedding rotates within each head: a split by whole heads stays ([B, H, S, D] along H;
// [B, S, H*D] along the hidden axis, each rank rotating num_heads / ranks heads).
void tp_rotary(const Node& n, Pass& p, const TpLayout& in) {
  const int64_t rank = static_cast<int64_t>(p.full_shape(n.inputs[0]).size());
  const int64_t heads = n.attr_int("num_heads", 0);
  if (rank == 4 && in.axis == 1 && n.outputs.size() == 1) return p.keep_split(n, in);
  if (rank == 3 && in.axis == 2 && heads > 0 && heads % p.ranks() == 0 && n.outputs.size() == 1)
    return p.keep_split(n, in, {{"num_heads", p.block(heads)}});
  p.replicate(n, "its split is not by whole heads");
}

// This rank's block of Attention input `i` along the head axis `axis` (a whole value is sliced);
// "" when the value is laid out otherwise.
std::string head_block(const Node& n, Pass& p, size_t i, int64_t axis) {
  const std::string& v = n.inputs[i];
  const TpLayout l = p.layout(v);
  if (l.kind == TpLayout::kSplit && l.axis == axis) return p.local(v);
  if (l.kind == TpLayout::kWhole) return p.split(v, axis, p.full_shape(v)[axis]);
  return "";
}

// Attention by heads (Megatron): each rank attends with its block of query heads and the KV heads
// of their groups (contiguous blocks keep query head h with KV head h / group), so the output
// stays split by heads for the row-parallel out-projection. Only Y: a split KV cache would need
// layouts for the other outputs; a mask that differs per head runs it whole too.
void tp_attention(const Node& n, Pass& p) {
  const int64_t rank = static_cast<int64_t>(p.full_shape(n.inputs[0]).size());
  const bool three_d = rank == 3;
  const int64_t axis = three_d ? 2 : 1;
  const int64_t q_heads = three_d ? n.attr_int("q_num_heads", 0) : p.full_shape(n.inputs[0])[1];
  const int64_t kv_heads = three_d ? n.attr_int("kv_num_heads", 0) : p.full_shape(n.inputs[1])[1];
  bool only_y = true;
  for (size_t o = 1; o < n.outputs.size(); ++o) only_y &= n.outputs[o].empty();
  for (size_t i = 4; i < n.inputs.size(); ++i) only_y &= n.inputs[i].empty();
  if (!only_y || q_heads % p.ranks() != 0 || kv_heads % p.ranks() != 0 || kv_heads == 0)
    return p.replicate(n, "it has a KV cache or heads that do not split evenly");
  if (n.has_input(3)) {
    const auto& m = p.full_shape(n.inputs[3]);
    if ((m.size() >= 3 && m[m.size() - 3] != 1) || p.layout(n.inputs[3]).kind != TpLayout::kWhole)
      return p.replicate(n, "its mask differs per head");
  }
  if (p.layout(n.inputs[0]).kind != TpLayout::kSplit && p.layout(n.inputs[1]).kind != TpLayout::kSplit)
    return p.replicate(n, "its inputs are whole");
  std::vector<std::string> ins;
  for (size_t i = 0; i < 3; ++i) ins.push_back(head_block(n, p, i, axis));
  if (std::any_of(ins.begin(), ins.end(), [](const std::string& s) { return s.empty(); }))
    return p.replicate(n, "its inputs are not split by heads");
  if (n.has_input(3)) ins.push_back(n.inputs[3]);
  std::map<std::string, core::AttrValue> attrs;
  if (three_d) attrs = {{"q_num_heads", p.block(q_heads)}, {"kv_num_heads", p.block(kv_heads)}};
  p.emit_as(n, ins, p.split_layout(axis, p.full_shape(n.outputs[0])[axis]), attrs);
}

// Gather of the graph's input ids from an embedding table [rows, D], split by rows (Megatron's
// vocabulary-parallel embedding): each rank looks the ids up in its block, zeros the others' rows,
// and the ranks' partial sums add up to the lookup. A tied LM head then reads the same block
// (split() names one slice once), so no rank holds the whole table. Tables indexed by computed
// values (positions) stay whole: small, and an all-reduce each.
void tp_gather(const Node& n, Pass& p) {
  const bool table = p.is_init(n, 0) && n.attr_int("axis", 0) == 0 && p.init(n, 0).dim() == 2 &&
                     p.init(n, 0).is_floating_point() && p.init(n, 0).size(0) % p.ranks() == 0 &&
                     n.has_input(1) && p.graph().find_input(n.inputs[1]) != nullptr;
  if (!table) return tp_default(n, p);
  const at::Tensor& t = p.init(n, 0);
  const int64_t len = p.block(t.size(0));
  const std::string base = n.outputs[0] + "/vocab";
  auto constant = [&](const char* what, const at::Tensor& v) { return p.add_initializer(base + "/" + what, v); };
  const std::string ids = p.add_node("Cast", base + "/ids", {p.whole(n.inputs[1])}, {{"to", int64_t{7}}});  // int64
  const std::string zero = constant("zero", at::zeros({}, at::kLong));
  const std::string local = p.add_node("Sub", base + "/local", {ids, constant("begin", at::tensor(p.rank() * len))});
  const std::string here = p.add_node(
      "And", base + "/here",
      {p.add_node("GreaterOrEqual", base + "/from", {local, zero}),
       p.add_node("Less", base + "/below", {local, constant("len", at::tensor(len))})});
  const std::string safe = p.add_node("Where", base + "/safe", {here, local, zero});
  const std::string rows = p.add_node("Gather", base + "/rows", {p.split_init(n, 0, 0), safe});
  const std::string mask = p.add_node("Unsqueeze", base + "/mask", {here, constant("axes", at::tensor({int64_t{-1}}))});
  Node masked{"Where", n.name, {}, n.outputs, {}, ""};
  p.emit_as(masked, {mask, rows, constant("none", at::zeros({}, t.options()))}, TpLayout{TpLayout::kPartial});
}

// Conv and Gemm follow their weight when it is a constant; otherwise they run whole.
ShardFn with_constant_weight(void (*rule)(const Node&, Pass&)) {
  return [rule](const Node& n, Pass& p) { p.is_init(n, 1) ? rule(n, p) : tp_default(n, p); };
}

}  // namespace

void attach_shard_facets(core::OpDef& op) {
  static const std::map<std::string, ShardFn> by_name = {
      {"Conv", with_constant_weight(tp_conv)}, {"Gemm", with_constant_weight(tp_gemm)}, {"MatMul", tp_matmul},
      {"BatchNormalization", when_split(tp_batch_norm)}, {"Transpose", when_split(tp_transpose)},
      {"Softmax", when_split(tp_softmax)}, {"LogSoftmax", when_split(tp_softmax)},
      {"LayerNormalization", when_split(tp_layer_norm)}, {"RMSNormalization", when_split(tp_layer_norm)},
      {"Flatten", when_split(tp_flatten)}, {"RotaryEmbedding", when_split(tp_rotary)}, {"Attention", tp_attention},
      {"Reshape", when_split(tp_reshape)}, {"Gather", tp_gather}};
  const core::OpTraits& t = op.traits;
  ShardFn rule = tp_default;
  if (auto it = by_name.find(op.name); it != by_name.end()) rule = it->second;
  // By core traits, as prune's channel facets: no list of names.
  else if (t.elementwise == core::OpTraits::Elementwise::kBroadcast) rule = tp_broadcast;
  else if (t.elementwise == core::OpTraits::Elementwise::kUnary) rule = when_split(tp_unary);
  else if (t.spatial_pool) rule = when_split(tp_pool);
  else if (t.reduction == core::OpTraits::Reduction::kAxes) rule = when_split(tp_reduce);
  op.set_facet(kShardFacet, ShardFacet{rule});
}

const core::OpRegistry& shard_registry() {
  static std::once_flag once;
  std::call_once(once, [] { core::OpRegistry::global().add_facet_provider(attach_shard_facets); });
  return core::OpRegistry::global();
}

}  // namespace pare::dist::detail
