// Teacher sharding: the tensor-parallel pass, pipeline stages, and ShardedModel that runs either.
#include "dist/shard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/module.h"
#include "core/summary.h"

namespace pare::dist {

using core::Graph;
using core::Node;

TeacherParallel parse_teacher_parallel(const std::string& s, const std::string& option) {
  if (s == "none") return TeacherParallel::kNone;
  if (s == "tp") return TeacherParallel::kTensor;
  if (s == "pp") return TeacherParallel::kPipeline;
  if (s == "auto") return TeacherParallel::kAuto;
  throw InputError(option + " must be none, tp, pp or auto, got '" + s + "'");
}

const char* teacher_parallel_name(TeacherParallel p) {
  switch (p) {
    case TeacherParallel::kNone: return "none";
    case TeacherParallel::kTensor: return "tp";
    case TeacherParallel::kPipeline: return "pp";
    case TeacherParallel::kAuto: return "auto";
  }
  return "?";
}

namespace {

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

int64_t prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// The graph sorted and checked, with the Identity nodes of tied weights bypassed: they would hide a
// MatMul's weight from the tensor-parallel pass and put every tied weight into the first stage.
Graph prepare(const Graph& g) {
  PARE_CHECK(g.inputs.size() == 1 && !g.outputs.empty(), "model '", g.name,
             "' must have one input and at least one output to be sharded; it has ", g.inputs.size(),
             " input(s) and ", g.outputs.size(), " output(s)");
  Graph r = g;
  r.topo_sort();
  r.verify();
  core::bypass_constant_identities(r);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Tensor parallel

// How the local version of a value relates to the whole value.
struct Layout {
  enum Kind { kWhole, kSplit, kPartial } kind = kWhole;
  int64_t axis = -1, full = 0;  // kSplit: along `axis`, whose whole size is `full` (rank r holds
                                // the r-th of `ranks` equal blocks)
};

// What the op registry says of an op's elements (core::OpTraits).
core::OpTraits traits_of(const std::string& op) {
  const core::OpDef* d = core::OpRegistry::global().find(op);
  return d ? d->traits : core::OpTraits{};
}

class TensorParallelPass {
 public:
  // `g`: prepare()d, `shapes`: its values' sizes at batch 1 (one probe serves every rank's pass).
  // `copy`: this rank's slices are copied out of the whole weights (false: views, enough to count
  // another rank's share for the report without holding it).
  TensorParallelPass(const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes, int rank,
                     int ranks, bool copy)
      : g_(g), rank_(rank), n_(ranks), copy_(copy), shapes_(shapes) {
    flops_ = core::node_flops(g_, shapes_);
    for (auto& in : g_.inputs) taken_.insert(in.name);
    for (auto& [k, t] : g_.initializers) taken_.insert(k);
    for (auto& n : g_.nodes)
      for (auto& o : n.outputs) taken_.insert(o);
    for (auto& o : g_.outputs) is_output_.insert(o.name);
  }

  Shard run() {
    out_.name = g_.name;
    out_.opset = g_.opset;
    out_.metadata = g_.metadata;
    out_.doc = g_.doc;
    out_.inputs = g_.inputs;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      node_flops_ = flops_[i];
      visit(g_.nodes[i]);
    }
    for (auto& o : g_.outputs) {
      emit(Node{"Identity", "", {whole(o.name)}, {o.name}, {}, ""});
      out_.outputs.push_back(o);
    }
    // Keep the initializers the shard reads.
    for (auto& [k, t] : g_.initializers)
      if (!out_.initializers.count(k)) out_.initializers[k] = t;
    core::remove_unused_initializers(out_);
    out_.verify();

    Shard s;
    s.report.mode = "tp";
    s.report.ranks = n_;
    s.report.collectives = collectives_;
    s.report.flops = std::accumulate(flops_.begin(), flops_.end(), int64_t{0});
    s.report.rank_flops = {rank_flops_};
    s.report.replicated = replicated_;
    s.graph = std::move(out_);
    return s;
  }

 private:
  std::string fresh(const std::string& base) {
    std::string s = base;
    for (int i = 1; taken_.count(s); ++i) s = base + "_" + std::to_string(i);
    taken_.insert(s);
    return s;
  }
  void emit(Node n) {
    if (n.name.empty()) n.name = fresh(n.op_type + "/tp");
    out_.nodes.push_back(std::move(n));
  }
  Layout layout(const std::string& v) const {
    auto it = layout_.find(v);
    return it == layout_.end() ? Layout{} : it->second;
  }
  std::string local(const std::string& v) const {
    auto it = local_.find(v);
    return it == local_.end() ? v : it->second;
  }
  const std::vector<int64_t>& full_shape(const std::string& v) const { return shapes_.at(v); }
  int64_t block(int64_t full) const { return full / n_; }
  bool is_init(const Node& n, size_t i) const { return n.has_input(i) && g_.is_initializer(n.inputs[i]); }
  const at::Tensor& init(const Node& n, size_t i) const { return g_.initializers.at(n.inputs[i]); }

  // The whole value of `v` on every rank: an AllReduce of a partial sum, an AllGather of a split.
  std::string whole(const std::string& v) {
    const Layout l = layout(v);
    if (l.kind == Layout::kWhole) return local(v);
    auto it = whole_.find(v);
    if (it != whole_.end()) return it->second;
    const bool reduce = l.kind == Layout::kPartial;
    std::string name = fresh(v + (reduce ? "/allreduce" : "/allgather"));
    Node n{reduce ? "AllReduce" : "AllGather", "", {local(v)}, {name}, {{"group_size", int64_t{n_}}}, "com.microsoft"};
    if (!reduce) n.attrs["axis"] = l.axis;
    emit(std::move(n));
    ++collectives_;
    return whole_[v] = name;
  }

  // This rank's block along `axis` of the whole value `v`: a sliced copy of an initializer, or a
  // Slice node.
  std::string split(const std::string& v, int64_t axis, int64_t full) {
    const auto key = v + "#" + std::to_string(axis);
    auto it = split_.find(key);
    if (it != split_.end()) return it->second;
    const int64_t len = block(full), start = rank_ * len;
    std::string name = fresh(v + "/rank" + std::to_string(rank_));
    if (g_.is_initializer(v)) {
      at::Tensor slice = g_.initializers.at(v).narrow(axis, start, len);
      out_.initializers[name] = copy_ ? slice.clone() : slice;
    } else {
      auto constant = [&](const char* what, int64_t value) {
        std::string c = fresh(name + "/" + what);
        out_.initializers[c] = at::tensor({value}, at::kLong);
        return c;
      };
      emit(Node{"Slice", "", {whole(v), constant("starts", start), constant("ends", start + len),
                              constant("axes", axis)}, {name}, {}, ""});
    }
    return split_[key] = name;
  }

  // A slice of initializer input `i` along `axis` (the whole size there is `full`).
  std::string split_init(const Node& n, size_t i, int64_t axis) {
    return split(n.inputs[i], axis, init(n, i).size(axis));
  }

  // Emits `n` with new inputs; its outputs get `out` (output 0) and whole (the others).
  void emit_as(const Node& n, std::vector<std::string> inputs, Layout out,
               std::map<std::string, core::AttrValue> attrs = {}) {
    Node m = n;
    m.inputs = std::move(inputs);
    for (auto& [k, v] : attrs) m.attrs[k] = v;
    for (size_t i = 0; i < m.outputs.size(); ++i) {
      const std::string& o = n.outputs[i];
      if (o.empty()) continue;
      if (is_output_.count(o)) m.outputs[i] = local_[o] = fresh(o + "/local");
      layout_[o] = i == 0 ? out : Layout{};
    }
    // A node whose output is split or a partial sum does 1/ranks of the work.
    rank_flops_ += out.kind == Layout::kWhole ? node_flops_ : node_flops_ / n_;
    emit(std::move(m));
  }

  // Runs `n` whole on every rank.
  void replicate(const Node& n, const std::string& why) {
    std::vector<std::string> ins;
    for (auto& i : n.inputs) ins.push_back(i.empty() ? i : whole(i));
    bool weighted = false;
    for (int w : core::OpRegistry::global().get(n.op_type).weight_inputs)
      weighted |= is_init(n, static_cast<size_t>(w)) && init(n, static_cast<size_t>(w)).dim() >= 2;
    if (weighted) replicated_.push_back(n.describe() + ": " + why);
    emit_as(n, ins, Layout{});
  }

  Layout split_layout(int64_t axis, int64_t full) const { return Layout{Layout::kSplit, axis, full}; }
  bool is_split(const std::string& v, int64_t axis) const {
    Layout l = layout(v);
    return l.kind == Layout::kSplit && l.axis == axis;
  }

  void visit(const Node& n) {
    const std::string& op = n.op_type;
    const core::OpTraits t = traits_of(op);
    const bool broadcast_op = t.elementwise == core::OpTraits::Elementwise::kBroadcast;
    if (op == "Conv" && is_init(n, 1)) return conv(n);
    if (op == "Gemm" && is_init(n, 1)) return gemm(n);
    if (op == "MatMul") return matmul(n);
    const Layout in = n.inputs.empty() || n.inputs[0].empty() ? Layout{} : layout(n.inputs[0]);
    if (in.kind != Layout::kSplit) {
      if (broadcast_op) return broadcast(n);
      return replicate(n, op == "Gather" ? "embeddings stay whole" : "its input is whole");
    }
    const int64_t rank = static_cast<int64_t>(full_shape(n.inputs[0]).size());
    auto keep_split = [&](Layout out, std::map<std::string, core::AttrValue> attrs = {}) {
      std::vector<std::string> ins;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        ins.push_back(i == 0 ? local(n.inputs[0]) : n.inputs[i].empty() ? "" : whole(n.inputs[i]));
      emit_as(n, ins, out, std::move(attrs));
    };
    if (t.elementwise == core::OpTraits::Elementwise::kUnary && n.outputs.size() == 1) return keep_split(in);
    if (broadcast_op) return broadcast(n);
    if (op == "BatchNormalization" && in.axis == 1 && n.outputs.size() == 1 && is_init(n, 1) && is_init(n, 2) &&
        is_init(n, 3) && is_init(n, 4)) {
      std::vector<std::string> ins = {local(n.inputs[0])};
      for (size_t i = 1; i < 5; ++i) ins.push_back(split_init(n, i, 0));
      return emit_as(n, ins, in);
    }
    if (t.spatial_pool && in.axis == 1 && n.outputs.size() == 1) return keep_split(in);
    if (op == "Transpose") {
      auto perm = n.attr_ints("perm");
      if (perm.empty())
        for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
      auto b = std::find(perm.begin(), perm.end(), in.axis) - perm.begin();
      return keep_split(split_layout(b, in.full));
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      int64_t axis = n.attr_int("axis", -1);
      if (axis < 0) axis += rank;
      if (axis != in.axis) return keep_split(in);
      return replicate(n, "the split axis is normalised");
    }
    if (op == "LayerNormalization") {
      int64_t axis = n.attr_int("axis", -1);
      if (axis < 0) axis += rank;
      if (in.axis < axis) return keep_split(in);
      return replicate(n, "the split axis is normalised");
    }
    if (t.reduction == core::OpTraits::Reduction::kAxes && n.inputs.size() == 1) {
      auto axes = n.attr_ints("axes");
      for (auto& a : axes) a = a < 0 ? a + rank : a;
      if (!axes.empty() && std::find(axes.begin(), axes.end(), in.axis) == axes.end()) {
        int64_t out_axis = in.axis;
        if (n.attr_int("keepdims", 1) == 0)
          out_axis -= std::count_if(axes.begin(), axes.end(), [&](int64_t a) { return a < in.axis; });
        return keep_split(split_layout(out_axis, in.full));
      }
      return replicate(n, "the split axis is reduced");
    }
    if (op == "Flatten") {
      int64_t axis = n.attr_int("axis", 1);
      if (axis < 0) axis += rank;
      if (axis == in.axis) {
        const auto& s = full_shape(n.inputs[0]);
        return keep_split(split_layout(1, in.full * prod(s, in.axis + 1, s.size())));
      }
      return replicate(n, "it flattens the split axis into another");
    }
    if (op == "Reshape" && is_init(n, 1)) return reshape(n, in);
    replicate(n, "it mixes the split axis");
  }

  // Conv: by output channels when the input is whole, by input channels (partial sums) when the
  // input is split by channels; depthwise convolutions follow their input's split.
  void conv(const Node& n) {
    const std::string& x = n.inputs[0];
    const at::Tensor& w = init(n, 1);
    const int64_t group = n.attr_int("group", 1), out_ch = w.size(0);
    const bool bias = n.has_input(2);
    if (bias && !is_init(n, 2)) return replicate(n, "its bias is computed");
    if (group == 1 && is_split(x, 1)) {
      std::vector<std::string> ins = {local(x), split_init(n, 1, 1)};
      if (bias && rank_ == 0) ins.push_back(n.inputs[2]);
      return emit_as(n, ins, Layout{Layout::kPartial});
    }
    if (group > 1 && is_split(x, 1) && group == layout(x).full && out_ch == group) {
      std::vector<std::string> ins = {local(x), split_init(n, 1, 0)};
      if (bias) ins.push_back(split_init(n, 2, 0));
      return emit_as(n, ins, split_layout(1, out_ch), {{"group", block(group)}});
    }
    if (group == 1 && out_ch % n_ == 0) {
      std::vector<std::string> ins = {whole(x), split_init(n, 1, 0)};
      if (bias) ins.push_back(split_init(n, 2, 0));
      return emit_as(n, ins, split_layout(1, out_ch));
    }
    replicate(n, group == 1 ? "its output channels do not split evenly" : "grouped convolution");
  }

  // Gemm: A [M, K] times B; row split when A is split along K, else column split.
  void gemm(const Node& n) {
    const std::string& a = n.inputs[0];
    if (n.attr_int("transA", 0) != 0) return replicate(n, "transA");
    const bool tb = n.attr_int("transB", 0) != 0;
    const at::Tensor& b = init(n, 1);
    const int64_t cols = b.size(tb ? 0 : 1);
    if (is_split(a, 1)) {
      std::vector<std::string> ins = {local(a), split_init(n, 1, tb ? 1 : 0)};
      if (n.has_input(2) && rank_ == 0) ins.push_back(whole(n.inputs[2]));  // added once, by rank 0
      return emit_as(n, ins, Layout{Layout::kPartial});
    }
    if (cols % n_ == 0 && (!n.has_input(2) || is_init(n, 2))) {
      std::vector<std::string> ins = {whole(a), split_init(n, 1, tb ? 0 : 1)};
      if (n.has_input(2)) {
        const at::Tensor& c = init(n, 2);
        ins.push_back(c.dim() >= 1 && c.size(-1) == cols ? split(n.inputs[2], c.dim() - 1, cols) : n.inputs[2]);
      }
      return emit_as(n, ins, split_layout(1, cols));
    }
    replicate(n, "its output columns do not split evenly");
  }

  // MatMul with a 2-D weight: row or column split as Gemm. Between two activations split along
  // the same batch axis (attention heads): each rank multiplies its own heads.
  void matmul(const Node& n) {
    const std::string &a = n.inputs[0], &b = n.inputs[1];
    const int64_t rank_a = static_cast<int64_t>(full_shape(a).size());
    const int64_t rank_out = static_cast<int64_t>(full_shape(n.outputs[0]).size());
    if (is_init(n, 1) && init(n, 1).dim() == 2 && !g_.is_initializer(a)) {
      const int64_t cols = init(n, 1).size(1);
      if (is_split(a, rank_a - 1))
        return emit_as(n, {local(a), split_init(n, 1, 0)}, Layout{Layout::kPartial});
      if (cols % n_ == 0) return emit_as(n, {whole(a), split_init(n, 1, 1)}, split_layout(rank_out - 1, cols));
      return replicate(n, "its output columns do not split evenly");
    }
    const Layout la = layout(a), lb = layout(b);
    if (la.kind == Layout::kSplit && lb.kind == Layout::kSplit && la.axis == lb.axis && la.full == lb.full &&
        rank_a == static_cast<int64_t>(full_shape(b).size()) && la.axis < rank_a - 2)
      return emit_as(n, {local(a), local(b)}, la);
    replicate(n, "its operands are not split alike");
  }

  // Elementwise with broadcasting: keeps a split when every operand is split the same way or
  // broadcasts along the split axis; a whole operand of full size there is sliced.
  void broadcast(const Node& n) {
    const int64_t rank_out = static_cast<int64_t>(full_shape(n.outputs[0]).size());
    Layout out;
    for (auto& i : n.inputs) {
      if (i.empty()) continue;
      Layout l = layout(i);
      if (l.kind == Layout::kPartial) return replicate(n, "a partial sum meets an elementwise op");
      if (l.kind == Layout::kSplit && out.kind == Layout::kWhole)
        out = split_layout(l.axis + rank_out - static_cast<int64_t>(full_shape(i).size()), l.full);
    }
    if (out.kind == Layout::kWhole) return replicate(n, "its inputs are whole");
    // Decide every input before emitting anything, so that giving up leaves no dead Slice behind.
    std::vector<int64_t> slice_axis(n.inputs.size(), -1);  // -1: as it is (split, or broadcast)
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& i = n.inputs[k];
      if (i.empty()) continue;
      const auto& s = full_shape(i);
      const int64_t axis = out.axis - (rank_out - static_cast<int64_t>(s.size()));
      const Layout l = layout(i);
      if (l.kind == Layout::kSplit) {
        if (l.axis != axis || l.full != out.full) return replicate(n, "its inputs are split differently");
      } else if (axis >= 0 && s[axis] != 1) {
        if (s[axis] != out.full) return replicate(n, "an input does not broadcast along the split axis");
        slice_axis[k] = axis;
      }
    }
    std::vector<std::string> ins;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& i = n.inputs[k];
      ins.push_back(i.empty() ? i : slice_axis[k] >= 0 ? split(i, slice_axis[k], out.full)
                                  : layout(i).kind == Layout::kSplit ? local(i) : whole(i));
    }
    emit_as(n, ins, out);
  }

