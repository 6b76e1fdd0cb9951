// A teacher cache's folder read back (engine/cache.h): the index and its shards, each
// checked before use. These are files that may come from anywhere, so the reader needs no Teacher
// and links with core alone (tests/fuzz's teacher_cache_fuzz).
#include "engine/cache.h"

#include <nlohmann/json.hpp>

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

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

// A shard's tensor: `what` of rank `rank`, of `dim` dims and `rows` rows (< 0: any), integer or floating;
// `of` says what its elements are, for the error.
at::Tensor read_shard(const std::string& dir, int rank, const char* what, int64_t dim, int64_t rows, bool integer,
                      const char* of) {
  const std::string path = teacher_cache_shard(dir, rank, what);
  at::Tensor t = core::load_npy(path);
  const bool is_integer = at::isIntegralType(t.scalar_type(), /*includeBool=*/false);
  PARE_CHECK(t.dim() == dim && (rows < 0 || t.size(0) == rows) &&
                 (integer ? is_integer : at::isFloatingType(t.scalar_type())),
             path, ": expected ", dim == 1 ? "a vector" : "a matrix", " of ",
             rows < 0 ? std::string("any number of") : std::to_string(rows), " rows of ",
             of, ", got ", t.scalar_type(), " ", t.sizes());
  return t;
}

// True when every element of `t` lies in [lo, hi] (NaN does not).
bool within(const at::Tensor& t, double lo, double hi) {
  return t.numel() == 0 || (t.ge(lo).logical_and(t.le(hi))).all().item<bool>();
}

}  // namespace

