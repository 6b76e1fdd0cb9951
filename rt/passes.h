// pare_rt's load-time graph passes, as one table (in the manner of ONNX Runtime's graph
// transformers): each pass is a small function with a name and a one-line summary that rewrites
// the graph in place and says whether it changed anything. build_graph (graph.cpp) runs the table
// in order; Model::report() lists the passes that changed the graph (`pare run --engine rt -v`).
// Adding a pass: write `bool my_pass(Graph&, LoweringReport&)` in passes.cpp, add its row where it
// belongs in the order, and give it a before/after test in tests/rt/passes_test.cpp. Not installed.
#pragma once

#include <string>
#include <vector>

#include "rt/internal.h"

namespace pare::rt {

/// One load-time rewrite of the graph.
struct Pass {
  const char* name;     ///< snake_case, as -v prints it
  const char* summary;  ///< one line: what it rewrites into what
  bool int8_only;       ///< runs only when Options::int8 lowers QDQ patterns
  /// Rewrites `g` in place; notes and refusals go to `rep`. True when it changed the graph.
  bool (*run)(Graph& g, LoweringReport& rep);
};

/// The passes, in the order they run.
const std::vector<Pass>& graph_passes();

/// The first pass of that name (for tests); throws InternalError when there is none.
const Pass& find_pass(const std::string& name);

/// Runs the table on `g`, skipping int8-only passes unless `opts` lowers QDQ; appends the name of
/// every pass that changed the graph to `rep.passes`.
void run_passes(Graph& g, const Options& opts, LoweringReport& rep);

}  // namespace pare::rt
