// Sensitivity scan: each layer (or channel group) pruned alone at several ratios, evaluated.
#include "prune/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "prune/facets.h"

namespace pare::prune {

std::vector<SensitivityRow> sensitivity_scan(const core::Graph& g, const ScanOptions& opts,
                                             const std::function<double(const core::Graph&)>& evaluate) {
  for (double r : opts.ratios_)
    PARE_CHECK_OPTION(std::isfinite(r) && r >= 0 && r <= 1, "ratios", "must each lie in [0, 1], got ", r);
  std::vector<SensitivityRow> rows;
  if (!opts.channels_) {
    auto targets = find_targets(g, opts.exclude_);
    for (const auto& t : targets)
      for (double r : opts.ratios_) {
        core::Graph p = g;
        apply_masks(p, compute_masks(lookup_in(p), {t}, MaskOptions().sparsity(r)));
        rows.push_back({t.node, r, evaluate(p), p.initializers.at(t.weight).count_nonzero().item<int64_t>()});
      }
    return rows;
  }
  ChannelGraph cg(g, {opts.exclude_.begin(), opts.exclude_.end()});
  std::vector<std::string> heads;  // one node per prunable group
  for (const auto& gi : cg.groups())
    if (!gi.blocked && !gi.sources.empty()) heads.push_back(gi.sources.front());
  for (size_t i = 0; i < heads.size(); ++i)
    for (double r : opts.ratios_) {
      std::vector<std::string> ex = opts.exclude_;
      for (size_t j = 0; j < heads.size(); ++j)
        if (j != i) ex.push_back(heads[j]);
      SensitivityRow row{heads[i], r, 0, 0};
      try {
        auto res = prune_channels(g, ChannelOptions().sparsity(r).importance(opts.importance_).exclude(ex));
        row.metric = evaluate(res.graph);
        row.params = res.graph.parameter_count();
      } catch (const InputError&) {
        row.metric = std::nan("");  // the ratio would remove every channel of this group
      }
      rows.push_back(row);
    }
  return rows;
}

nlohmann::json to_json(const std::vector<SensitivityRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json m = std::isnan(r.metric) ? nlohmann::json(nullptr) : nlohmann::json(r.metric);
    j.push_back({{"layer", r.layer}, {"ratio", r.ratio}, {"metric", m}, {"params", r.params}});
  }
  return j;
}

std::string to_text(const std::vector<SensitivityRow>& rows, const std::string& metric_name) {
  std::vector<std::string> layers;
  std::vector<double> ratios;
  std::map<std::pair<std::string, double>, double> v;
  for (const auto& r : rows) {
    if (std::find(layers.begin(), layers.end(), r.layer) == layers.end()) layers.push_back(r.layer);
    if (std::find(ratios.begin(), ratios.end(), r.ratio) == ratios.end()) ratios.push_back(r.ratio);
    v[{r.layer, r.ratio}] = r.metric;
  }
  size_t w = 5;
  for (auto& l : layers) w = std::max(w, l.size());
  std::string out = metric_name + " with one layer pruned:\n";
  char buf[64];
  out += std::string("layer") + std::string(w - 5, ' ');
  for (double r : ratios) {
    std::snprintf(buf, sizeof buf, "  %6.0f%%", r * 100);
    out += buf;
  }
  out += "\n";
  for (auto& l : layers) {
    out += l + std::string(w - l.size(), ' ');
    for (double r : ratios) {
      double m = v[{l, r}];
      if (std::isnan(m)) std::snprintf(buf, sizeof buf, "  %7s", "-");
      else std::snprintf(buf, sizeof buf, "  %6.2f%%", m * 100);
      out += buf;
    }
    out += "\n";
  }
  return out;
}

}  // namespace pare::prune
