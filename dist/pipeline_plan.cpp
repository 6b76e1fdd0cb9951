// Pipeline stages (pipeline_stage): the topologically sorted graph cut into one stage per rank,
// balanced by FLOPs and weight bytes, preferring cuts where few activation bytes cross.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/summary.h"
#include "dist/shard.h"
#include "dist/shard_internal.h"

namespace pare::dist {
namespace {

using core::Graph;
using detail::mb;
using detail::prod;

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

// What the cuts weigh: each node's FLOPs (at batch 1) and the weight bytes it is the first to read,
// and each value's span.
void measure(PipelinePlan& p) {
  const size_t n = p.g.nodes.size();
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
}

// The ranks + 1 cut points of a measure()d plan: stage k ends near k/ranks of the total cost, where
// few activation bytes cross, with no stage over `max_stage_bytes` of weights (when > 0).
std::vector<size_t> choose_cuts(const PipelinePlan& p, int ranks, int64_t max_stage_bytes) {
  const size_t n = p.g.nodes.size();
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
  std::vector<size_t> cuts = {0};
  for (int k = 1; k < ranks; ++k) {
    const double target = per_stage * k;
    size_t best = 0;
    double best_score = 0;
    for (size_t i = cuts.back() + 1; i + (ranks - k) <= n; ++i) {
      // Within the memory limit: this stage, and the rest in the stages left.
      if (too_big(cuts.back(), i, 1) || too_big(i, n, ranks - k)) continue;
      // Off-balance by more than a tenth of a stage costs more than any boundary saves.
      const double off = std::abs(before[i] - target) / per_stage;
      const double score = off + (off <= 0.1 ? 0 : 10) +
                           1e-12 * static_cast<double>(p.bytes_per_sample(p.crossing(i)));
      if (best == 0 || score < best_score) best = i, best_score = score;
    }
    PARE_CHECK(best != 0, "model '", p.g.name, "': no cut between nodes keeps every pipeline stage's weights within ",
               mb(max_stage_bytes), " (one node's weights may be larger)");
    cuts.push_back(best);
  }
  cuts.push_back(n);
  PARE_CHECK(!too_big(cuts[ranks - 1], n, 1), "model '", p.g.name, "': no cut between nodes keeps every pipeline "
             "stage's weights within ", mb(max_stage_bytes));
  return cuts;
}

PipelinePlan plan_pipeline(const Graph& graph, int ranks, int64_t max_stage_bytes) {
  PipelinePlan p;
  p.g = detail::prepare(graph);
  const size_t n = p.g.nodes.size();
  PARE_CHECK(n >= static_cast<size_t>(ranks), "model '", p.g.name, "' has ", n, " nodes, too few for ",
             ranks, " pipeline stages");
  p.values = core::probe_values(p.g, 1);
  measure(p);
  p.cuts = choose_cuts(p, ranks, max_stage_bytes);
  return p;
}

// Stage `k` of the plan: its nodes with the weights they read; its inputs and outputs are the values
// that cross its cuts (the graph's own for the first and last stage).
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

}  // namespace pare::dist
