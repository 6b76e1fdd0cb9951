// Aggregates a round's client updates U [n, d] into one update [d]: the weighted mean, and the
// robust rules (coordinate median, trimmed mean, Krum, Multi-Krum, Bulyan, FLTrust), and the
// pre-steps (bucketing, nearest-neighbour mixing, norm clipping). Distances, scores and means are
// computed in float64; the update comes back float32.
#include "federated/aggregate.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace pare::federated {

namespace {

// Checks that U is a matrix of updates; returns it detached, on the CPU (no copy when it is there).
at::Tensor checked_updates(const at::Tensor& U, const char* rule) {
  PARE_CHECK(U.defined(), rule, " needs the matrix of client updates U [n, d]: got an undefined tensor");
  PARE_CHECK(U.dim() == 2, rule, " needs the client updates as one matrix U [n, d] (a row per client): got ",
             U.dim(), "-D sizes ", U.sizes());
  PARE_CHECK(U.is_floating_point(), rule, " needs floating-point client updates: got ", U.scalar_type());
  PARE_CHECK(U.size(0) >= 1, rule, " needs at least one client update (n >= 1): got n = 0");
  return U.detach().cpu();
}

std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  return rows;
}

at::Tensor row_f64(const at::Tensor& X, int64_t i) { return X[i].to(at::kDouble); }

// The mean of rows `rows` of X, accumulated in float64.
at::Tensor mean_of_rows(const at::Tensor& X, const std::vector<int64_t>& rows) {
  at::Tensor acc = at::zeros({X.size(1)}, at::kDouble);
  for (int64_t i : rows) acc.add_(row_f64(X, i));
  return acc / static_cast<double>(rows.size());
}

// f, the number of Byzantine clients a rule is asked to tolerate, and the n it needs for that.
void check_byzantine(int64_t n, int64_t f, int64_t per_f, int64_t plus, const char* rule) {
  PARE_CHECK_OPTION(f >= 0, "assume_byzantine", "(the number of Byzantine clients f) must be >= 0, got ", f);
  PARE_CHECK_OPTION(n >= per_f * f + plus, "assume_byzantine", "is too large: ", rule, " needs n >= ", per_f, "f + ",
                    plus, " clients: got n = ", n, " for f = ", f);
}

// Computations over all rows in float64 go over column chunks of this many, so that only
// n x kChunk values are converted at a time.
constexpr int64_t kChunk = int64_t{1} << 16;

// Squared L2 distances between all rows [n, n], in float64, from the Gram matrix (over column
// chunks); its rounding error is about 1e-16 |x|^2, far below the float32 rounding of the updates
// themselves.
at::Tensor pairwise_sq_dists(const at::Tensor& X) {
  const int64_t n = X.size(0), d = X.size(1);
  at::Tensor G = at::zeros({n, n}, at::kDouble);
  for (int64_t c = 0; c < d; c += kChunk) {
    at::Tensor part = X.narrow(1, c, std::min(kChunk, d - c)).to(at::kDouble);
    G.addmm_(part, part.t());
  }
  at::Tensor sq = G.diagonal();
  // |x|^2 + |y|^2 - 2 x.y can round to just below 0 for (near-)equal rows.
  at::Tensor D = (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * G).clamp_min(0);
  D.fill_diagonal_(0);
  return D;
}

// Krum scores among the rows `rows` only (D: all pairwise squared distances): for each, the sum
// of its max(0, n' - f - 2) smallest distances to the others, n' = rows.size().
std::vector<double> krum_scores_among(const at::Tensor& D, const std::vector<int64_t>& rows, int64_t f) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t k = std::max<int64_t>(0, n - f - 2);
  auto dist = D.accessor<double, 2>();
  std::vector<double> scores(rows.size()), others;
  for (int64_t i = 0; i < n; ++i) {
    others.clear();
    for (int64_t j = 0; j < n; ++j)
      if (j != i) others.push_back(dist[rows[i]][rows[j]]);
    std::partial_sort(others.begin(), others.begin() + k, others.end());
    scores[i] = std::accumulate(others.begin(), others.begin() + k, 0.0);
  }
  return scores;
}

// Positions ordered by ascending score, ties by lower position.
std::vector<int64_t> by_score(const std::vector<double>& scores) {
  std::vector<int64_t> order = all_rows(static_cast<int64_t>(scores.size()));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
  return order;
}

// Per column of the sorted values [m, d]: the median (for even m the mean of the middle two), float64.
at::Tensor median_of_sorted(const at::Tensor& sorted) {
  const int64_t m = sorted.size(0);
  if (m % 2) return sorted[m / 2].to(at::kDouble);
  return (sorted[m / 2 - 1].to(at::kDouble) + sorted[m / 2].to(at::kDouble)) / 2;
}

}  // namespace

