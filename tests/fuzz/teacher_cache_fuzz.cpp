// libFuzzer target for teacher caches (engine::TeacherCacheFile and, of a language model,
// engine::LmTeacherCacheFile with its row codec; engine/cache_file.cpp) and sequence-KD sets
// (engine::read_sequence_kd_set): an index.json and the .npy shards it lists. An input is the files
// one after the other, split at kSplit: index.json, then shard 0's classes, probs and rest, then
// shard 1's, and so on; they are written into a folder in /dev/shm, each shard's first two files
// also under a language model's names (rows, offsets) and a sequence-KD set's (x, y), and read back
// by the three readers. A cache that reads must give finite logits for every row (a language
// model's: ids in the vocabulary, log-probabilities <= 0 or -inf), a sequence-KD set windows of
// tokens in its vocabulary; anything but a result or pare::InputError is a bug.
//   teacher_cache_fuzz -pare_write_seed=DIR    writes a seed (a real two-shard cache) to DIR
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "distill/teacher_cache.h"
#include "engine/cache.h"

namespace {

constexpr std::string_view kSplit = "\n--pare-split--\n";

const std::string& folder() {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string p = std::string(dir) + "/pare-fuzz-" + std::to_string(getpid()) + ".cache";
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) std::abort();
    return p;
  }();
  return path;
}

enum class Names { kClassifier, kLm, kSequenceKd };

// Where part i of an input goes: the index, or file (i - 1) % 3 of shard (i - 1) / 3 under `names`.
std::string part_path(size_t i, Names names = Names::kClassifier) {
  static const char* const what[][3] = {{"classes", "probs", "rest"}, {"rows", "offsets", "unused"}, {"x", "y", "z"}};
  if (i == 0) return pare::join_path(folder(), "index.json");
  const int shard = static_cast<int>((i - 1) / 3);
  const char* name = what[static_cast<int>(names)][(i - 1) % 3];
  if (names == Names::kSequenceKd) return pare::engine::sequence_kd_part(folder(), name, shard);
  return pare::engine::teacher_cache_shard(folder(), shard, name);
}

void write(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) std::abort();
}

// A two-shard top-k cache of 5 rows, 4 classes, k = 2, as pare teacher-cache writes one.
void write_seed(const std::string& dir) {
  std::string input =
      R"({"format": "pare-teacher-cache-1", "kind": "top-k", "entries": 2, "temperature": 4.0, "classes": 4,)"
      R"( "samples": 5, "teacher": "t", "data": "d", "checksum": "0123456789abcdef", "bytes_per_sample": 10,)"
      R"( "shards": [{"rank": 0, "begin": 0, "end": 3}, {"rank": 1, "begin": 3, "end": 5}]})";
  const std::string npy = folder() + "/seed.npy";
  auto add = [&](const at::Tensor& t) {  // the next part: t as an .npy file
    pare::core::save_npy(t, npy);
    input += std::string(kSplit) + pare::read_file(npy);
  };
  for (int64_t rows : {3, 2}) {
    at::Tensor idx = at::arange(rows * 2, at::kShort).remainder(4).reshape({rows, 2});
    idx[rows - 1][1] = -1;  // padding
    at::Tensor probs = at::full({rows, 2}, 0.25, at::kHalf), rest = at::full({rows}, 0.5, at::kHalf);
    for (const at::Tensor& t : {idx, probs, rest}) add(t);
  }
  write(pare::join_path(dir, "two_shards.bin"), input);
  // A language model's: 3 windows of 2 tokens over a vocabulary of 50, top-3 rows, in two shards.
  input = R"({"format": "pare-teacher-cache-1", "kind": "lm-top-k", "entries": 3, "temperature": 1.0,)"
          R"( "classes": 50, "samples": 3, "seq": 2, "checksum": "0123456789abcdef",)"
          R"( "shards": [{"rank": 0, "begin": 0, "end": 2}, {"rank": 1, "begin": 2, "end": 3}]})";
  for (int64_t windows : {2, 1}) {
    std::vector<uint8_t> rows;
    std::vector<int64_t> offsets = {0};
    for (int64_t w = 0; w < windows; ++w) {
      for (int t = 0; t < 2; ++t)
        pare::engine::append_lm_top_k_row(rows, {{3 + t, -0.5f}, {41, -1.5f}, {7, -2.25f}}, -3.0f);
      offsets.push_back(static_cast<int64_t>(rows.size()));
    }
    add(at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, at::kByte));
    add(at::tensor(offsets, at::kLong));
    input += std::string(kSplit);  // the shard's third file, unused
  }
  write(pare::join_path(dir, "lm_two_shards.bin"), input);
  // A sequence-KD set of 3 windows of 4 tokens in two ranks' parts, the targets counting the last two.
  input = R"({"format": "pare-sequence-kd-1", "teacher": "t", "windows": 3, "seq": 4, "ranks": 2})";
  for (int64_t rows : {1, 2}) {
    at::Tensor x = at::arange(rows * 4, at::kLong).reshape({rows, 4}).add(7);
    at::Tensor y = x.roll(-1, 1);
    y.narrow(1, 0, 2).fill_(-100);
    add(x);
    add(y);
    input += std::string(kSplit);  // the shard's third file, unused
  }
  write(pare::join_path(dir, "sequence_kd.bin"), input);
}