  // Reshape with a constant shape: the split stays when this rank's block is contiguous in one
  // output axis (splitting [N,S,D] into [N,S,H,D/H] heads, merging them back).
  void reshape(const Node& n, const Layout in) {
    const auto& si = full_shape(n.inputs[0]);
    const auto& so = full_shape(n.outputs[0]);
    const int64_t outer = prod(si, 0, in.axis), inner = prod(si, in.axis + 1, si.size());
    const int64_t len = block(in.full) * inner;  // elements of one rank's block per outer index
    std::vector<int64_t> target = core::to_int_vector(init(n, 1));
    for (size_t b = 0; b < so.size(); ++b) {
      if (prod(so, 0, b) != outer) continue;
      const int64_t inner_out = prod(so, b + 1, so.size());
      if (so[b] % n_ != 0 || len % inner_out != 0 || len / inner_out != block(so[b])) continue;
      if (target.size() != so.size()) break;
      bool copies_split = false;  // a 0 entry copies the input's (now local) dim
      for (size_t j = 0; j < target.size(); ++j)
        copies_split |= target[j] == 0 && static_cast<int64_t>(j) == in.axis && j != b;
      if (copies_split) break;
      target[b] = block(so[b]);
      std::string shape = fresh(n.inputs[1] + "/rank" + std::to_string(rank_));
      out_.initializers[shape] = at::tensor(target, at::kLong);
      return emit_as(n, {local(n.inputs[0]), shape}, split_layout(static_cast<int64_t>(b), so[b]));
    }
    replicate(n, "the split does not stay contiguous");
  }

