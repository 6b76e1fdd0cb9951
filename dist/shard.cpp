// Teacher sharding, what its files share: the graph prepared for either kind of sharding, sizes
// for messages, and the report's text. The files are listed in dist/shard_internal.h.
#include "dist/shard.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "dist/shard_internal.h"

namespace pare::dist {
namespace detail {

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

core::Graph prepare(const core::Graph& g) {
  PARE_CHECK(g.inputs.size() == 1 && !g.outputs.empty(), "model '", g.name,
             "' must have one input and at least one output to be sharded; it has ", g.inputs.size(),
             " input(s) and ", g.outputs.size(), " output(s)");
  core::Graph r = g;
  r.topo_sort();
  r.verify();
  core::bypass_constant_identities(r);
  return r;
}

}  // namespace detail

using detail::mb;

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

}  // namespace pare::dist
