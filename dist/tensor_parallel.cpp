// The tensor-parallel pass (shard_tensor_parallel): rewrites a graph into the shard one rank runs,
// following how each value is laid out over the ranks (see dist/shard.h). Each node is emitted by
// its op's sharding rule, the "dist.shard" facet (dist/shard_facets.cpp).
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/summary.h"
#include "dist/shard.h"
#include "dist/shard_internal.h"
#include "dist/tensor_parallel.h"

namespace pare::dist::detail {

using core::Graph;
using core::Node;

TensorParallelPass::TensorParallelPass(const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes,
                                       int rank, int ranks, bool copy, bool split_output)
    : g_(g), rank_(rank), n_(ranks), copy_(copy), split_output_(split_output), shapes_(shapes) {
  flops_ = core::node_flops(g_, shapes_);
  for (auto& in : g_.inputs) taken_.insert(in.name);
  for (auto& [k, t] : g_.initializers) taken_.insert(k);
  for (auto& n : g_.nodes)
    for (auto& o : n.outputs) taken_.insert(o);
  for (auto& o : g_.outputs) is_output_.insert(o.name);
}

Shard TensorParallelPass::run() {
  const core::OpRegistry& reg = shard_registry();
  out_.name = g_.name;
  out_.opset = g_.opset;
  out_.metadata = g_.metadata;
  out_.doc = g_.doc;
  out_.inputs = g_.inputs;
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    node_flops_ = flops_[i];
    const Node& n = g_.nodes[i];
    reg.get(n.op_type).facet<ShardFacet>(kShardFacet).shard(n, *this);
  }
  Shard s;
  for (auto& o : g_.outputs) {
    const TpLayout l = layout(o.name);
    const bool keep = split_output_ && out_.outputs.empty() && l.kind == TpLayout::kSplit &&
                      l.axis == static_cast<int64_t>(shapes_.at(o.name).size()) - 1;
    if (keep) s.split_begin = rank_ * block(l.full), s.split_len = block(l.full);
    emit(Node{"Identity", "", {keep ? local(o.name) : whole(o.name)}, {o.name}, {}, ""});
    out_.outputs.push_back(o);
  }
  // Keep the initializers the shard reads.
  for (auto& [k, t] : g_.initializers)
    if (!out_.initializers.count(k)) out_.initializers[k] = t;
  core::remove_unused_initializers(out_);
  out_.verify();

  s.report.mode = "tp";
  s.report.ranks = n_;
  s.report.collectives = collectives_;
  s.report.flops = std::accumulate(flops_.begin(), flops_.end(), int64_t{0});
  s.report.rank_flops = {rank_flops_};
  s.report.replicated = replicated_;
  s.graph = std::move(out_);
  return s;
}

std::string TensorParallelPass::fresh(const std::string& base) {
  std::string s = base;
  for (int i = 1; taken_.count(s); ++i) s = base + "_" + std::to_string(i);
  taken_.insert(s);
  return s;
}

void TensorParallelPass::emit(Node n) {
  if (n.name.empty()) n.name = fresh(n.op_type + "/tp");
  out_.nodes.push_back(std::move(n));
}

TpLayout TensorParallelPass::layout(const std::string& v) const {
  auto it = layout_.find(v);
  return it == layout_.end() ? TpLayout{} : it->second;
}

TpLayout TensorParallelPass::input_layout(const Node& n) const {
  return n.inputs.empty() || n.inputs[0].empty() ? TpLayout{} : layout(n.inputs[0]);
}

std::string TensorParallelPass::local(const std::string& v) const {
  auto it = local_.find(v);
  return it == local_.end() ? v : it->second;
}

bool TensorParallelPass::is_split(const std::string& v, int64_t axis) const {
  TpLayout l = layout(v);
  return l.kind == TpLayout::kSplit && l.axis == axis;
}

std::string TensorParallelPass::whole(const std::string& v) {
  const TpLayout l = layout(v);
  if (l.kind == TpLayout::kWhole) return local(v);
  auto it = whole_.find(v);
  if (it != whole_.end()) return it->second;
  const bool reduce = l.kind == TpLayout::kPartial;
  std::string name = fresh(v + (reduce ? "/allreduce" : "/allgather"));
  Node n{reduce ? "AllReduce" : "AllGather", "", {local(v)}, {name}, {{"group_size", int64_t{n_}}}, "com.microsoft"};
  if (!reduce) n.attrs["axis"] = l.axis;
  emit(std::move(n));
  ++collectives_;
  return whole_[v] = name;
}