  const Graph& g_;
  int rank_, n_;
  bool copy_;
  const std::map<std::string, std::vector<int64_t>>& shapes_;
  Graph out_;
  std::set<std::string> taken_, is_output_;
  std::map<std::string, Layout> layout_;
  std::map<std::string, std::string> local_, whole_, split_;
  std::vector<std::string> replicated_;
  int collectives_ = 0;
  std::vector<int64_t> flops_;
  int64_t node_flops_ = 0, rank_flops_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Pipeline

struct PipelinePlan {
  Graph g;                                     // sorted
  std::vector<size_t> cuts;                    // ranks + 1 node indices: stage k = [cuts[k], cuts[k+1])
  std::map<std::string, core::ProbedValue> values;
  std::vector<int64_t> flops, weight_bytes;    // per node (a weight counts at its first reader)
  std::map<std::string, std::pair<int, int>> span;  // value -> (defining node or -1, last reader or N)

  // The values live across the cut before node `i`, in a fixed order.
  std::vector<std::string> crossing(size_t i) const {
    std::vector<std::pair<int, std::string>> r;
    for (auto& [v, s] : span)
      if (s.first < static_cast<int>(i) && s.second >= static_cast<int>(i)) r.push_back({s.first, v});
    std::sort(r.begin(), r.end());
    std::vector<std::string> names;
    for (auto& [d, v] : r) names.push_back(v);
    return names;
  }
  int64_t bytes_per_sample(const std::vector<std::string>& vs) const {
    int64_t b = 0;
    for (auto& v : vs) {
      const auto& p = values.at(v);
      b += prod(p.sizes, 0, p.sizes.size()) * static_cast<int64_t>(at::elementSize(p.dtype));
    }
    return b;
  }
};

PipelinePlan plan_pipeline(const Graph& graph, int ranks, int64_t max_stage_bytes) {
  PipelinePlan p;
  p.g = prepare(graph);
  const size_t n = p.g.nodes.size();
  PARE_CHECK(n >= static_cast<size_t>(ranks), "model '", p.g.name, "' has ", n, " nodes, too few for ",
             ranks, " pipeline stages");
  p.values = core::probe_values(p.g, 1);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [k, v] : p.values) shapes[k] = v.sizes;
  p.flops = core::node_flops(p.g, shapes);
  std::set<std::string> seen;
  for (auto& node : p.g.nodes) {
    int64_t b = 0;
    for (auto& i : node.inputs)
      if (p.g.is_initializer(i) && seen.insert(i).second) {
        const at::Tensor& t = p.g.initializers.at(i);
        b += t.numel() * static_cast<int64_t>(t.element_size());
      }
    p.weight_bytes.push_back(b);
  }
  for (auto& in : p.g.inputs) p.span[in.name] = {-1, -1};
  for (size_t i = 0; i < n; ++i) {
    for (auto& v : p.g.nodes[i].inputs)
      if (p.span.count(v)) p.span[v].second = static_cast<int>(i);
    for (auto& o : p.g.nodes[i].outputs)
      if (!o.empty()) p.span[o] = {static_cast<int>(i), static_cast<int>(i)};
  }
  for (auto& o : p.g.outputs) p.span[o.name].second = static_cast<int>(n);

