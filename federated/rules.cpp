#include "federated/rules.h"

#include <algorithm>

#include "core/error.h"

namespace pare::federated {

namespace {
// The aggregators by name: the fewest rows each needs for f Byzantine ones, and how it runs on
// the (already clipped) rows U.
struct Rule {
  const char* name;
  int64_t (*needs)(int64_t f);
  Aggregate (*run)(const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>& w, const at::Tensor& g0);
};

int64_t needs_one(int64_t) { return 1; }
int64_t needs_krum(int64_t f) { return 2 * f + 3; }

const Rule kRules[] = {
    {"fedavg", needs_one, [](const AggregatorOptions&, const at::Tensor& U, const std::vector<double>& w,
                             const at::Tensor&) { return fedavg(U, w); }},
    {"median", needs_one, [](const AggregatorOptions&, const at::Tensor& U, const std::vector<double>&,
                             const at::Tensor&) { return coordinate_median(U); }},
    {"trimmed-mean", needs_one,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       return trimmed_mean(U, int64_t(o.trim * double(U.size(0))));
     }},
    {"krum", needs_krum, [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&,
                            const at::Tensor&) { return krum(U, o.assume_byzantine); }},
    {"multi-krum", needs_krum,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       const int64_t n = U.size(0);
       return multi_krum(U, o.assume_byzantine, o.multi_krum_m > 0 ? std::min(o.multi_krum_m, n) : n - o.assume_byzantine);
     }},
    {"bulyan", [](int64_t f) -> int64_t { return 4 * f + 3; },
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       return bulyan(U, o.assume_byzantine);
     }},
    {"fltrust", needs_one,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor& g0) {
       PARE_ASSERT(g0.defined(), "FLTrust without a server update");
       // The server's own update is clipped like the clients' (FLTrust then rescales to its norm).
       const double scale = o.clip_norm > 0 ? std::min(1.0, o.clip_norm / std::max(1e-30, g0.norm().item<double>())) : 1.0;
       return fltrust(U, g0 * scale);
     }},
};

const Rule& rule_of(const std::string& name) {
  for (const Rule& r : kRules)
    if (name == r.name) return r;
  throw InputError("unknown aggregator '" + name + "'");
}
}  // namespace

const std::vector<std::string>& aggregator_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Rule& r : kRules) v.push_back(r.name);
    return v;
  }();
  return names;
}

void AggregatorOptions::validate() const {
  const auto& names = aggregator_names();
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  PARE_CHECK_OPTION(std::find(names.begin(), names.end(), name) != names.end(), "aggregator", "must be one of ",
                    list, ", got '", name, "'");
  PARE_CHECK_OPTION(assume_byzantine >= 0, "assume_byzantine", "must be >= 0, got ", assume_byzantine);
  PARE_CHECK_OPTION(trim >= 0 && trim < 0.5, "trim", "must be in [0, 0.5), got ", trim);
  PARE_CHECK_OPTION(multi_krum_m >= 0, "multi_krum_m", "must be >= 0, got ", multi_krum_m);
  PARE_CHECK_OPTION(clip_norm >= 0, "clip_norm", "must be >= 0, got ", clip_norm);
  PARE_CHECK_OPTION(bucket >= 0, "bucket", "must be >= 0 (0, 1: no bucketing), got ", bucket);
  PARE_CHECK_OPTION(!nnm || bucket <= 1, "nnm", "(nearest-neighbour mixing) and bucketing are two ways to do the same: "
                    "use one, got bucket ", bucket);
}

Aggregate aggregate(const AggregatorOptions& o, at::Tensor U, const std::vector<double>& weights, const at::Tensor& g0,
                    int64_t* clipped, uint64_t seed) {
  const Rule& rule = rule_of(o.name);
  const int64_t n_clipped = o.clip_norm > 0 ? clip_norms(U, o.clip_norm) : 0;
  if (clipped) *clipped = n_clipped;
  if (o.nnm) return rule.run(o, mix_nearest(U, o.assume_byzantine), weights, g0);
  if (o.bucket <= 1) return rule.run(o, U, weights, g0);
  const Buckets b = bucket_rows(U, o.bucket, seed);
  std::vector<double> bucket_weights;
  for (const auto& rows : b.members) {
    double w = 0;
    for (int64_t i : rows) w += weights.at(size_t(i));
    bucket_weights.push_back(w);
  }
  Aggregate a = rule.run(o, b.means, bucket_weights, g0);
  Aggregate out{a.update, {}, {}};
  for (int64_t k : a.selected) out.selected.insert(out.selected.end(), b.members[k].begin(), b.members[k].end());
  std::sort(out.selected.begin(), out.selected.end());
  if (!a.scores.empty()) {
    out.scores.resize(size_t(U.size(0)));
    for (size_t k = 0; k < b.members.size(); ++k)
      for (int64_t i : b.members[k]) out.scores[size_t(i)] = a.scores[k];
  }
  return out;
}

std::string describe(const AggregatorOptions& o) {
  std::vector<std::string> parts;
  // A rule uses f when the rows it needs depend on it (Krum, Multi-Krum, Bulyan).
  if (rule_of(o.name).needs != needs_one || o.nnm)
    parts.push_back("f = " + std::to_string(o.assume_byzantine));
  if (o.name == "trimmed-mean") parts.push_back(detail::concat("trim ", o.trim));
  if (o.clip_norm > 0) parts.push_back(detail::concat("clip norm ", o.clip_norm));
  if (o.nnm) parts.push_back("nearest-neighbour mixing");
  if (o.bucket > 1) parts.push_back("buckets of " + std::to_string(o.bucket));
  std::string s = o.name;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : " (") + parts[i];
  return parts.empty() ? s : s + ")";
}

void check_round_size(const AggregatorOptions& agg, int64_t answers) {
  // With bucketing the rule sees ceil(n / bucket) rows, f of which may be spoilt.
  const int64_t f = agg.assume_byzantine;
  const int64_t n = bucket_count(answers, agg.bucket);
  const int64_t need = std::max(rule_of(agg.name).needs(f), agg.nnm ? 2 * f + 1 : 1);
  PARE_CHECK_OPTION(n >= need, "assume_byzantine", "is too large for ", answers, " clients per round",
                    agg.bucket > 1 ? " in buckets of " + std::to_string(agg.bucket) + " (" + std::to_string(n) + " rows)" : "",
                    ": ", agg.name, agg.nnm ? " with nearest-neighbour mixing" : "", " needs n >= ", need, " for f = ", f);
}

}  // namespace pare::federated