namespace {

struct Shard {
  int rank;
  int64_t begin, end;
};

// index.json's fields common to every kind, checked; `lm` says which kinds the caller reads.
struct CacheIndex {
  std::string path, kind, checksum;
  int64_t samples = 0, classes = 0;
  double temperature = 0;
  std::vector<Shard> shards;
  nlohmann::json j;
};

CacheIndex read_index(const std::string& dir, bool lm) {
  CacheIndex c;
  c.path = join_path(dir, "index.json");
  PARE_CHECK(file_exists(c.path), "teacher cache '", dir, "': no index.json (make one with pare teacher-cache)");
  try {
    c.j = nlohmann::json::parse(read_file(c.path));
    const auto& j = c.j;
    PARE_CHECK(j.at("format") == kTeacherCacheFormat, "unknown format ", j.at("format").dump());
    c.kind = j.at("kind").get<std::string>();
    const bool is_lm = c.kind == "lm-top-k" || c.kind == "lm-sampled";
    PARE_CHECK(is_lm || c.kind == "top-k" || c.kind == "sampled", "unknown kind '", c.kind,
               "' (top-k, sampled, lm-top-k or lm-sampled)");
    PARE_CHECK(is_lm == lm, "a cache of kind '", c.kind, "' holds a ", is_lm ? "language model's" : "classifier's",
               " outputs; it teaches ", is_lm ? "a language model on its text" : "a classifier on its data");
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
    throw InputError(c.path + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(c.path + ": not a pare teacher-cache index: " + e.what());
  }
  int64_t next = 0;
  for (const auto& s : c.j.at("shards")) {
    Shard sh{};
    try {
      sh = {json_int_at<int>(s, "rank"), json_int_at<int64_t>(s, "begin"), json_int_at<int64_t>(s, "end")};
    } catch (const std::exception& ex) {
      throw InputError(c.path + ": a shard needs integers rank, begin and end: " + ex.what());
    }
    PARE_CHECK(sh.rank >= 0 && sh.begin == next && sh.end > sh.begin && sh.end <= c.samples, c.path, ": shard ",
               sh.rank, " covers rows [", sh.begin, ", ", sh.end, "), expected a rank >= 0 and rows from ", next,
               " to at most ", c.samples);
    c.shards.push_back(sh);
    next = sh.end;
  }
  PARE_CHECK(next == c.samples, c.path, ": the shards cover ", next, " rows, the index says ", c.samples);
  return c;
}

}  // namespace

TeacherCacheFile TeacherCacheFile::read(const std::string& dir) {
  const CacheIndex index = read_index(dir, /*lm=*/false);
  TeacherCacheFile c;
  c.kind = index.kind;
  c.checksum = index.checksum;
  c.samples = index.samples;
  c.classes = index.classes;
  c.temperature = index.temperature;
  std::vector<at::Tensor> idx, probs, rest;
  for (const Shard& s : index.shards) {
    const int64_t n = s.end - s.begin;
    idx.push_back(read_shard(dir, s.rank, "classes", 2, n, true, "class indices (integers)").to(at::kLong));
    probs.push_back(read_shard(dir, s.rank, "probs", 2, n, false, "probabilities (floats)").to(at::kFloat));
    rest.push_back(read_shard(dir, s.rank, "rest", 1, n, false, "probabilities (floats)").to(at::kFloat));
    PARE_CHECK(probs.back().sizes() == idx.back().sizes(), teacher_cache_shard(dir, s.rank, "probs"), ": shape ",
               probs.back().sizes(), " is not that of the classes, ", idx.back().sizes());
    PARE_CHECK(within(idx.back(), -1, static_cast<double>(c.classes - 1)), teacher_cache_shard(dir, s.rank, "classes"),
               ": a class index lies outside [-1, ", c.classes, ")");
    PARE_CHECK(within(probs.back(), 0, 1), teacher_cache_shard(dir, s.rank, "probs"),
               ": a probability is NaN or lies outside [0, 1]");
    PARE_CHECK(within(rest.back(), 0, 1), teacher_cache_shard(dir, s.rank, "rest"),
               ": a tail mass is NaN or lies outside [0, 1]");
  }
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

// ---- language models' caches: the rows' codec and the reader ------------------------------------------

namespace {

constexpr int kLmTopKHeader = 10, kLmSampledHeader = 3;  // bytes before a row's bits
constexpr int64_t kLmMaxEntries = 1024;                 // rows stay far below 64 KiB

class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out) {}
  void bit(unsigned b) {
    if (used_ == 0) out_.push_back(0);
    out_.back() = static_cast<uint8_t>(out_.back() | (b << used_));
    used_ = (used_ + 1) & 7;
  }
  void bits(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bit((v >> i) & 1);
  }
  void rice(uint64_t x, int r) {
    for (uint64_t q = x >> r; q > 0; --q) bit(1);
    bit(0);
    bits(x, r);
  }
  void gamma(uint64_t x) {  // x >= 1: floor(log2 x) zeros, then x from its top bit down
    const int top = 63 - __builtin_clzll(x);
    for (int i = 0; i < top; ++i) bit(0);
    for (int i = top; i >= 0; --i) bit((x >> i) & 1);
  }

 private:
  std::vector<uint8_t>& out_;
  int used_ = 0;
};

// Reads bits of bytes [at, end), refusing to read past `end` (`what` names the row in errors).
class BitReader {
 public:
  BitReader(const uint8_t* at, const uint8_t* end, const std::string& what) : at_(at), end_(end), what_(what) {}
  unsigned bit() {
    PARE_CHECK(at_ < end_, what_, ": the row's bits run past its window's bytes");
    const unsigned b = (*at_ >> used_) & 1;
    if (++used_ == 8) used_ = 0, ++at_;
    return b;
  }
  uint64_t bits(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(bit()) << i;
    return v;
  }
  // A Rice code whose value may not exceed `most` (a gap beyond the vocabulary is refused early).
  uint64_t rice(int r, uint64_t most) {
    uint64_t q = 0;
    while (bit()) PARE_CHECK(++q <= (most >> r), what_, ": a Rice code beyond its range (a token gap past the "
                             "vocabulary, or a log-probability past 255)");
    return (q << r) | bits(r);
  }
  uint64_t gamma(uint64_t most) {
    int zeros = 0;
    while (!bit()) PARE_CHECK(++zeros < 40, what_, ": a count's gamma code is too long");
    uint64_t v = 1;
    for (int i = 0; i < zeros; ++i) v = (v << 1) | bit();
    PARE_CHECK(v <= most, what_, ": a count of ", v, " exceeds the ", most, " draws");
    return v;
  }
  const uint8_t* end_of_row() const { return used_ == 0 ? at_ : at_ + 1; }

 private:
  const uint8_t* at_;
  const uint8_t* end_;
  const std::string& what_;
  int used_ = 0;
};

uint16_t half_bits(float f) { return c10::Half(f).x; }
float half_value(uint16_t b) { return static_cast<float>(c10::Half(b, c10::Half::from_bits())); }

void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xff));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

void sort_by_token(std::vector<LmCacheEntry>& entries) {
  std::sort(entries.begin(), entries.end(),
            [](const LmCacheEntry& a, const LmCacheEntry& b) { return a.token < b.token; });
}

// The Rice parameter in [0, most] that codes `values` in the fewest bits.
int best_rice(const std::vector<uint64_t>& values, int most) {
  int best = 0;
  uint64_t best_bits = std::numeric_limits<uint64_t>::max();
  for (int r = 0; r <= most; ++r) {
    uint64_t total = values.size() * static_cast<uint64_t>(r + 1);
    for (uint64_t v : values) total += v >> r;
    if (total < best_bits) best_bits = total, best = r;
  }
  return best;
}