Aggregate fedavg(const at::Tensor& U, const std::vector<double>& weights) {
  at::Tensor X = checked_updates(U, "FedAvg");
  const int64_t n = X.size(0);
  PARE_CHECK(static_cast<int64_t>(weights.size()) == n, "FedAvg needs one weight per client: got ", weights.size(),
             " weights for n = ", n, " clients");
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    PARE_CHECK(std::isfinite(weights[i]) && weights[i] >= 0,
               "FedAvg weights (the clients' sample counts) must be finite and >= 0: weight ", i, " is ",
               weights[i]);
    sum += weights[i];
  }
  PARE_CHECK(sum > 0, "FedAvg weights (the clients' sample counts) must have a positive sum: got ", sum);
  at::Tensor acc = at::zeros({X.size(1)}, at::kDouble);
  for (int64_t i = 0; i < n; ++i)
    if (weights[i] > 0) acc.add_(row_f64(X, i), weights[i]);
  return {(acc / sum).to(at::kFloat), all_rows(n), {}};
}

Aggregate coordinate_median(const at::Tensor& U) {
  at::Tensor X = checked_updates(U, "the coordinate-wise median");
  // Sorting is exact in any dtype; only the even-n mean needs float64. For even n this is the
  // mean of the two middle values (numpy.median), not the lower one (at::median).
  at::Tensor med = median_of_sorted(std::get<0>(X.sort(0)));
  return {med.to(at::kFloat), all_rows(X.size(0)), {}};
}

Aggregate trimmed_mean(const at::Tensor& U, int64_t trim) {
  at::Tensor X = checked_updates(U, "the trimmed mean");
  const int64_t n = X.size(0);
  PARE_CHECK_OPTION(trim >= 0, "trim", "(values dropped at each end per coordinate) must be >= 0, got ", trim);
  PARE_CHECK_OPTION(n > 2 * trim, "trim", "is too large: the trimmed mean needs n > 2 * trim clients: got n = ",
                    n, " for trim = ", trim);
  at::Tensor kept = std::get<0>(X.sort(0)).narrow(0, trim, n - 2 * trim);
  at::Tensor mean = kept.sum(0, /*keepdim=*/false, at::kDouble) / static_cast<double>(n - 2 * trim);
  return {mean.to(at::kFloat), all_rows(n), {}};
}

at::Tensor krum_scores(const at::Tensor& U, int64_t f) {
  at::Tensor X = checked_updates(U, "Krum");
  PARE_CHECK_OPTION(f >= 0, "assume_byzantine", "(the number of Byzantine clients f) must be >= 0, got ", f);
  std::vector<double> scores = krum_scores_among(pairwise_sq_dists(X), all_rows(X.size(0)), f);
  return at::tensor(scores, at::kDouble);
}

Aggregate krum(const at::Tensor& U, int64_t f) {
  at::Tensor X = checked_updates(U, "Krum");
  check_byzantine(X.size(0), f, 2, 3, "Krum");
  std::vector<double> scores = krum_scores_among(pairwise_sq_dists(X), all_rows(X.size(0)), f);
  const int64_t best = by_score(scores).front();
  return {X[best].to(at::kFloat), {best}, scores};
}

Aggregate multi_krum(const at::Tensor& U, int64_t f, int64_t m) {
  at::Tensor X = checked_updates(U, "Multi-Krum");
  const int64_t n = X.size(0);
  check_byzantine(n, f, 2, 3, "Multi-Krum");
  PARE_CHECK_OPTION(m >= 1 && m <= n, "multi_krum_m",
                    "(the rows Multi-Krum averages) must lie in [1, n]: got m = ", m, " for n = ", n, " clients");
  std::vector<double> scores = krum_scores_among(pairwise_sq_dists(X), all_rows(n), f);
  std::vector<int64_t> order = by_score(scores);
  order.resize(static_cast<size_t>(m));
  return {mean_of_rows(X, order).to(at::kFloat), order, scores};
}

Aggregate bulyan(const at::Tensor& U, int64_t f) {
  at::Tensor X = checked_updates(U, "Bulyan");
  const int64_t n = X.size(0);
  check_byzantine(n, f, 4, 3, "Bulyan");
  const int64_t theta = n - 2 * f, beta = theta - 2 * f;
  // The distances do not change as rows are taken out: compute them once, re-score each round.
  const at::Tensor D = pairwise_sq_dists(X);
  std::vector<double> first_scores;
  std::vector<int64_t> left = all_rows(n), selected;
  while (static_cast<int64_t>(selected.size()) < theta) {
    std::vector<double> scores = krum_scores_among(D, left, f);
    if (first_scores.empty()) first_scores = scores;
    // `left` stays in ascending order, so the lowest position is also the lowest row index.
    const int64_t pos = by_score(scores).front();
    selected.push_back(left[pos]);
    left.erase(left.begin() + pos);
  }
  // Per coordinate: the beta values closest to the median of the theta selected ones (ties: the
  // smaller value first, as the values are sorted before the stable sort by distance).
  at::Tensor sorted = std::get<0>(X.index_select(0, at::tensor(selected, at::kLong)).sort(0));
  at::Tensor dev = (sorted.to(at::kDouble) - median_of_sorted(sorted)).abs();
  at::Tensor nearest = std::get<1>(dev.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false)).narrow(0, 0, beta);
  at::Tensor update = sorted.gather(0, nearest).sum(0, /*keepdim=*/false, at::kDouble) / static_cast<double>(beta);
  return {update.to(at::kFloat), selected, first_scores};
}

