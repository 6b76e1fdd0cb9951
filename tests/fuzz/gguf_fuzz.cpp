// libFuzzer target for GGUF files (lm/gguf.h): opens the input from memory, reads every metadata
// value through its typed getter and every tensor's bytes, and dequantizes every tensor of a type
// pare dequantizes. The reader must return or throw pare::InputError; anything else is a bug.
// Seeds (tests/fuzz/corpus/gguf): files of gguf-py's GGUFWriter, small tensors of each type.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "lm/gguf.h"

namespace {

using pare::lm::GgufFile;
using pare::lm::GgufValueType;

void read_value(const GgufFile& f, const std::string& key) {
  const auto& v = f.value(key);
  const GgufValueType t = v.is_array() ? v.elem_type : v.type;
  const bool integer = t != GgufValueType::kF32 && t != GgufValueType::kF64 && t != GgufValueType::kBool &&
                       t != GgufValueType::kString;
  if (v.is_array()) {
    if (t == GgufValueType::kString) f.get_strings(key);
    else if (t == GgufValueType::kBool) f.get_bools(key);
    else if (integer) f.get_ints(key);
    else f.get_floats(key);
  } else if (t == GgufValueType::kString) {
    f.get_string(key);
  } else if (t == GgufValueType::kBool) {
    f.get_bool(key);
  } else if (integer) {
    f.get_int(key);
  } else {
    f.get_float(key);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const GgufFile f = GgufFile::from_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
    for (const auto& key : f.keys()) {
      try {
        read_value(f, key);
      } catch (const pare::InputError&) {
        // a uint64 beyond int64's range
      }
    }
    for (const auto& info : f.tensors()) {
      // Reads every byte, so that a tensor whose claimed size exceeds the file shows as an overflow.
      volatile int64_t sink = f.raw(info.name).sum().item<int64_t>();
      if (pare::lm::ggml_type_dequantizable(info.type)) sink = sink + f.tensor(info.name).isnan().sum().item<int64_t>();
      (void)sink;
    }
  } catch (const pare::InputError&) {
    // the expected refusal
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_fuzz: the reader threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