// Writes the header's n and Rice parameter, `between`, and the gaps of the entries' tokens (sorted
// by the caller, ascending and distinct).
void put_tokens(std::vector<uint8_t>& out, const std::vector<LmCacheEntry>& entries, BitWriter& bits,
                const std::vector<uint8_t>& between) {
  PARE_CHECK(!entries.empty() && static_cast<int64_t>(entries.size()) <= kLmMaxEntries,
             "a teacher cache row names 1 to ", kLmMaxEntries, " tokens, not ", entries.size());
  std::vector<uint64_t> gaps;
  int64_t prev = -1;
  for (const auto& e : entries) {
    PARE_CHECK(e.token > prev && e.token < kTeacherCacheMaxClasses, "a teacher cache row's tokens must be distinct "
               "and in [0, 2^24); got ", e.token, " after ", prev);
    gaps.push_back(static_cast<uint64_t>(e.token - prev - 1));
    prev = e.token;
  }
  const int best = best_rice(gaps, 24);
  put_u16(out, static_cast<uint16_t>(entries.size()));
  out.push_back(static_cast<uint8_t>(best));
  out.insert(out.end(), between.begin(), between.end());
  for (uint64_t g : gaps) bits.rice(g, best);
}

}  // namespace

void append_lm_top_k_row(std::vector<uint8_t>& out, std::vector<LmCacheEntry> entries, float log_rest) {
  float hi = -std::numeric_limits<float>::infinity(), lo = std::numeric_limits<float>::infinity();
  for (const auto& e : entries) hi = std::max(hi, e.value), lo = std::min(lo, e.value);
  // The grid's ends as the reader sees them (fp16), the top rounded down so that it stays <= 0.
  const uint16_t hi_b = half_bits(std::min(hi, 0.0f)), lo_b = half_bits(std::min(lo, half_value(hi_b)));
  const float top = half_value(hi_b), bottom = half_value(lo_b), step = (top - bottom) / 255.0f;
  // The 8-bit values, Rice-coded too: most of a row's K likeliest tokens lie near its smallest
  // log-probability (the grid's 0), so small values are the common ones.
  sort_by_token(entries);
  std::vector<uint64_t> q;
  for (const auto& e : entries)
    q.push_back(static_cast<uint64_t>(std::clamp(step > 0 ? std::round((e.value - bottom) / step) : 0.0f, 0.0f,
                                                 255.0f)));
  const int r = best_rice(q, 8);
  std::vector<uint8_t> header = {static_cast<uint8_t>(r)};
  put_u16(header, hi_b);
  put_u16(header, lo_b);
  put_u16(header, half_bits(std::min(log_rest, 0.0f)));
  BitWriter bits(out);
  put_tokens(out, entries, bits, header);
  for (uint64_t v : q) bits.rice(v, r);
}

void append_lm_sampled_row(std::vector<uint8_t>& out, std::vector<LmCacheEntry> entries) {
  sort_by_token(entries);
  BitWriter bits(out);
  put_tokens(out, entries, bits, {});
  for (const auto& e : entries) {
    PARE_CHECK(e.value >= 1 && e.value == std::floor(e.value), "a sampled row's counts are whole numbers >= 1, not ",
               e.value);
    bits.gamma(static_cast<uint64_t>(e.value));
  }
}