// The folder as a sequence-KD set of a vocabulary of 50 made by teacher "t": windows that read
// must hold tokens in [0, 50) (targets also -100).
void read_sequence_kd() {
  try {
    const auto set = pare::engine::read_sequence_kd_set(folder(), {{"teacher", "t"}}, 50, "fuzz");
    const bool ok = set.x.sizes() == set.y.sizes() && (set.x.ge(0) & set.x.lt(50)).all().item<bool>() &&
                    (set.y.eq(-100) | (set.y.ge(0) & set.y.lt(50))).all().item<bool>();
    if (!ok) {
      std::fprintf(stderr, "teacher_cache_fuzz: a sequence-KD set that reads gave windows %s and targets %s, or a "
                   "token outside [0, 50)\n", c10::str(set.x.sizes()).c_str(), c10::str(set.y.sizes()).c_str());
      std::abort();
    }
  } catch (const pare::InputError& e) {
    if (std::getenv("PARE_FUZZ_VERBOSE")) std::fprintf(stderr, "refused (sequence-KD set): %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "teacher_cache_fuzz: the sequence-KD reader threw something other than InputError: %s\n",
                 e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-pare_write_seed=", 17) == 0) {
      write_seed((*argv)[i] + 17);
      std::exit(0);
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t parts = 0;
  write(pare::join_path(folder(), "tokenizer.json"), "{}");
  for (size_t at = 0;; ++parts) {
    const size_t end = in.find(kSplit, at);
    const std::string_view part = in.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    write(part_path(parts), part);
    if (parts > 0) write(part_path(parts, Names::kLm), part), write(part_path(parts, Names::kSequenceKd), part);
    if (end == std::string_view::npos || parts == 30) break;
    at = end + kSplit.size();
  }
  try {
    const auto cache = pare::engine::TeacherCacheFile::read(folder());
    at::Tensor logits = cache.logits(at::arange(cache.samples, at::kLong));
    if (logits.sizes() != at::IntArrayRef{cache.samples, cache.classes} || !at::isfinite(logits).all().item<bool>()) {
      std::fprintf(stderr, "teacher_cache_fuzz: a cache that reads gave logits %s, not finite [%lld, %lld]\n",
                   c10::str(logits.sizes()).c_str(), (long long)cache.samples, (long long)cache.classes);
      std::abort();
    }
  } catch (const pare::InputError& e) {
    // the expected refusal (printed with PARE_FUZZ_VERBOSE=1, to see why a seed does not load)
    if (std::getenv("PARE_FUZZ_VERBOSE")) std::fprintf(stderr, "refused: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "teacher_cache_fuzz: the reader threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  try {
    const auto cache = pare::engine::LmTeacherCacheFile::read(folder());
    bool ok = true;
    // Windows decoded one at a time, where one is small enough to hold (read() has decoded every row).
    for (int64_t w = 0; w < cache.windows && cache.seq * cache.entries <= (int64_t{1} << 20); ++w) {
      const auto [ids, lp] = cache.teacher(at::full({1}, w, at::kLong));
      ok = ok && ids.lt(cache.vocab).all().item<bool>() && ids.ge(-1).all().item<bool>() &&
           (lp.le(0) | lp.isneginf()).all().item<bool>();
    }
    if (!ok) {
      std::fprintf(stderr, "teacher_cache_fuzz: a language model's cache that reads gave tokens outside [-1, %lld) or "
                   "log-probabilities above 0\n", (long long)cache.vocab);
      std::abort();
    }
  } catch (const pare::InputError& e) {
    if (std::getenv("PARE_FUZZ_VERBOSE")) std::fprintf(stderr, "refused (language model): %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "teacher_cache_fuzz: the language model reader threw something other than InputError: %s\n",
                 e.what());
    std::abort();
  }
  read_sequence_kd();
  for (size_t i = 0; i <= parts; ++i)
    for (Names names : {Names::kClassifier, Names::kLm, Names::kSequenceKd}) std::remove(part_path(i, names).c_str());
  return 0;
}
