// libFuzzer targets for pare's tensor files, one binary per format (PARE_FUZZ_FORMAT): .npy
// (core::load_npy), safetensors (core::load_safetensors) and IDX (core::load_dataset's
// core::load_idx, gzip or plain). The readers take paths, so each input is written to a file in
// /dev/shm first. They must return tensors or throw pare::InputError; anything else is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/data.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"

namespace {

const std::string& scratch() {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/pare-fuzz-" + std::to_string(getpid()) + "." PARE_FUZZ_EXT;
  }();
  return path;
}

// Reads every element, so that a tensor whose claimed size exceeds its memory shows as an overflow.
void touch(const at::Tensor& t) {
  if (t.numel() == 0) return;
  volatile double sink = t.to(at::kDouble).sum().item<double>();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    FILE* f = std::fopen(scratch().c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  }
  try {
#if defined(PARE_FUZZ_NPY)
    touch(pare::core::load_npy(scratch()));
#elif defined(PARE_FUZZ_SAFETENSORS)
    std::map<std::string, std::string> meta;
    for (const auto& [name, t] : pare::core::load_safetensors(scratch(), &meta)) touch(t);
#elif defined(PARE_FUZZ_IDX)
    touch(pare::core::load_idx(scratch()));
#else
#error "PARE_FUZZ_NPY, PARE_FUZZ_SAFETENSORS or PARE_FUZZ_IDX"
#endif
  } catch (const pare::InputError&) {
    // the expected refusal
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensor_fuzz: the reader threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
