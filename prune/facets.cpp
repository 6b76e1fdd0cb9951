// Attaches prune's facets to the core ops: "prune.weight" (which input is the prunable weight)
// and "prune.channels" (how channel dimensions flow through the op). See prune/facets.h.
#include "prune/facets.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"

namespace pare::prune {

namespace {

using core::Node;
using Dims = std::vector<std::pair<std::string, int64_t>>;

bool has(const Node& n, size_t i) { return n.has_input(i); }

int64_t norm_axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// Outputs of an unsupported op: fixed; every grouped input dimension is blocked.
void block_all(const Node& n, ChannelGraph& cg) {
  for (const auto& in : n.inputs) {
    if (in.empty() || cg.is_initializer(in)) continue;
    for (int64_t a = 0; a < cg.rank(in); ++a)
      cg.block(cg.get(in, a), "flows into " + n.describe() + ", which has no channel rule");
  }
  for (const auto& o : n.outputs) {
    if (o.empty()) continue;
    const auto& sh = cg.shape(o);
    for (size_t a = 0; a < sh.size(); ++a) cg.set(o, static_cast<int64_t>(a), ChannelGraph::fixed(sh[a]));
  }
}

// Numpy broadcasting: each output dim is the join of the inputs' dims that are not broadcast.
void elementwise(const Node& n, ChannelGraph& cg) {
  const std::string& out = n.outputs.at(0);
  const auto& osh = cg.shape(out);
  const int64_t ro = static_cast<int64_t>(osh.size());
  for (int64_t a = 0; a < ro; ++a) {
    Dims dims;
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      const int64_t ri = cg.rank(in), ai = a - (ro - ri);
      if (ai < 0) continue;
      if (cg.shape(in)[ai] == osh[a]) dims.push_back({in, ai});
    }
    Layout l = cg.join(dims, osh[a]);
    for (const auto& o : n.outputs)
      if (!o.empty() && cg.rank(o) == ro) cg.set(o, a, l);
  }
  for (const auto& o : n.outputs)  // e.g. Dropout's mask has the shape of the output
    if (!o.empty() && cg.rank(o) != ro)
      for (int64_t a = 0; a < cg.rank(o); ++a) cg.set(o, a, ChannelGraph::fixed(cg.shape(o)[a]));
}

// Ops that keep element order and only change the shape (Reshape, Flatten, Squeeze, Unsqueeze):
// dims are matched in chunks of equal products, each chunk merged and split again.
void reshape_like(const Node& n, ChannelGraph& cg, const std::string& shape_init = "") {
  const std::string &in = n.inputs.at(0), &out = n.outputs.at(0);
  const auto &ish = cg.shape(in), &osh = cg.shape(out);
  const size_t ni = ish.size(), no = osh.size();
  std::vector<int64_t> shape_vals;
  if (!shape_init.empty()) shape_vals = core::to_int_vector(cg.graph().initializers.at(shape_init));
  size_t i = 0, j = 0;
  while (i < ni || j < no) {
    std::vector<size_t> ai, aj;
    int64_t pi = 1, pj = 1;
    if (i < ni) { ai.push_back(i); pi = ish[i++]; }
    if (j < no) { aj.push_back(j); pj = osh[j++]; }
    while (pi != pj) {
      if (pi < pj && i < ni) { ai.push_back(i); pi *= ish[i++]; }
      else if (pj < pi && j < no) { aj.push_back(j); pj *= osh[j++]; }
      else break;
    }
    // Size-1 dims at the end of a chunk belong to no channel: absorb them.
    std::vector<Layout> in_l;
    std::vector<int64_t> in_s, out_s;
    for (size_t a : ai) { in_l.push_back(cg.get(in, a)); in_s.push_back(ish[a]); }
    for (size_t a : aj) out_s.push_back(osh[a]);
    const std::string why = n.describe();
    if (pi != pj) {
      for (auto& l : in_l) cg.block(l, why + ": shapes do not line up");
      for (size_t a : aj) cg.set(out, a, ChannelGraph::fixed(osh[a]));
      continue;
    }
    Layout merged = cg.merge(in_l, in_s, why);
    std::vector<Layout> parts = cg.split(merged, out_s, why);
    for (size_t k = 0; k < aj.size(); ++k) {
      cg.set(out, aj[k], parts[k]);
      const bool grouped = std::any_of(parts[k].begin(), parts[k].end(), [](const Segment& s) { return s.group >= 0; });
      if (!grouped) continue;
      if (!shape_init.empty() && aj[k] < shape_vals.size() && shape_vals[aj[k]] > 0)
        cg.shape_entry(shape_init, aj[k], parts[k]);
    }
  }
}

void pass_axes(const Node& n, ChannelGraph& cg, const std::set<int64_t>& blocked, const std::string& why) {
  const std::string &in = n.inputs.at(0), &out = n.outputs.at(0);
  for (int64_t a = 0; a < cg.rank(in); ++a) {
    Layout l = cg.get(in, a);
    if (blocked.count(a)) {
      cg.block(l, why);
      l = ChannelGraph::fixed(cg.shape(in)[a]);
    }
    if (a < cg.rank(out)) cg.set(out, a, l);
  }
}

void conv(const Node& n, ChannelGraph& cg) {
  const std::string &x = n.inputs.at(0), &w = n.inputs.at(1), &y = n.outputs.at(0);
  const auto& wsh = cg.shape(w);
  const core::WeightAxes wa = core::weight_axes(n, 1, cg.rank(w));
  const int64_t bias_axis = core::weight_axes(n, 2, 1).out;
  const int64_t group = n.attr_int("group", 1), c = cg.shape(x)[1], m = wsh[wa.out];
  cg.set(y, 0, cg.get(x, 0));
  for (int64_t a = 2; a < cg.rank(y); ++a) {
    cg.block(cg.get(x, a), n.describe() + " slides over this dimension");
    cg.set(y, a, ChannelGraph::fixed(cg.shape(y)[a]));
  }
  if (!cg.is_initializer(w)) {
    cg.block(cg.get(x, 1), n.describe() + " has a computed weight");
    cg.set(y, 1, ChannelGraph::fixed(m));
    return;
  }
  if (group == 1) {
    Layout out = cg.source(n, m);
    cg.tie(w, wa.out, out, Role::kProduce);
    if (has(n, 2)) cg.tie(n.inputs[2], bias_axis, out, Role::kProduce);
    cg.tie(w, wa.in, cg.get(x, 1), Role::kConsume);
    cg.set(y, 1, out);
  } else if (group == c && wsh[wa.in] == 1 && m % c == 0) {
    // Depthwise: output channel c * mult + r reads input channel c only.
    Layout in = cg.get(x, 1), out = in;
    for (Segment& s : out) (s.group < 0 ? s.count : s.k) *= m / c;
    cg.tie(w, wa.out, out, Role::kCarry);
    if (has(n, 2)) cg.tie(n.inputs[2], bias_axis, out, Role::kCarry);
    cg.attr_size(n, "group", in);
    cg.set(y, 1, out);
  } else {
    cg.block(cg.get(x, 1), n.describe() + " is a grouped convolution (group " + std::to_string(group) + ")");
    cg.set(y, 1, ChannelGraph::fixed(m));
  }
}

void conv_transpose(const Node& n, ChannelGraph& cg) {
  const std::string &x = n.inputs.at(0), &w = n.inputs.at(1), &y = n.outputs.at(0);
  const int64_t group = n.attr_int("group", 1), m = cg.shape(y)[1];
  cg.set(y, 0, cg.get(x, 0));
  for (int64_t a = 2; a < cg.rank(y); ++a) {
    cg.block(cg.get(x, a), n.describe() + " slides over this dimension");
    cg.set(y, a, ChannelGraph::fixed(cg.shape(y)[a]));
  }
  if (!cg.is_initializer(w) || group != 1) {
    cg.block(cg.get(x, 1), n.describe() + " is grouped or has a computed weight");
    cg.set(y, 1, ChannelGraph::fixed(m));
    return;
  }
  const core::WeightAxes wa = core::weight_axes(n, 1, cg.rank(w));
  Layout out = cg.source(n, m);
  cg.tie(w, wa.out, out, Role::kProduce);
  if (has(n, 2)) cg.tie(n.inputs[2], core::weight_axes(n, 2, 1).out, out, Role::kProduce);
  cg.tie(w, wa.in, cg.get(x, 1), Role::kConsume);
  cg.set(y, 1, out);
}

void gemm(const Node& n, ChannelGraph& cg) {
  const std::string &a = n.inputs.at(0), &b = n.inputs.at(1), &y = n.outputs.at(0);
  const bool ta = n.attr_int("transA", 0) != 0;
  const core::WeightAxes wb = core::weight_axes(n, 1, 2);  // B is 2-D, a weight or not
  const int64_t a_m = ta ? 1 : 0, a_k = ta ? 0 : 1, b_k = wb.in, b_n = wb.out;
  const int64_t nout = cg.shape(y)[1];
  Layout rows = cg.is_initializer(a) ? ChannelGraph::fixed(cg.shape(y)[0]) : cg.get(a, a_m);
  Layout cols;
  if (cg.is_initializer(b) && !cg.is_initializer(a)) {
    cols = cg.source(n, nout);
    cg.tie(b, b_n, cols, Role::kProduce);
    cg.tie(b, b_k, cg.get(a, a_k), Role::kConsume);
  } else {
    cg.join({{a, a_k}, {b, b_k}}, cg.shape(a)[a_k]);
    cols = cg.is_initializer(b) ? ChannelGraph::fixed(nout) : cg.get(b, b_n);
  }
  if (has(n, 2)) {
    const std::string& c = n.inputs[2];
    const auto& csh = cg.shape(c);
    const int64_t rc = static_cast<int64_t>(csh.size()), c_n = core::weight_axes(n, 2, rc).out;
    if (c_n >= 0 && csh[c_n] == nout) {
      if (cg.is_initializer(c)) cg.tie(c, c_n, cols, Role::kProduce);
      else cg.unify(cg.get(c, c_n), cols, n.describe());
    }
    if (rc == 2 && csh[0] > 1) {
      if (cg.is_initializer(c)) cg.tie(c, 0, rows);
      else cg.unify(cg.get(c, 0), rows, n.describe());
    }
  }
  cg.set(y, 0, rows);
  cg.set(y, 1, cols);
}

void matmul(const Node& n, ChannelGraph& cg) {
  const std::string &a = n.inputs.at(0), &b = n.inputs.at(1), &y = n.outputs.at(0);
  const int64_t ra = cg.rank(a), rb = cg.rank(b), ry = cg.rank(y);
  if (ra < 2 || rb < 2) return block_all(n, cg);
  const auto& ysh = cg.shape(y);
  const core::WeightAxes wb = core::weight_axes(n, 1, rb);
  if (cg.is_initializer(b) && wb.out >= 0 && !cg.is_initializer(a)) {
    Layout cols = cg.source(n, cg.shape(b)[wb.out]);
    cg.tie(b, wb.out, cols, Role::kProduce);
    cg.tie(b, wb.in, cg.get(a, ra - 1), Role::kConsume);
    for (int64_t i = 0; i < ra - 1; ++i) cg.set(y, i, cg.get(a, i));
    cg.set(y, ry - 1, cols);
    return;
  }
  cg.join({{a, ra - 1}, {b, rb - 2}}, cg.shape(a)[ra - 1]);
  // Batch dims broadcast like an elementwise op.
  for (int64_t i = 0; i < ry - 2; ++i) {
    Dims dims;
    const int64_t ia = i - (ry - ra), ib = i - (ry - rb);
    if (ia >= 0 && cg.shape(a)[ia] == ysh[i]) dims.push_back({a, ia});
    if (ib >= 0 && cg.shape(b)[ib] == ysh[i]) dims.push_back({b, ib});
    cg.set(y, i, cg.join(dims, ysh[i]));
  }
  cg.set(y, ry - 2, cg.is_initializer(a) ? ChannelGraph::fixed(ysh[ry - 2]) : cg.get(a, ra - 2));
  cg.set(y, ry - 1, cg.is_initializer(b) ? ChannelGraph::fixed(ysh[ry - 1]) : cg.get(b, rb - 1));
}

void batch_norm(const Node& n, ChannelGraph& cg) {
  const std::string& x = n.inputs.at(0);
  Layout c = cg.get(x, 1);
  // Scale, B, mean and var: one value per channel along their declared axis.
  for (const core::WeightInput& w : core::OpRegistry::global().get(n.op_type).weights) {
    const size_t i = static_cast<size_t>(w.input);
    if (!has(n, i)) continue;
    const int64_t axis = w.axes_on(n, 1).out;
    const Role role = w.role == core::WeightRole::kScale ? Role::kScale : Role::kCarry;
    if (cg.is_initializer(n.inputs[i])) cg.tie(n.inputs[i], axis, c, role);
    else cg.unify(cg.get(n.inputs[i], axis), c, n.describe());
  }
  for (int64_t a = 0; a < cg.rank(x); ++a) cg.set(n.outputs[0], a, cg.get(x, a));
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (!n.outputs[o].empty()) cg.set(n.outputs[o], 0, c);
}

// LayerNormalization and RMSNormalization: the statistics run over [axis, rank), which keep their size.
void layer_norm(const Node& n, ChannelGraph& cg) {
  const std::string& x = n.inputs.at(0);
  const int64_t r = cg.rank(x), axis = norm_axis(n.attr_int("axis", -1), r);
  std::set<int64_t> normalized;
  for (int64_t a = axis; a < r; ++a) normalized.insert(a);
  pass_axes(n, cg, normalized, n.describe() + " normalizes over this dimension");
  for (size_t i = 1; i < n.inputs.size(); ++i)  // scale and bias cover the normalized dims
    if (has(n, i) && !cg.is_initializer(n.inputs[i]))
      for (int64_t a = 0; a < cg.rank(n.inputs[i]); ++a) cg.block(cg.get(n.inputs[i], a), n.describe());
  for (size_t o = 1; o < n.outputs.size(); ++o) {
    if (n.outputs[o].empty()) continue;
    for (int64_t a = 0; a < cg.rank(n.outputs[o]); ++a)
      cg.set(n.outputs[o], a, a < axis ? cg.get(x, a) : ChannelGraph::fixed(cg.shape(n.outputs[o])[a]));
  }
}

// Pooling keeps N and C and slides over (or reduces) the spatial dims.
void pool(const Node& n, ChannelGraph& cg) {
  const std::string& x = n.inputs.at(0);
  std::set<int64_t> spatial;
  for (int64_t a = 2; a < cg.rank(x); ++a) spatial.insert(a);
  // MaxPool's flat Indices count across channels: channels cannot change under them.
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) spatial.insert(1);
  pass_axes(n, cg, spatial, n.describe() + " pools over this dimension");
  for (int64_t a = 2; a < cg.rank(n.outputs[0]); ++a)
    cg.set(n.outputs[0], a, ChannelGraph::fixed(cg.shape(n.outputs[0])[a]));
  if (n.outputs.size() > 1 && !n.outputs[1].empty())
    for (int64_t a = 0; a < cg.rank(n.outputs[1]); ++a)
      cg.set(n.outputs[1], a, ChannelGraph::fixed(cg.shape(n.outputs[1])[a]));
}