  // Cost of a node: its share of the FLOPs plus its share of the weight bytes.
  const double total_flops = std::max<double>(1, std::accumulate(p.flops.begin(), p.flops.end(), 0.0));
  const double total_bytes = std::max<double>(1, std::accumulate(p.weight_bytes.begin(), p.weight_bytes.end(), 0.0));
  std::vector<double> before(n + 1, 0);  // cost of nodes [0, i)
  for (size_t i = 0; i < n; ++i) before[i + 1] = before[i] + p.flops[i] / total_flops + p.weight_bytes[i] / total_bytes;
  const double per_stage = before[n] / ranks;
  std::vector<int64_t> bytes_before(n + 1, 0);  // weight bytes of nodes [0, i)
  for (size_t i = 0; i < n; ++i) bytes_before[i + 1] = bytes_before[i] + p.weight_bytes[i];
  const auto too_big = [&](size_t from, size_t to, int stages) {
    return max_stage_bytes > 0 && bytes_before[to] - bytes_before[from] > stages * max_stage_bytes;
  };
  PARE_CHECK(!too_big(0, n, ranks), "model '", p.g.name, "': its weights (", mb(bytes_before[n]), ") do not fit in ",
             ranks, " pipeline stages of at most ", mb(max_stage_bytes));
  p.cuts = {0};
  for (int k = 1; k < ranks; ++k) {
    const double target = per_stage * k;
    size_t best = 0;
    double best_score = 0;
    for (size_t i = p.cuts.back() + 1; i + (ranks - k) <= n; ++i) {
      // Within the memory limit: this stage, and the rest in the stages left.
      if (too_big(p.cuts.back(), i, 1) || too_big(i, n, ranks - k)) continue;
      // Off-balance by more than a tenth of a stage costs more than any boundary saves.
      const double off = std::abs(before[i] - target) / per_stage;
      const double score = off + (off <= 0.1 ? 0 : 10) +
                           1e-12 * static_cast<double>(p.bytes_per_sample(p.crossing(i)));
      if (best == 0 || score < best_score) best = i, best_score = score;
    }
    PARE_CHECK(best != 0, "model '", p.g.name, "': no cut between nodes keeps every pipeline stage's weights within ",
               mb(max_stage_bytes), " (one node's weights may be larger)");
    p.cuts.push_back(best);
  }
  p.cuts.push_back(n);
  PARE_CHECK(!too_big(p.cuts[ranks - 1], n, 1), "model '", p.g.name, "': no cut between nodes keeps every pipeline "
             "stage's weights within ", mb(max_stage_bytes));
  return p;
}

}  // namespace