namespace {

// Decodes the row at `p` (bytes up to `end`) into ids[0, n), lp[0, n) and lp[entries] (the rest),
// returning where the next row begins. Throws InputError (naming `what`) for anything malformed.
// `top_k` says the cache is of kind lm-top-k (else lm-sampled).
const uint8_t* decode_lm_row(const LmTeacherCacheFile& c, bool top_k, const uint8_t* p, const uint8_t* end,
                             int64_t* ids, float* lp, const std::string& what) {
  const int header = top_k ? kLmTopKHeader : kLmSampledHeader;
  PARE_CHECK(end - p >= header, what, ": a row's header runs past its window's bytes");
  const int64_t n = get_u16(p);
  const int r = p[2];
  PARE_CHECK(n >= 1 && n <= c.entries && r <= 24, what, ": a row names ", n, " tokens with Rice parameter ", r,
             " (expected 1 to ", c.entries, " tokens and a parameter of at most 24)");
  float top = 0, bottom = 0, rest = -std::numeric_limits<float>::infinity();
  const int r_values = top_k ? p[3] : 0;
  if (top_k) {
    PARE_CHECK(r_values <= 8, what, ": a row's log-probabilities have Rice parameter ", r_values, " (at most 8)");
    top = half_value(get_u16(p + 4)), bottom = half_value(get_u16(p + 6)), rest = half_value(get_u16(p + 8));
    PARE_CHECK(std::isfinite(top) && std::isfinite(bottom) && bottom <= top && top <= 0 && !std::isnan(rest) &&
                   rest <= 0,
               what, ": a row's log-probabilities span [", bottom, ", ", top, "] with the rest at ", rest,
               " (expected finite values <= 0, the rest's may be -inf)");
  }
  BitReader bits(p + header, end, what);
  int64_t prev = -1;
  for (int64_t i = 0; i < n; ++i) {
    prev += 1 + static_cast<int64_t>(bits.rice(r, static_cast<uint64_t>(c.vocab)));
    PARE_CHECK(prev < c.vocab, what, ": token ", prev, " is outside the vocabulary of ", c.vocab);
    ids[i] = prev;
  }
  if (top_k) {
    const float step = (top - bottom) / 255.0f;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t q = bits.rice(r_values, 255);
      PARE_CHECK(q <= 255, what, ": an 8-bit log-probability of ", q);
      lp[i] = bottom + step * static_cast<float>(q);
    }
  } else {
    uint64_t drawn = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t count = bits.gamma(static_cast<uint64_t>(c.entries) - drawn);
      drawn += count;
      lp[i] = std::log(static_cast<float>(count) / static_cast<float>(c.entries));
    }
    PARE_CHECK(drawn == static_cast<uint64_t>(c.entries), what, ": a row's counts add up to ", drawn, ", not the ",
               c.entries, " draws");
  }
  for (int64_t i = n; i < c.entries; ++i) ids[i] = -1, lp[i] = -std::numeric_limits<float>::infinity();
  lp[c.entries] = rest;
  return bits.end_of_row();
}

}  // namespace

LmTeacherCacheFile LmTeacherCacheFile::read(const std::string& dir) {
  const CacheIndex index = read_index(dir, /*lm=*/true);
  LmTeacherCacheFile c;
  c.dir = dir;
  c.kind = index.kind;
  c.checksum = index.checksum;
  c.windows = index.samples;
  c.vocab = index.classes;
  c.temperature = index.temperature;
  try {
    c.seq = json_int_at<int64_t>(index.j, "seq");
    c.entries = json_int_at<int64_t>(index.j, "entries");
  } catch (const std::exception& e) {
    throw InputError(index.path + ": " + e.what());
  }
  PARE_CHECK(c.seq >= 1 && c.seq <= (int64_t{1} << 20) && c.entries >= 1 && c.entries <= kLmMaxEntries, index.path,
             ": seq (", c.seq, ") must lie in [1, 2^20] and entries (", c.entries, ") in [1, ", kLmMaxEntries, "]");
  c.tokenizer = join_path(dir, "tokenizer.json");
  PARE_CHECK(file_exists(c.tokenizer), c.tokenizer, ": missing (the teacher's tokenizer, which pare teacher-cache "
             "writes beside the index)");
  std::vector<at::Tensor> rows;
  c.offsets = {0};
  for (const Shard& s : index.shards) {
    const at::Tensor bytes = read_shard(dir, s.rank, "rows", 1, -1, true, "bytes (uint8)");
    const at::Tensor off = read_shard(dir, s.rank, "offsets", 1, s.end - s.begin + 1, true, "offsets (integers)")
                               .to(at::kLong)
                               .contiguous();
    const std::string name = teacher_cache_shard(dir, s.rank, "offsets");
    PARE_CHECK(bytes.scalar_type() == at::kByte, teacher_cache_shard(dir, s.rank, "rows"),
               ": expected uint8 bytes, got ",
               bytes.scalar_type());
    const int64_t* o = off.data_ptr<int64_t>();
    PARE_CHECK(o[0] == 0 && o[off.numel() - 1] == bytes.numel(), name, ": the offsets must run from 0 to the rows' ",
               bytes.numel(), " bytes");
    for (int64_t w = 1; w < off.numel(); ++w) {
      PARE_CHECK(o[w] >= o[w - 1], name, ": the offsets must not decrease (window ", w - 1, ")");
      c.offsets.push_back(c.offsets.back() + o[w] - o[w - 1]);
    }
    rows.push_back(bytes);
  }
  c.rows = at::cat(rows).contiguous();
  // Every row decodes, or the cache is refused now (one row at a time: a window's decoded size is
  // the caller's to ask for).
  std::vector<int64_t> ids(static_cast<size_t>(c.entries));
  std::vector<float> lp(static_cast<size_t>(c.entries + 1));
  const uint8_t* bytes = c.rows.data_ptr<uint8_t>();
  const bool top_k = c.kind == "lm-top-k";
  for (int64_t w = 0; w < c.windows; ++w) {
    const std::string what = dir + ": window " + std::to_string(w);
    const uint8_t* p = bytes + c.offsets[w];
    const uint8_t* end = bytes + c.offsets[w + 1];
    for (int64_t t = 0; t < c.seq; ++t) p = decode_lm_row(c, top_k, p, end, ids.data(), lp.data(), what);
    PARE_CHECK(p == end, what, ": ", end - p, " bytes are left after its ", c.seq, " rows");
  }
  return c;
}