Aggregate fltrust(const at::Tensor& U, const at::Tensor& g0) {
  at::Tensor X = checked_updates(U, "FLTrust");
  const int64_t n = X.size(0), d = X.size(1);
  PARE_CHECK(g0.defined() && g0.is_floating_point(),
             "FLTrust needs the server's update g0 as a floating-point vector: got ",
             g0.defined() ? c10::toString(g0.scalar_type()) : "an undefined tensor");
  PARE_CHECK(g0.dim() == 1 && g0.size(0) == d, "FLTrust needs the server's update g0 of size d = ", d,
             " (one value per column of U): got sizes ", g0.sizes());
  at::Tensor g = g0.detach().to(at::kCPU, at::kDouble);
  const double g_norm = g.norm().item<double>();
  std::vector<double> scores(static_cast<size_t>(n), 0.0);
  std::vector<int64_t> selected;
  at::Tensor acc = at::zeros({d}, at::kDouble);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor u = row_f64(X, i);
    const double norm = u.norm().item<double>();
    // A row of norm 0, or any row when |g0| = 0, has no direction: trust 0 rather than 0 / 0.
    if (norm == 0 || g_norm == 0) continue;
    scores[i] = std::max(0.0, u.dot(g).item<double>() / (norm * g_norm));
    if (scores[i] == 0) continue;
    selected.push_back(i);
    acc.add_(u, scores[i] * g_norm / norm);  // rescaled to |g0|, weighted by its trust
    total += scores[i];
  }
  if (total == 0) return {at::zeros({d}, at::kFloat), selected, scores};
  return {(acc / total).to(at::kFloat), selected, scores};
}

Buckets bucket_rows(const at::Tensor& U, int64_t s, uint64_t seed) {
  at::Tensor X = checked_updates(U, "bucketing");
  PARE_CHECK_OPTION(s >= 1, "bucket", "(rows per bucket) must be >= 1, got ", s);
  const int64_t n = X.size(0), buckets = bucket_count(n, s);
  std::vector<int64_t> order = all_rows(n);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  Buckets b;
  b.means = at::empty({buckets, X.size(1)}, at::kFloat);
  for (int64_t k = 0; k < buckets; ++k) {
    std::vector<int64_t> rows(order.begin() + k * s, order.begin() + std::min(n, (k + 1) * s));
    std::sort(rows.begin(), rows.end());
    b.means[k].copy_(mean_of_rows(X, rows));
    b.members.push_back(std::move(rows));
  }
  return b;
}

at::Tensor mix_nearest(const at::Tensor& U, int64_t f) {
  at::Tensor X = checked_updates(U, "nearest-neighbour mixing");
  const int64_t n = X.size(0), k = n - f;
  check_byzantine(n, f, 2, 1, "nearest-neighbour mixing");
  at::Tensor D = pairwise_sq_dists(X);
  auto dist = D.accessor<double, 2>();
  // W [n, n]: row i puts 1/k on the k rows nearest to row i (itself first: its distance is 0).
  at::Tensor W = at::zeros({n, n}, at::kDouble);
  auto w = W.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> order = all_rows(n);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if ((a == i) != (b == i)) return a == i;
      return dist[i][a] < dist[i][b];
    });
    for (int64_t j = 0; j < k; ++j) w[i][order[j]] = 1.0 / double(k);
  }
  const int64_t d = X.size(1);
  at::Tensor mixed = at::empty({n, d}, at::kFloat);
  for (int64_t c = 0; c < d; c += kChunk) {
    const int64_t len = std::min(kChunk, d - c);
    mixed.narrow(1, c, len).copy_(W.mm(X.narrow(1, c, len).to(at::kDouble)));
  }
  return mixed;
}

int64_t clip_norms(at::Tensor& U, double max_norm) {
  at::Tensor X = checked_updates(U, "norm clipping");
  PARE_CHECK_OPTION(std::isfinite(max_norm) && max_norm > 0, "max_norm", "must be > 0 (an L2 norm), got ", max_norm);
  at::NoGradGuard no_grad;
  int64_t clipped = 0;
  for (int64_t i = 0; i < U.size(0); ++i) {
    const double norm = row_f64(X, i).norm().item<double>();
    if (norm <= max_norm) continue;
    U[i].mul_(max_norm / norm);
    ++clipped;
  }
  return clipped;
}

}  // namespace pare::federated