std::string ShardReport::to_text() const {
  std::ostringstream os;
  os << (mode == "tp" ? "tensor-parallel" : "pipeline") << " teacher over " << ranks << " ranks: " << params
     << " parameters (" << mb(bytes) << ")\n";
  for (size_t r = 0; r < rank_params.size(); ++r) {
    os << "  rank " << r << ": " << rank_params[r] << " parameters (" << mb(rank_bytes[r]) << ", "
       << std::fixed;
    os.precision(1);
    os << 100.0 * rank_params[r] / std::max<int64_t>(1, params) << "%), "
       << 100.0 * rank_flops[r] / std::max<int64_t>(1, flops) << "% of the FLOPs";
    if (r < boundary_bytes.size()) os << ", sends " << boundary_bytes[r] << " bytes per sample";
    os << "\n";
  }
  if (mode == "tp") os << "  " << collectives << " collectives per forward\n";
  for (auto& r : replicated) os << "  whole on every rank: " << r << "\n";
  return os.str();
}

namespace {
// shard_tensor_parallel; with `copy` false this rank's slices are views (for the report alone).
Shard tensor_parallel(const Graph& g, int rank, int ranks, bool copy) {
  PARE_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks, "bad rank ", rank, " of ", ranks);
  const Graph prepared = prepare(g);
  const auto shapes = core::probe_shapes(prepared, 1);
  Shard s = TensorParallelPass(prepared, shapes, rank, ranks, copy).run();
  s.output_sizes = shapes.at(prepared.outputs[0].name);
  s.report.params = g.parameter_count();
  s.report.bytes = g.initializer_bytes();
  // Every rank's share, for the report (the shards differ in which block they hold, and rank 0
  // adds the biases of row-split layers).
  const int64_t my_flops = s.report.rank_flops.at(0);
  s.report.rank_flops.clear();
  for (int r = 0; r < ranks; ++r) {
    const Shard other = r == rank ? Shard{} : TensorParallelPass(prepared, shapes, r, ranks, /*copy=*/false).run();
    const Graph& shard = r == rank ? s.graph : other.graph;
    s.report.rank_params.push_back(shard.parameter_count());
    s.report.rank_bytes.push_back(shard.initializer_bytes());
    s.report.rank_flops.push_back(r == rank ? my_flops : other.report.rank_flops.at(0));
  }
  return s;
}
}  // namespace

