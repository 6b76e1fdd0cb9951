// libFuzzer target for teacher caches (engine::TeacherCacheFile, engine/cache_file.cpp):
// an index.json and the .npy shards it lists. An input is the files one after the other, split at
// kSplit: index.json, then shard 0's classes, probs and rest, then shard 1's, and so on; they are
// written into a folder in /dev/shm and read back. A cache that reads must give finite logits for
// every row; anything but a result or pare::InputError is a bug.
//   teacher_cache_fuzz -pare_write_seed=DIR    writes a seed (a real two-shard cache) to DIR
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "distill/teacher_cache.h"

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

std::string part_path(size_t i) {
  static const char* const what[] = {"classes", "probs", "rest"};
  if (i == 0) return pare::join_path(folder(), "index.json");
  return pare::engine::teacher_cache_shard(folder(), static_cast<int>((i - 1) / 3), what[(i - 1) % 3]);
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
  for (int64_t rows : {3, 2}) {
    at::Tensor idx = at::arange(rows * 2, at::kShort).remainder(4).reshape({rows, 2});
    idx[rows - 1][1] = -1;  // padding
    at::Tensor probs = at::full({rows, 2}, 0.25, at::kHalf), rest = at::full({rows}, 0.5, at::kHalf);
    for (const at::Tensor& t : {idx, probs, rest}) {
      pare::core::save_npy(t, npy);
      input += std::string(kSplit) + pare::read_file(npy);
    }
  }
  write(pare::join_path(dir, "two_shards.bin"), input);
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
  for (size_t at = 0;; ++parts) {
    const size_t end = in.find(kSplit, at);
    write(part_path(parts), in.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
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
  for (size_t i = 0; i <= parts; ++i) std::remove(part_path(i).c_str());
  return 0;
}