void softmax(const Node& n, ChannelGraph& cg) {
  const int64_t r = cg.rank(n.inputs.at(0));
  pass_axes(n, cg, {norm_axis(n.attr_int("axis", -1), r)}, n.describe() + " normalizes along this dimension");
}

void reduce(const Node& n, ChannelGraph& cg) {
  const std::string &x = n.inputs.at(0), &y = n.outputs.at(0);
  const int64_t r = cg.rank(x);
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (core::OpRegistry::global().get(n.op_type).traits.reduction == core::OpTraits::Reduction::kAxis)
    axes = {n.attr_int("axis", 0)};
  if (has(n, 1)) {
    if (!cg.is_initializer(n.inputs[1])) return block_all(n, cg);
    axes = core::to_int_vector(cg.graph().initializers.at(n.inputs[1]));
  }
  std::set<int64_t> reduced;
  for (int64_t a : axes) reduced.insert(norm_axis(a, r));
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0) == 0)
    for (int64_t a = 0; a < r; ++a) reduced.insert(a);
  const bool keep = n.attr_int("keepdims", 1) != 0;
  int64_t o = 0;
  for (int64_t a = 0; a < r; ++a) {
    if (reduced.count(a)) {
      cg.block(cg.get(x, a), n.describe() + " reduces over this dimension");
      if (keep) cg.set(y, o++, ChannelGraph::fixed(1));
    } else {
      cg.set(y, o++, cg.get(x, a));
    }
  }
}

