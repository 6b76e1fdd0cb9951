// Sensitivity scan: prunes each layer (or channel group) alone at several ratios and evaluates
// the model, giving the table a user needs to choose per-layer ratios or exclusions.
//
//   auto rows = prune::sensitivity_scan(g, prune::ScanOptions().ratios({0.5, 0.9}),
//                                       [&](const core::Graph& p) { return accuracy_of(p); });
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "prune/masks.h"
#include "prune/structured.h"

namespace pare::prune {

struct ScanOptions {
  /// Ratios to try, each in [0, 1].
  ScanOptions& ratios(std::vector<double> v) { ratios_ = std::move(v); return *this; }
  /// Channel groups (true) or single weights by magnitude (false).
  ScanOptions& channels(bool v) { channels_ = v; return *this; }
  ScanOptions& importance(Importance v) { importance_ = v; return *this; }
  /// Layers left out of the scan (and, for channels, kept whole).
  ScanOptions& exclude(std::vector<std::string> v) { exclude_ = std::move(v); return *this; }

  std::vector<double> ratios_ = {0.25, 0.5, 0.75, 0.9};
  bool channels_ = false;
  Importance importance_ = Importance::kL1;
  std::vector<std::string> exclude_;
};

struct SensitivityRow {
  std::string layer;  ///< node (magnitude) or the group's first source node (channels)
  double ratio = 0;
  double metric = 0;  ///< what `evaluate` returned
  int64_t params = 0; ///< parameters of the pruned model (channels), non-zero weights of the layer (magnitude)
};

/// Calls `evaluate` on `g` pruned at each layer alone at each ratio. Throws InputError for a
/// ratio outside [0, 1] or an unknown excluded name.
std::vector<SensitivityRow> sensitivity_scan(const core::Graph& g, const ScanOptions& opts,
                                             const std::function<double(const core::Graph&)>& evaluate);

/// Rows as a JSON array of {layer, ratio, metric, params}.
nlohmann::json to_json(const std::vector<SensitivityRow>& rows);
/// The table: one line per layer, one column per ratio.
std::string to_text(const std::vector<SensitivityRow>& rows, const std::string& metric_name);

}  // namespace pare::prune
