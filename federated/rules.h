// The aggregation rules by name, as the server and the command line choose them: each rule's
// precondition (the fewest rows it needs for f Byzantine ones: n >= 2f + 3 for Krum, 4f + 3 for
// Bulyan) and how it runs, with the pre-steps every rule may take (norm clipping, bucketing,
// nearest-neighbour mixing). The arithmetic of each rule lives in federated/aggregate.h.
//
//   federated::AggregatorOptions o;
//   o.name = "multi-krum"; o.assume_byzantine = 2; o.clip_norm = 5;
//   o.validate();
//   check_round_size(o, 10);                    // InputError: too few answers for the rule's f
//   Aggregate a = aggregate(o, at::stack(rows), weights, {});
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "federated/aggregate.h"

namespace pare::federated {

/// The aggregators by name, for the command line: "fedavg", "median", "trimmed-mean", "krum",
/// "multi-krum", "bulyan", "fltrust".
const std::vector<std::string>& aggregator_names();

/// Which aggregator runs and what it assumes.
struct AggregatorOptions {
  std::string name = "fedavg";  ///< one of aggregator_names()
  int64_t assume_byzantine = 0;  ///< f, the Byzantine clients Krum, Multi-Krum, Bulyan assume per round
  double trim = 0.2;            ///< trimmed mean: the fraction of values cut at each end (floor(trim * n))
  int64_t multi_krum_m = 0;     ///< Multi-Krum: rows averaged (0: n - f)
  double clip_norm = 0;         ///< norm clipping before any aggregator (0: none)
  int64_t bucket = 0;           ///< bucketing after clipping: the rule runs on the means of random groups of this many (0, 1: none)
  bool nnm = false;             ///< nearest-neighbour mixing after clipping (mix_nearest with f = assume_byzantine; not with bucket)
  /// Throws InputError naming the option for an unknown name or a value out of range.
  void validate() const;
};

/// Throws InputError naming assume_byzantine when a round of `answers` updates (after bucketing:
/// ceil(answers / bucket) rows) is too small for the rule's f (with nnm, n >= 2f + 1 as well).
void check_round_size(const AggregatorOptions& o, int64_t answers);

/// Aggregates the round's updates U [n, d] (rows in client order; `weights`: their sample counts;
/// `g0`: FLTrust's server update, undefined for the others). Clips first when clip_norm > 0 and
/// stores the number of clipped rows in `clipped`; with nnm, runs the rule on
/// mix_nearest(U, assume_byzantine) (rows stay clients); else, when bucket > 1, runs the rule on
/// bucket_rows(U, bucket, seed) (a bucket's weight: the sum of its rows'), and reports in rows:
/// `selected` holds every row of a selected bucket, and `scores` (when the rule has them) gives
/// each row its bucket's score.
Aggregate aggregate(const AggregatorOptions& o, at::Tensor U, const std::vector<double>& weights,
                    const at::Tensor& g0, int64_t* clipped = nullptr, uint64_t seed = 0);

/// The options in words, for logs: "median (f = 4, nearest-neighbour mixing)".
std::string describe(const AggregatorOptions& o);

}  // namespace pare::federated
