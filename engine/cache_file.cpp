// A teacher cache's folder read back (engine/cache.h): the index and its shards, each
// checked before use. These are files that may come from anywhere, so the reader needs no Teacher
// and links with core alone (tests/fuzz's teacher_cache_fuzz).
#include "engine/cache.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/tensor_io.h"

namespace pare::engine {

const char* const kTeacherCacheFormat = "pare-teacher-cache-1";

std::string teacher_cache_shard(const std::string& dir, int rank, const char* what) {
  return join_path(dir, "shard-" + std::to_string(rank) + "." + what + ".npy");
}

namespace {

// A shard's tensor: `what` of rank `rank`, of `dim` dims and `rows` rows, integer or floating.
at::Tensor read_shard(const std::string& dir, int rank, const char* what, int64_t dim, int64_t rows, bool integer) {
  const std::string path = teacher_cache_shard(dir, rank, what);
  at::Tensor t = core::load_npy(path);
  const bool is_integer = at::isIntegralType(t.scalar_type(), /*includeBool=*/false);
  PARE_CHECK(t.dim() == dim && t.size(0) == rows && (integer ? is_integer : at::isFloatingType(t.scalar_type())), path,
             ": expected ", dim == 1 ? "a vector" : "a matrix", " of ", rows, " rows of ",
             integer ? "class indices (integers)" : "probabilities (floats)", ", got ", t.scalar_type(), " ",
             t.sizes());
  return t;
}

// True when every element of `t` lies in [lo, hi] (NaN does not).
bool within(const at::Tensor& t, double lo, double hi) {
  return t.numel() == 0 || (t.ge(lo).logical_and(t.le(hi))).all().item<bool>();
}

}  // namespace

TeacherCacheFile TeacherCacheFile::read(const std::string& dir) {
  const std::string index = join_path(dir, "index.json");
  PARE_CHECK(file_exists(index), "teacher cache '", dir, "': no index.json (make one with pare teacher-cache)");
  TeacherCacheFile c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(index));
    PARE_CHECK(j.at("format") == kTeacherCacheFormat, "unknown format ", j.at("format").dump());
    c.kind = j.at("kind").get<std::string>();
    PARE_CHECK(c.kind == "top-k" || c.kind == "sampled", "unknown kind '", c.kind, "' (top-k or sampled)");
    c.samples = json_int_at<int64_t>(j, "samples");
    c.classes = json_int_at<int64_t>(j, "classes");
    // Reading a batch builds dense [batch, classes] targets: a class count beyond any vocabulary is
    // refused here rather than as an allocation failure in the middle of a run.
    PARE_CHECK(c.samples >= 1 && c.classes >= 1 && c.classes <= kTeacherCacheMaxClasses, "samples (", c.samples,
               ") must be at least 1 and classes (", c.classes, ") in [1, ", kTeacherCacheMaxClasses, "]");
    c.temperature = j.at("temperature").get<double>();
    PARE_CHECK(c.temperature > 0 && std::isfinite(c.temperature), "temperature must be > 0, got ", c.temperature);
    c.checksum = j.at("checksum").get<std::string>();
    PARE_CHECK(j.at("shards").is_array() && !j.at("shards").empty(), "'shards' must be a list of the ranks' shards");
  } catch (const InputError& e) {
    throw InputError(index + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(index + ": not a pare teacher-cache index: " + e.what());
  }
  std::vector<at::Tensor> idx, probs, rest;
  int64_t next = 0;
  for (const auto& s : j.at("shards")) {
    int rank = 0;
    int64_t b = 0, e = 0;
    try {
      rank = json_int_at<int>(s, "rank");
      b = json_int_at<int64_t>(s, "begin");
      e = json_int_at<int64_t>(s, "end");
    } catch (const std::exception& ex) {
      throw InputError(index + ": a shard needs integers rank, begin and end: " + ex.what());
    }
    PARE_CHECK(rank >= 0 && b == next && e > b && e <= c.samples, index, ": shard ", rank, " covers rows [", b, ", ",
               e, "), expected a rank >= 0 and rows from ", next, " to at most ", c.samples);
    idx.push_back(read_shard(dir, rank, "classes", 2, e - b, true).to(at::kLong));
    probs.push_back(read_shard(dir, rank, "probs", 2, e - b, false).to(at::kFloat));
    rest.push_back(read_shard(dir, rank, "rest", 1, e - b, false).to(at::kFloat));
    PARE_CHECK(probs.back().sizes() == idx.back().sizes(), teacher_cache_shard(dir, rank, "probs"), ": shape ",
               probs.back().sizes(), " is not that of the classes, ", idx.back().sizes());
    PARE_CHECK(within(idx.back(), -1, static_cast<double>(c.classes - 1)), teacher_cache_shard(dir, rank, "classes"),
               ": a class index lies outside [-1, ", c.classes, ")");
    PARE_CHECK(within(probs.back(), 0, 1), teacher_cache_shard(dir, rank, "probs"),
               ": a probability is NaN or lies outside [0, 1]");
    PARE_CHECK(within(rest.back(), 0, 1), teacher_cache_shard(dir, rank, "rest"),
               ": a tail mass is NaN or lies outside [0, 1]");
    next = e;
  }
  PARE_CHECK(next == c.samples, index, ": the shards cover ", next, " rows, the index says ", c.samples);
  c.classes_idx = at::cat(idx);
  c.probs = at::cat(probs);
  c.rest = at::cat(rest);
  return c;
}

at::Tensor TeacherCacheFile::logits(const at::Tensor& rows) const {
  PARE_CHECK(rows.numel() == 0 || (rows.min().item<int64_t>() >= 0 && rows.max().item<int64_t>() < samples),
             "batch rows outside the cache's ", samples, " rows");
  at::Tensor idx = classes_idx.index_select(0, rows), p = probs.index_select(0, rows);
  const int64_t m = idx.size(0);
  // Padding (-1) goes to an extra column that is dropped; the tail mass (top-k) is spread evenly
  // over the classes the cache does not name.
  at::Tensor ext = at::where(idx.ge(0), idx, at::full_like(idx, classes));
  at::Tensor named = at::zeros({m, classes + 1}, at::kFloat).scatter_(1, ext, 1.0f).narrow(1, 0, classes);
  at::Tensor cached = at::zeros({m, classes + 1}, at::kFloat).scatter_(1, ext, p).narrow(1, 0, classes);
  at::Tensor others = (classes - named.sum(1)).clamp_min(1);
  at::Tensor tail = (rest.index_select(0, rows) / others).unsqueeze(1);
  at::Tensor dense = at::where(named.gt(0), cached, tail.expand({m, classes}));
  return dense.clamp_min(1e-12).log() * temperature;
}

}  // namespace pare::engine