Shard shard_tensor_parallel(const Graph& g, int rank, int ranks) { return tensor_parallel(g, rank, ranks, true); }

namespace {
Graph stage_graph(const PipelinePlan& p, int k) {
  Graph s;
  s.name = p.g.name + ".stage" + std::to_string(k);
  s.opset = p.g.opset;
  s.metadata = p.g.metadata;
  const size_t from = p.cuts[k], to = p.cuts[k + 1];
  for (size_t i = from; i < to; ++i) {
    s.nodes.push_back(p.g.nodes[i]);
    for (auto& v : p.g.nodes[i].inputs)
      if (p.g.is_initializer(v)) s.initializers[v] = p.g.initializers.at(v);
  }
  auto info = [&](const std::string& v) {
    if (const core::ValueInfo* in = p.g.find_input(v)) return *in;
    core::ValueInfo vi;
    vi.name = v;
    vi.dtype = p.values.at(v).dtype;
    vi.has_shape = false;
    return vi;
  };
  for (auto& v : p.crossing(from)) s.inputs.push_back(info(v));
  if (to == p.g.nodes.size()) s.outputs = p.g.outputs;
  else
    for (auto& v : p.crossing(to)) s.outputs.push_back(info(v));
  return s;
}
}  // namespace

Shard pipeline_stage(const Graph& g, int rank, int ranks, int64_t max_stage_bytes) {
  PARE_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks, "bad rank ", rank, " of ", ranks);
  PipelinePlan p = plan_pipeline(g, ranks, max_stage_bytes);
  Shard s;
  s.output_sizes = p.values.at(p.g.outputs[0].name).sizes;
  s.report.mode = "pp";
  s.report.ranks = ranks;
  s.report.params = g.parameter_count();
  s.report.bytes = g.initializer_bytes();
  s.report.flops = std::accumulate(p.flops.begin(), p.flops.end(), int64_t{0});
  for (int k = 0; k < ranks; ++k) {
    Graph st = stage_graph(p, k);
    s.report.rank_params.push_back(st.parameter_count());
    s.report.rank_bytes.push_back(st.initializer_bytes());
    s.report.rank_flops.push_back(std::accumulate(p.flops.begin() + p.cuts[k], p.flops.begin() + p.cuts[k + 1], int64_t{0}));
    if (k + 1 < ranks) s.report.boundary_bytes.push_back(p.bytes_per_sample(p.crossing(p.cuts[k + 1])));
    if (k == rank) s.graph = std::move(st);
  }
  s.graph.verify();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Running a sharded graph