void transpose(const Node& n, ChannelGraph& cg) {
  const std::string &x = n.inputs.at(0), &y = n.outputs.at(0);
  const int64_t r = cg.rank(x);
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int64_t a = r - 1; a >= 0; --a) perm.push_back(a);
  for (int64_t a = 0; a < r; ++a) cg.set(y, a, cg.get(x, norm_axis(perm[a], r)));
}

void concat(const Node& n, ChannelGraph& cg) {
  const std::string& y = n.outputs.at(0);
  const int64_t r = cg.rank(y), axis = norm_axis(n.attr_int("axis", 0), r);
  for (int64_t a = 0; a < r; ++a) {
    if (a == axis) {
      Layout l;
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        Layout part = cg.get(in, a);
        l.insert(l.end(), part.begin(), part.end());
      }
      cg.set(y, a, l);
      continue;
    }
    Dims dims;
    for (const auto& in : n.inputs)
      if (!in.empty()) dims.push_back({in, a});
    cg.set(y, a, cg.join(dims, cg.shape(y)[a]));
  }
}

void reshape(const Node& n, ChannelGraph& cg) {
  const std::string& shape = n.inputs.at(1);
  if (cg.is_initializer(shape)) return reshape_like(n, cg, shape);
  // A computed shape cannot be rewritten: only dims that stay untouched may pass.
  reshape_like(n, cg);
  for (int64_t a = 0; a < cg.rank(n.outputs[0]); ++a) {
    cg.block(cg.get(n.outputs[0], a), n.describe() + " has a computed target shape");
    cg.set(n.outputs[0], a, ChannelGraph::fixed(cg.shape(n.outputs[0])[a]));
  }
}