std::string TensorParallelPass::split(const std::string& v, int64_t axis, int64_t full) {
  const auto key = v + "#" + std::to_string(axis);
  auto it = split_.find(key);
  if (it != split_.end()) return it->second;
  const int64_t len = block(full), start = rank_ * len;
  std::string name = fresh(v + "/rank" + std::to_string(rank_));
  if (g_.is_initializer(v)) {
    const std::string twin = transposed_twin_block(v, axis);
    at::Tensor slice = g_.initializers.at(v).narrow(axis, start, len);
    out_.initializers[name] = !twin.empty() ? out_.initializers.at(twin).t() : copy_ ? slice.clone() : slice;
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

std::string TensorParallelPass::transposed_twin_block(const std::string& v, int64_t axis) const {
  const at::Tensor& t = g_.initializers.at(v);
  if (t.dim() != 2 || !t.has_storage()) return "";
  for (auto& [u, w] : g_.initializers) {
    const bool twin = u != v && w.dim() == 2 && w.has_storage() && w.storage().data() == t.storage().data() &&
                      w.storage_offset() == t.storage_offset() && w.size(0) == t.size(1) && w.size(1) == t.size(0) &&
                      w.stride(0) == t.stride(1) && w.stride(1) == t.stride(0);
    if (!twin) continue;
    auto it = split_.find(u + "#" + std::to_string(1 - axis));
    if (it != split_.end()) return it->second;
  }
  return "";
}

std::string TensorParallelPass::add_initializer(const std::string& base, at::Tensor t) {
  std::string name = fresh(base);
  out_.initializers[name] = std::move(t);
  return name;
}

std::string TensorParallelPass::add_node(const std::string& op, const std::string& base,
                                         std::vector<std::string> inputs,
                                         std::map<std::string, core::AttrValue> attrs) {
  std::string out = fresh(base);
  emit(Node{op, "", std::move(inputs), {out}, std::move(attrs), ""});
  return out;
}

void TensorParallelPass::emit_as(const Node& n, std::vector<std::string> inputs, TpLayout out,
                                 std::map<std::string, core::AttrValue> attrs) {
  Node m = n;
  m.inputs = std::move(inputs);
  for (auto& [k, v] : attrs) m.attrs[k] = v;
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    const std::string& o = n.outputs[i];
    if (o.empty()) continue;
    if (is_output_.count(o)) m.outputs[i] = local_[o] = fresh(o + "/local");
    layout_[o] = i == 0 ? out : TpLayout{};
  }
  // A node whose output is split or a partial sum does 1/ranks of the work.
  rank_flops_ += out.kind == TpLayout::kWhole ? node_flops_ : node_flops_ / n_;
  emit(std::move(m));
}

void TensorParallelPass::keep_split(const Node& n, TpLayout out, std::map<std::string, core::AttrValue> attrs) {
  std::vector<std::string> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    ins.push_back(i == 0 ? local(n.inputs[0]) : n.inputs[i].empty() ? "" : whole(n.inputs[i]));
  emit_as(n, ins, out, std::move(attrs));
}

void TensorParallelPass::replicate(const Node& n, const std::string& why) {
  std::vector<std::string> ins;
  for (auto& i : n.inputs) ins.push_back(i.empty() ? i : whole(i));
  bool weighted = false;
  for (int w : core::OpRegistry::global().get(n.op_type).weight_inputs())
    weighted |= is_init(n, static_cast<size_t>(w)) && init(n, static_cast<size_t>(w)).dim() >= 2;
  if (weighted) replicated_.push_back(n.describe() + ": " + why);
  emit_as(n, ins, TpLayout{});
}

namespace {

// A shard's floating parameters and weight bytes, each block of memory once: a tied head's
// transposed view of the embedding's block is that block (another rank's shard is counted from
// views of the whole weights, where Graph::parameter_count finds no whole tensor to tie them to).
std::pair<int64_t, int64_t> held(const Graph& g) {
  std::set<std::tuple<const void*, int64_t, int64_t>> seen;
  int64_t params = 0, bytes = 0;
  for (auto& [k, t] : g.initializers) {
    if (!seen.insert({t.has_storage() ? t.storage().data() : nullptr, t.storage_offset(), t.numel()}).second &&
        t.has_storage())
      continue;
    if (at::isFloatingType(t.scalar_type())) params += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return {params, bytes};
}

}  // namespace

Shard tensor_parallel(const Graph& g, int rank, int ranks, bool copy, bool split_output) {
  PARE_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks, "bad rank ", rank, " of ", ranks);
  const Graph prepared = prepare(g);
  const auto shapes = core::probe_shapes(prepared, 1);
  Shard s = TensorParallelPass(prepared, shapes, rank, ranks, copy, split_output).run();
  s.output_sizes = shapes.at(prepared.outputs[0].name);
  s.report.params = g.parameter_count();
  s.report.bytes = g.initializer_bytes();
  // Every rank's share, for the report (the shards differ in which block they hold, and rank 0
  // adds the biases of row-split layers).
  const int64_t my_flops = s.report.rank_flops.at(0);
  s.report.rank_flops.clear();
  for (int r = 0; r < ranks; ++r) {
    const Shard other =
        r == rank ? Shard{} : TensorParallelPass(prepared, shapes, r, ranks, /*copy=*/false, split_output).run();
    const Graph& shard = r == rank ? s.graph : other.graph;
    const auto [params, bytes] = held(shard);
    s.report.rank_params.push_back(params);
    s.report.rank_bytes.push_back(bytes);
    s.report.rank_flops.push_back(r == rank ? my_flops : other.report.rank_flops.at(0));
  }
  return s;
}

}  // namespace pare::dist::detail

namespace pare::dist {

Shard shard_tensor_parallel(const core::Graph& g, int rank, int ranks, bool split_output) {
  return detail::tensor_parallel(g, rank, ranks, true, split_output);
}

}  // namespace pare::dist
