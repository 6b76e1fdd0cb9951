// Divides a data set's sample indices among federated clients: IID, Dirichlet label skew, or
// label-sorted shards, each deterministic in its seed; and parses the spec that names one.
#include "federated/split.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "core/error.h"

namespace pare::federated {

namespace {

// A uniform draw in [0, bound) by rejection from the raw generator: unlike
// std::uniform_int_distribution and std::shuffle, the same on every standard library.
uint64_t below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % bound;
  uint64_t r;
  do r = rng();
  while (r >= limit);
  return r % bound;
}

// Fisher-Yates.
template <class T>
void shuffle_in_place(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(rng, i)]);
}

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

void check_clients(int64_t clients, int64_t n) {
  PARE_CHECK_OPTION(clients >= 1, "clients", "must be at least 1, got ", clients);
  PARE_CHECK_OPTION(clients <= n, "clients", "must be at most the number of samples (one each at least): got ",
                    clients, " clients for ", n, " samples");
}

// The labels as int64 values >= 0.
std::vector<int64_t> label_values(const at::Tensor& labels, const char* split) {
  PARE_CHECK(labels.defined() && labels.dim() == 1, split, " needs the labels as a vector [n]: got ",
             labels.defined() ? detail::concat("sizes ", labels.sizes()) : "an undefined tensor");
  PARE_CHECK(!labels.is_floating_point() && !labels.is_complex() && labels.scalar_type() != at::kBool, split,
             " needs integer class labels: got ", labels.scalar_type());
  at::Tensor y = labels.detach().to(at::kCPU, at::kLong).contiguous();
  std::vector<int64_t> v(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + y.numel());
  for (size_t i = 0; i < v.size(); ++i)
    PARE_CHECK(v[i] >= 0, split, " needs class labels >= 0: label of sample ", i, " is ", v[i]);
  return v;
}

void sort_each(Split& s) {
  for (auto& c : s) std::sort(c.begin(), c.end());
}

// One Dirichlet draw of the split: class by class, the shuffled samples cut at the cumulative
// proportions.
Split dirichlet_once(const std::vector<std::vector<int64_t>>& by_class, int64_t clients, double alpha,
                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(alpha, 1.0);
  Split out(static_cast<size_t>(clients));
  std::vector<double> p(static_cast<size_t>(clients));
  for (std::vector<int64_t> idx : by_class) {
    if (idx.empty()) continue;
    shuffle_in_place(idx, rng);
    double sum = 0;
    for (double& x : p) {
      x = gamma(rng);
      sum += x;
    }
    // Every gamma draw underflowing to 0 (tiny alpha): no proportions, so equal ones.
    for (double& x : p) x = sum > 0 ? x / sum : 1.0 / clients;
    const double n_c = static_cast<double>(idx.size());
    double cum = 0;
    size_t begin = 0;
    for (int64_t c = 0; c < clients; ++c) {
      cum += p[c];
      size_t end = c + 1 == clients ? idx.size() : std::min(idx.size(), static_cast<size_t>(std::floor(cum * n_c)));
      end = std::max(end, begin);
      out[c].insert(out[c].end(), idx.begin() + begin, idx.begin() + end);
      begin = end;
    }
  }
  return out;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size();
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

}  // namespace

Split iid_split(int64_t n, int64_t clients, uint64_t seed) {
  PARE_CHECK(n >= 0, "an IID split needs a sample count n >= 0, got ", n);
  check_clients(clients, n);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm = iota_vec(n);
  shuffle_in_place(perm, rng);
  Split out(static_cast<size_t>(clients));
  // The first n % clients parts take one sample more.
  int64_t begin = 0;
  for (int64_t c = 0; c < clients; ++c) {
    const int64_t size = n / clients + (c < n % clients ? 1 : 0);
    out[c].assign(perm.begin() + begin, perm.begin() + begin + size);
    begin += size;
  }
  return out;
}