namespace {
constexpr int kTagInput = 1, kTagBoundary = 2, kTagOutput = 3;
constexpr int64_t kMaxRank = 8;

// A tensor of any dtype and shape to `dst`: a header (dtype, rank, sizes), then the data. The
// tensors are kept in `keep` until the group's wait().
void send_tensor(ProcessGroup& pg, const at::Tensor& t, int dst, int tag, std::vector<at::Tensor>& keep) {
  PARE_CHECK(t.dim() <= kMaxRank, "a pipeline boundary value has rank ", t.dim(), " (at most ", kMaxRank, ")");
  at::Tensor header = at::zeros({kMaxRank + 2}, at::kLong);
  auto h = header.accessor<int64_t, 1>();
  h[0] = static_cast<int64_t>(t.scalar_type());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  keep.push_back(header);
  keep.push_back(t.contiguous());
  pg.send(keep[keep.size() - 2], dst, tag);
  pg.send(keep.back(), dst, tag);
}

at::Tensor recv_tensor(ProcessGroup& pg, int src, int tag) {
  at::Tensor header = at::zeros({kMaxRank + 2}, at::kLong);
  pg.recv(header, src, tag);
  auto h = header.accessor<int64_t, 1>();
  std::vector<int64_t> sizes(h[1]);
  for (int64_t d = 0; d < h[1]; ++d) sizes[d] = h[2 + d];
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])));
  pg.recv(t, src, tag);
  return t;
}
}  // namespace

struct ShardedModel::Impl {
  TeacherParallel mode;
  std::shared_ptr<ProcessGroup> pg;
  Shard shard;
  std::unique_ptr<core::Module> module;
  std::vector<std::string> stage_inputs;

  at::Tensor forward_tp(const at::Tensor& x) {
    // All ranks run the shard on every rank's rows; batches may differ in size.
    const int ranks = pg->size();
    auto sizes = pg->all_gather(at::tensor({x.size(0)}, at::kLong));
    int64_t most = 0, offset = 0, total = 0;
    for (int r = 0; r < ranks; ++r) {
      const int64_t s = sizes[r].item<int64_t>();
      most = std::max(most, s);
      if (r < pg->rank()) offset += s;
      total += s;
    }
    at::Tensor padded = x.contiguous();
    if (x.size(0) < most) {
      std::vector<int64_t> pad = x.sizes().vec();
      pad[0] = most - x.size(0);
      padded = at::cat({padded, at::zeros(pad, x.options())});
    }
    auto parts = pg->all_gather(padded);
    std::vector<at::Tensor> rows;
    for (int r = 0; r < ranks; ++r) rows.push_back(parts[r].narrow(0, 0, sizes[r].item<int64_t>()));
    at::Tensor all = at::cat(rows);
    at::Tensor y = module->forward({all})[0];
    PARE_CHECK(y.dim() >= 1 && y.size(0) == total, "the sharded model's output has ", y.sizes(),
               " rows for ", total, " inputs");
    return y.narrow(0, offset, x.size(0)).clone();
  }

