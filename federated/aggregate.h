// Robust aggregation of client updates. Every aggregator takes the round's updates as one matrix
// U [n, d] (row i: client i's update, flattened over the model's parameters in one fixed order,
// float32, CPU) and returns the aggregated update [d] with the clients it used. Each function
// states how many Byzantine (arbitrarily bad) clients f it tolerates, and throws InputError
// naming the option when n is too small for the f it was given.
//
//   at::Tensor U = at::stack(rows);                // n client updates
//   clip_norms(U, 5.0);                            // optional pre-steps for any aggregator
//   U = bucket_rows(U, /*s=*/2, seed).means;       // (the server maps buckets back to clients)
//   U = mix_nearest(U, /*f=*/2);                   // or: each row becomes its neighbourhood's mean
//   Aggregate a = multi_krum(U, /*f=*/2, /*m=*/6);
//   global += a.update;
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace pare::federated {

/// What an aggregator made of one round.
struct Aggregate {
  at::Tensor update;              ///< [d], float32
  std::vector<int64_t> selected;  ///< rows that entered the result (all rows for FedAvg / median / trimmed mean)
  std::vector<double> scores;     ///< per row: Krum score, FLTrust trust score; empty for the others
};

/// Weighted mean of the rows (weights: each client's sample count; all >= 0, sum > 0).
/// Tolerates no Byzantine client: one row can move the result anywhere (breakdown point 0).
Aggregate fedavg(const at::Tensor& U, const std::vector<double>& weights);

/// Coordinate-wise median (for even n the mean of the two middle values, as numpy.median).
/// Tolerates f < n/2 per coordinate.
Aggregate coordinate_median(const at::Tensor& U);

/// Coordinate-wise trimmed mean: per coordinate drops the `trim` largest and `trim` smallest
/// values and averages the n - 2*trim others (Yin et al. 2018). Tolerates f <= trim; needs
/// n > 2*trim.
Aggregate trimmed_mean(const at::Tensor& U, int64_t trim);

/// Krum scores (Blanchard et al. 2017): for row i, the sum of squared L2 distances to its
/// n - f - 2 nearest other rows (at least 0 neighbours). Returns [n] float64.
at::Tensor krum_scores(const at::Tensor& U, int64_t f);

/// Krum: the row with the lowest score (ties: the lowest index). Tolerates f with n >= 2f + 3.
Aggregate krum(const at::Tensor& U, int64_t f);

/// Multi-Krum: the mean of the m rows with the lowest scores, computed once (ties: lower index
/// first). Tolerates f with n >= 2f + 3; needs 1 <= m <= n.
Aggregate multi_krum(const at::Tensor& U, int64_t f, int64_t m);

/// Bulyan (El Mhamdi et al. 2018): selects theta = n - 2f rows by Krum applied repeatedly (each
/// time to the rows not yet selected, with the same f and max(0, n' - f - 2) neighbours), then per
/// coordinate averages the beta = theta - 2f selected values closest to their median.
/// Tolerates f with n >= 4f + 3 (checked).
Aggregate bulyan(const at::Tensor& U, int64_t f);

/// FLTrust (Cao et al. 2021): the server's own update g0 [d], computed on its clean root data set,
/// sets the direction. Row i gets trust TS_i = ReLU(cos(U_i, g0)) and is rescaled to g0's norm;
/// the result is sum_i TS_i * U_i * |g0| / |U_i| / sum_i TS_i (zeros when every TS_i is 0, and
/// rows of norm 0 get trust 0). Tolerates any number of Byzantine clients as long as the root set
/// is clean and representative. scores = the TS_i.
Aggregate fltrust(const at::Tensor& U, const at::Tensor& g0);

/// Rows grouped at random into buckets (see bucket_rows).
struct Buckets {
  at::Tensor means;                           ///< [ceil(n / s), d], float32: each bucket's mean
  std::vector<std::vector<int64_t>> members;  ///< per bucket, its rows of U (ascending)
};

/// Bucketing (Karimireddy, He & Jaggi 2022), a pre-step for any robust aggregator on non-IID
/// clients: permutes the n rows at random (`seed`), cuts them into ceil(n / s) buckets of s (the
/// last one smaller when s does not divide n) and returns the buckets' means. A Byzantine row
/// spoils only its own bucket, so f Byzantine rows spoil at most f of the ceil(n / s) means,
/// while the means of honest rows lie closer together than the rows: the aggregator then runs on
/// the means, with f unchanged and n = ceil(n / s). Needs s >= 1 (s = 1: the rows, permuted).
Buckets bucket_rows(const at::Tensor& U, int64_t s, uint64_t seed);

/// How many rows the aggregator sees after bucketing n rows in buckets of s: ceil(n / s), or n
/// when s <= 1 (no bucketing).
inline int64_t bucket_count(int64_t n, int64_t s) { return s > 1 ? (n + s - 1) / s : n; }

/// Nearest-neighbour mixing, NNM (Allouah et al. 2023, "Fixing by Mixing"), a pre-step for any
/// robust aggregator on non-IID clients: row i becomes the mean of the n - f rows nearest to it in
/// L2 (itself included; ties: the lower index). An honest row's n - f nearest rows are mostly
/// honest ones, so after mixing the honest rows lie much closer to the honest mean, and the f
/// Byzantine rows are pulled towards it as well; the rule then runs on the n mixed rows with the
/// same f (with NNM, median, trimmed mean and Krum reach the optimal error under heterogeneity).
/// Rows stay in client order. Needs n >= 2f + 1; f = 0 gives every row the plain mean.
at::Tensor mix_nearest(const at::Tensor& U, int64_t f);

/// Norm clipping, a pre-step for any aggregator: scales each row with L2 norm above `max_norm`
/// down to `max_norm` (in place). Returns the number of rows it clipped. Needs max_norm > 0.
int64_t clip_norms(at::Tensor& U, double max_norm);

}  // namespace pare::federated