Split dirichlet_split(const at::Tensor& labels, int64_t clients, double alpha, uint64_t seed, int64_t min_size) {
  std::vector<int64_t> y = label_values(labels, "a Dirichlet split");
  const int64_t n = static_cast<int64_t>(y.size());
  check_clients(clients, n);
  PARE_CHECK_OPTION(std::isfinite(alpha) && alpha > 0, "alpha",
                    "(the Dirichlet concentration) must be finite and > 0, got ", alpha);
  PARE_CHECK_OPTION(min_size >= 0, "min_size", "must be >= 0, got ", min_size);
  PARE_CHECK_OPTION(clients * min_size <= n, "min_size", "cannot be met: ", clients, " clients of at least ",
                    min_size, " samples need ", clients * min_size, " samples, the data set has ", n);
  const int64_t classes = n ? *std::max_element(y.begin(), y.end()) + 1 : 0;
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(classes));
  for (int64_t i = 0; i < n; ++i) by_class[y[i]].push_back(i);
  constexpr int kAttempts = 1000;
  size_t smallest = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Split s = dirichlet_once(by_class, clients, alpha, seed + static_cast<uint64_t>(attempt));
    smallest = s[0].size();
    for (const auto& c : s) smallest = std::min(smallest, c.size());
    if (static_cast<int64_t>(smallest) >= min_size) {
      sort_each(s);
      return s;
    }
  }
  throw InputError(detail::concat("alpha = ", alpha, ", min_size = ", min_size, ": no Dirichlet split in ",
                                  kAttempts, " draws gave each of the ", clients, " clients at least ", min_size,
                                  " of the ", n, " samples (the last draw's smallest client got ", smallest,
                                  "); raise alpha, lower min_size or use fewer clients"))
      .about("alpha")
      .about("min_size");
}

Split shard_split(const at::Tensor& labels, int64_t clients, int64_t shards_per_client, uint64_t seed) {
  std::vector<int64_t> y = label_values(labels, "a shard split");
  const int64_t n = static_cast<int64_t>(y.size());
  check_clients(clients, n);
  PARE_CHECK_OPTION(shards_per_client >= 1, "shards_per_client", "must be at least 1, got ", shards_per_client);
  const int64_t shards = clients * shards_per_client;
  PARE_CHECK_OPTION(shards <= n, "shards_per_client", "is too large: ", clients, " clients x ", shards_per_client,
                    " shards need at least ", shards, " samples (one per shard), the data set has ", n);
  std::vector<int64_t> order = iota_vec(n);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return y[a] < y[b]; });
  std::vector<int64_t> shard_ids = iota_vec(shards);
  std::mt19937_64 rng(seed);
  shuffle_in_place(shard_ids, rng);
  const int64_t size = n / shards;
  Split out(static_cast<size_t>(clients));
  for (int64_t k = 0; k < shards; ++k) {
    const int64_t s = shard_ids[k];
    const int64_t begin = s * size, end = s + 1 == shards ? n : begin + size;
    auto& dst = out[k / shards_per_client];
    dst.insert(dst.end(), order.begin() + begin, order.begin() + end);
  }
  sort_each(out);
  return out;
}

Split split_by_spec(const std::string& spec, const at::Tensor& labels, int64_t clients, uint64_t seed) {
  const std::string kForms = "iid, dirichlet:ALPHA (ALPHA > 0) or shards:K (K >= 1 shards per client)";
  if (spec == "iid") {
    PARE_CHECK(labels.defined() && labels.dim() == 1, "split spec 'iid' needs the labels as a vector [n]: got ",
               labels.defined() ? detail::concat("sizes ", labels.sizes()) : "an undefined tensor");
    return iid_split(labels.size(0), clients, seed);
  }
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (colon != std::string::npos && kind == "dirichlet") {
    double alpha = 0;
    PARE_CHECK(parse_double(arg, &alpha) && std::isfinite(alpha) && alpha > 0, "split spec '", spec,
               "': ALPHA in dirichlet:ALPHA must be a number > 0, got '", arg, "'");
    return dirichlet_split(labels, clients, alpha, seed);
  }
  if (colon != std::string::npos && kind == "shards") {
    int64_t k = 0;
    PARE_CHECK(parse_int(arg, &k) && k >= 1, "split spec '", spec,
               "': K in shards:K must be an integer >= 1 (shards per client), got '", arg, "'");
    return shard_split(labels, clients, k, seed);
  }
  throw InputError(detail::concat("split spec '", spec, "' is not one of ", kForms));
}

}  // namespace pare::federated