// Reads only its input's shape: no constraint on the channels, a fixed output.
void shape_only(const Node& n, ChannelGraph& cg) {
  for (const auto& o : n.outputs)
    if (!o.empty())
      for (int64_t a = 0; a < cg.rank(o); ++a) cg.set(o, a, ChannelGraph::fixed(cg.shape(o)[a]));
}

// The node's prunable weight: the one input the op declares a kWeight that is an initializer,
// when the op follows its input channels (none for a MatMul of two constants).
std::optional<WeightRole> declared_weight(const std::vector<core::WeightInput>& weights, const Node& n,
                                          const core::Graph& g) {
  std::optional<WeightRole> found;
  for (const core::WeightInput& w : weights) {
    if (w.role != core::WeightRole::kWeight || !n.has_input(w.input) || !g.is_initializer(n.inputs[w.input]))
      continue;
    if (found) return std::nullopt;
    const int64_t in = w.axes_on(n, g.initializers.at(n.inputs[w.input]).dim()).in;
    found = WeightRole{w.input, in};
  }
  if (found && found->in_axis < 0) return std::nullopt;
  return found;
}

}  // namespace

void attach_prune_facets(core::OpDef& op) {
  // Which input is the prunable weight, and its input-channel axis, come from the op's weight
  // declaration in core.
  const bool weighted = std::any_of(op.weights.begin(), op.weights.end(),
                                    [](const core::WeightInput& w) { return w.role == core::WeightRole::kWeight; });
  if (weighted)
    op.set_facet(kWeightFacet, WeightFacet{[weights = op.weights](const Node& n, const core::Graph& g) {
                   return declared_weight(weights, n, g);
                 }});
  using ChannelFn = std::function<void(const Node&, ChannelGraph&)>;
  auto like_reshape = [](const Node& n, ChannelGraph& cg) { reshape_like(n, cg); };
  static const std::map<std::string, ChannelFn> by_name = {
      {"Conv", conv}, {"ConvTranspose", conv_transpose}, {"Gemm", gemm}, {"MatMul", matmul},
      {"BatchNormalization", batch_norm}, {"LayerNormalization", layer_norm},
      {"RMSNormalization", layer_norm}, {"Softmax", softmax},
      {"LogSoftmax", softmax}, {"Transpose", transpose}, {"Concat", concat}, {"Reshape", reshape},
      {"Flatten", like_reshape}, {"Squeeze", like_reshape}, {"Unsqueeze", like_reshape},
      {"Shape", shape_only}, {"Size", shape_only}};
  const core::OpTraits& t = op.traits;
  if (auto c = by_name.find(op.name); c != by_name.end()) op.set_facet(kChannelFacet, ChannelFacet{c->second, true});
  // The ops whose core traits say how they map elements: no list of names here. Elementwise,
  // unary or with numpy broadcasting, covers arithmetic, comparisons, logic, activations, Clip,
  // Cast, Where, Dropout, Identity and the variadic Sum/Mean/Max/Min.
  else if (t.spatial_pool) op.set_facet(kChannelFacet, ChannelFacet{pool, true});
  else if (t.reduction != core::OpTraits::Reduction::kNo) op.set_facet(kChannelFacet, ChannelFacet{reduce, true});
  else if (t.elementwise != core::OpTraits::Elementwise::kNo) op.set_facet(kChannelFacet, ChannelFacet{elementwise, true});
  // Opaque ops: the dims they touch keep their size. An op whose traits say nothing gets no
  // facet, and the analysis of a graph that uses it fails naming the op.
  else if (t.opaque_channels) op.set_facet(kChannelFacet, ChannelFacet{block_all, false});
}

const core::OpRegistry& prune_registry() {
  static std::once_flag once;
  std::call_once(once, [] { core::OpRegistry::global().add_facet_provider(attach_prune_facets); });
  return core::OpRegistry::global();
}

}  // namespace pare::prune