  at::Tensor forward_pp(const at::Tensor& x) {
    const int ranks = pg->size(), me = pg->rank(), last = ranks - 1;
    // Every rank learns every micro-batch's size, so that all of them skip the empty ones.
    auto sizes = pg->all_gather(at::tensor({x.size(0)}, at::kLong));
    auto rows = [&](int m) { return sizes[m].item<int64_t>(); };
    std::vector<at::Tensor> keep;
    if (me != 0 && rows(me) > 0) send_tensor(*pg, x, 0, kTagInput, keep);
    at::Tensor mine;
    for (int m = 0; m < ranks; ++m) {  // micro-batch m is rank m's batch
      if (rows(m) == 0) continue;
      std::vector<at::Tensor> in;
      if (me == 0) {
        in.push_back(m == 0 ? x : recv_tensor(*pg, m, kTagInput));
      } else {
        for (size_t i = 0; i < stage_inputs.size(); ++i) in.push_back(recv_tensor(*pg, me - 1, kTagBoundary));
      }
      auto out = module->forward(in);
      if (me != last) {
        for (auto& t : out) send_tensor(*pg, t, me + 1, kTagBoundary, keep);
      } else if (m == me) {
        mine = out[0];
      } else {
        send_tensor(*pg, out[0], m, kTagOutput, keep);
      }
    }
    if (rows(me) == 0) {
      std::vector<int64_t> empty = shard.output_sizes;
      empty[0] = 0;
      mine = at::empty(empty);
    } else if (me != last) {
      mine = recv_tensor(*pg, last, kTagOutput);
    }
    pg->wait();
    return mine;
  }
};

ShardedModel::ShardedModel(const Graph& g, TeacherParallel mode, std::shared_ptr<ProcessGroup> pg,
                           int64_t max_stage_bytes)
    : impl_(std::make_unique<Impl>()) {
  PARE_CHECK(mode == TeacherParallel::kTensor || mode == TeacherParallel::kPipeline,
             "a sharded model runs tensor or pipeline parallel, not '", teacher_parallel_name(mode), "'");
  PARE_ASSERT(pg != nullptr, "a sharded model needs a process group");
  impl_->mode = mode;
  impl_->pg = pg;
  impl_->shard = mode == TeacherParallel::kTensor ? shard_tensor_parallel(g, pg->rank(), pg->size())
                                                  : pipeline_stage(g, pg->rank(), pg->size(), max_stage_bytes);
  for (auto& in : impl_->shard.graph.inputs) impl_->stage_inputs.push_back(in.name);
  PARE_CHECK(!impl_->shard.output_sizes.empty(), "model '", g.name, "': its first output has no batch dimension");
  impl_->module = std::make_unique<core::Module>(impl_->shard.graph, core::Module::Use::kFrozen);
  impl_->module->eval();
  // As GraphTeacher: libtorch's CPU convolutions are much faster channels-last.
  impl_->module->set_memory_format(at::MemoryFormat::ChannelsLast);
  ProcessGroup* group = pg.get();
  impl_->module->set_collective([group](const Node& n, const at::Tensor& t) -> at::Tensor {
    if (n.op_type == "AllReduce") {
      at::Tensor r = t.contiguous().clone();
      group->all_reduce(r);
      return r;
    }
    auto parts = group->all_gather(t.contiguous());
    return at::cat(parts, n.attr_int("axis", 0));
  });
}

ShardedModel::~ShardedModel() = default;

at::Tensor ShardedModel::forward(const at::Tensor& x) {
  at::NoGradGuard no_grad;
  return impl_->mode == TeacherParallel::kTensor ? impl_->forward_tp(x) : impl_->forward_pp(x);
}

const ShardReport& ShardedModel::report() const { return impl_->shard.report; }
const Graph& ShardedModel::shard() const { return impl_->shard.graph; }
const std::vector<int64_t>& ShardedModel::output_sizes() const { return impl_->shard.output_sizes; }

ParallelChoice choose_teacher_parallel(const Graph& g, const World& world, int64_t memory_per_process) {
  const int64_t bytes = g.initializer_bytes();
  if (!world.distributed()) return {TeacherParallel::kNone, "one process: nothing to shard over"};
  if (2 * bytes <= memory_per_process)
    return {TeacherParallel::kNone, "the teacher's weights (" + mb(bytes) + ") fit twice in each process's " +
                                        mb(memory_per_process) + ": a whole teacher per rank needs no teacher traffic"};
  const std::string too_big = "the teacher's weights (" + mb(bytes) + ") do not fit twice in " + mb(memory_per_process) + "; ";
  if (world.local_world_size == world.world_size) {
    Shard tp = tensor_parallel(g, 0, world.world_size, /*copy=*/false);
    const int64_t most = *std::max_element(tp.report.rank_bytes.begin(), tp.report.rank_bytes.end());
    if (most * world.world_size <= bytes * 5 / 4)
      return {TeacherParallel::kTensor, too_big + "all " + std::to_string(world.world_size) +
                                            " ranks share a node, and tensor parallel holds " + mb(most) +
                                            " per rank"};
    return {TeacherParallel::kPipeline, too_big + "tensor parallel would still hold " + mb(most) +
                                            " on one rank, so the graph is cut into stages"};
  }
  return {TeacherParallel::kPipeline, too_big + "the ranks span " +
                                          std::to_string(world.world_size / std::max(1, world.local_world_size)) +
                                          " nodes, where pipeline stages send only activations"};
}

}  // namespace pare::dist
