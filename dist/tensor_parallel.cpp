// The tensor-parallel pass (shard_tensor_parallel): rewrites a graph into the shard one rank runs,
// following how each value is laid out over the ranks (see dist/shard.h).
#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/op_registry.h"
#include "core/summary.h"
#include "dist/shard.h"
#include "dist/shard_internal.h"

namespace pare::dist {
namespace {

using core::Graph;
using core::Node;
using detail::prod;

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
    for (int w : core::OpRegistry::global().get(n.op_type).weight_inputs())
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

}  // namespace

namespace detail {

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

}  // namespace detail

Shard shard_tensor_parallel(const Graph& g, int rank, int ranks) { return detail::tensor_parallel(g, rank, ranks, true); }

}  // namespace pare::dist