std::pair<at::Tensor, at::Tensor> LmTeacherCacheFile::teacher(const at::Tensor& rows_) const {
  const at::Tensor w = rows_.to(at::kLong).contiguous();
  at::Tensor ids = at::empty({w.numel(), seq, entries}, at::kLong);
  at::Tensor lp = at::empty({w.numel(), seq, entries + 1}, at::kFloat);
  const uint8_t* bytes = rows.data_ptr<uint8_t>();
  int64_t* id = ids.data_ptr<int64_t>();
  float* l = lp.data_ptr<float>();
  const bool top_k = kind == "lm-top-k";
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t win = w.data_ptr<int64_t>()[i];
    PARE_CHECK(win >= 0 && win < windows, describe(), ": window ", win, " is outside its ", windows, " windows");
    const std::string what = dir + ": window " + std::to_string(win);
    const uint8_t* p = bytes + offsets[win];
    const uint8_t* end = bytes + offsets[win + 1];
    for (int64_t t = 0; t < seq; ++t)
      p = decode_lm_row(*this, top_k, p, end, id + (i * seq + t) * entries, l + (i * seq + t) * (entries + 1), what);
    PARE_CHECK(p == end, what, ": ", end - p, " bytes are left after its ", seq, " rows");
  }
  return {ids, lp};
}

const char* const kSequenceKdFormat = "pare-sequence-kd-1";

std::string sequence_kd_part(const std::string& dir, const char* what, int rank) {
  return join_path(dir, std::string(what) + "-" + std::to_string(rank) + ".npy");
}

core::TensorDataset read_sequence_kd_set(const std::string& dir, const nlohmann::json& want, int64_t vocab,
                                         const std::string& name) {
  const std::string index = join_path(dir, "index.json");
  nlohmann::json j;
  int64_t windows = 0, seq = 0, ranks = 0;
  try {
    j = nlohmann::json::parse(read_file(index));
    PARE_CHECK(j.at("format") == kSequenceKdFormat, "unknown format ", j.at("format").dump());
    windows = json_int_at<int64_t>(j, "windows");
    seq = json_int_at<int64_t>(j, "seq");
    ranks = json_int_at<int64_t>(j, "ranks");
    PARE_CHECK(windows >= 1 && windows <= (int64_t{1} << 40) && seq >= 2 && ranks >= 1 && ranks <= 65536,
               "windows (", windows, "), seq (", seq, ") and ranks (", ranks, ") do not fit together");
  } catch (const InputError& e) {
    throw InputError(index + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(index + ": not a pare sequence-KD index: " + e.what());
  }
  for (const auto& [key, value] : want.items())
    PARE_CHECK(j.contains(key) && j[key] == value, dir, " holds the teacher's continuations for ", key, " ",
               j.contains(key) ? j[key].dump() : "(none)", ", and this run asks for ", value.dump(),
               ": give another --sequence-kd folder, or remove this one to generate them again");
  std::vector<at::Tensor> xs, ys;
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t rows = windows * (r + 1) / ranks - windows * r / ranks;
    for (const char* what : {"x", "y"}) {
      const std::string path = sequence_kd_part(dir, what, static_cast<int>(r));
      at::Tensor t = core::load_npy(path);
      PARE_CHECK(t.scalar_type() == at::kLong && t.dim() == 2 && t.size(0) == rows && t.size(1) == seq, path,
                 ": expected int64 [", rows, ", ", seq, "], got ", t.scalar_type(), " ", t.sizes());
      const bool y = what[0] == 'y';
      const at::Tensor ok = (t.ge(0) & t.lt(vocab)) | (y ? t.eq(-100) : at::zeros_like(t, at::kBool));
      PARE_CHECK(ok.all().item<bool>(), path, ": a token outside [0, ", vocab, ")", y ? " (or -100)" : "");
      (y ? ys : xs).push_back(t);
    }
  }
  return {at::cat(xs), at::cat(ys), name};
}

}  // namespace pare::engine
