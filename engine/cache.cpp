// The cache engine: a teacher's outputs served by dataset row; and the fingerprint of a dataset
// that ties a cache to the data it was built from.
#include "engine/cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace pare::engine {

namespace {

// 64-bit words mixed in one at a time: a multiply and a shift carry every bit of a word through the state.
uint64_t mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}

}  // namespace

std::string dataset_checksum(const core::TensorDataset& ds) {
  uint64_t h = 0xCBF29CE484222325ULL;
  const at::Tensor x = ds.x.reshape(-1);
  constexpr int64_t kChunk = int64_t{1} << 20;  // elements converted to double at a time
  for (int64_t i = 0; i < x.numel(); i += kChunk) {
    const at::Tensor c = x.slice(0, i, std::min(x.numel(), i + kChunk)).to(at::kDouble).contiguous();
    const double* v = c.data_ptr<double>();
    for (int64_t j = 0; j < c.numel(); ++j) {
      uint64_t w;
      std::memcpy(&w, v + j, sizeof(w));
      h = mix(h, w);
    }
  }
  h = mix(h, static_cast<uint64_t>(ds.size()));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void check_cache_temperature(const std::string& what, double cached, double asked) {
  if (std::abs(asked - cached) >= 1e-9)
    throw InputError(pare::detail::concat(what, " holds the teacher's distribution at T=", cached,
                                          "; distill with temperature ", cached, " (or rebuild the cache at T=", asked,
                                          ")"))
        .about("temperature");
}

void LmTeacherCacheFile::check(const core::TensorDataset& ds) const {
  PARE_CHECK(ds.size() == windows && ds.x.dim() == 2 && ds.x.size(1) == seq && dataset_checksum(ds) == checksum,
             describe(), " was built for other text or another tokenizer or window length (", windows, " windows of ",
             seq, " tokens, checksum ", checksum, ") than '", ds.name, "' (", ds.size(), " windows of ",
             ds.x.dim() == 2 ? ds.x.size(1) : 0, " tokens, checksum ", dataset_checksum(ds),
             "); rebuild it from the same text in windows of the same length");
}

CachedEngine::CachedEngine(const std::string& dir) : dir_(dir), cache_(TeacherCacheFile::read(dir)) {}

std::string CachedEngine::describe() const { return "teacher cache '" + dir_ + "' (" + cache_.kind + ")"; }

void CachedEngine::check(const core::TensorDataset& ds, double temperature) const {
  PARE_CHECK(ds.size() == cache_.samples && dataset_checksum(ds) == cache_.checksum, describe(), " was built for another dataset (",
             cache_.samples, " rows, checksum ", cache_.checksum, ") than '", ds.name, "' (", ds.size(), " rows, checksum ",
             dataset_checksum(ds), "); rebuild it from the same data, normalized the same way");
  check_cache_temperature(describe(), cache_.temperature, temperature);
}

std::unordered_map<std::string, at::Tensor> CachedEngine::forward(const at::Tensor&, const std::vector<std::string>&) {
  throw InputError(describe() + " can only teach the rows of its dataset, not arbitrary inputs");
}

std::unordered_map<std::string, at::Tensor> CachedEngine::forward_batch(const core::Batch& b,
                                                                         const std::vector<std::string>& values) {
  for (auto& v : values)
    PARE_CHECK(v == "logits", describe(), " has only logits, not '", v, "' (hints need a live teacher)");
  PARE_CHECK(b.rows.defined() && b.rows.numel() == b.x.size(0), describe(), " needs the dataset rows of the batch");
  try {
    return {{"logits", cache_.logits(b.rows).to(b.x.device())}};
  } catch (const InputError& e) {
    throw InputError(describe() + ": " + e.what());
  }
}

}  // namespace pare::engine
