// libFuzzer target: any bytes as an ONNX model file. The reader must either return a model or
// throw pare::InputError; a crash, a hang, a leak, another exception or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/onnx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    // External data resolves against the folder of the origin: a folder that does not exist, so a
    // model naming an external file is refused like one whose file is missing.
    pare::reader::Model m = pare::reader::parse_model(bytes, "/nonexistent-pare-fuzz/model.onnx");
    for (const auto& [name, t] : m.initializers) {
      // Touch every byte the reader claims to hold: a size it got wrong shows as an overflow.
      volatile uint8_t sink = 0;
      const auto* p = static_cast<const uint8_t*>(t.data);
      for (int64_t i = 0; i < t.nbytes; i += 4096) sink ^= p[i];
      if (t.nbytes > 0) sink ^= p[t.nbytes - 1];
      (void)sink;
    }
  } catch (const pare::InputError&) {
    // the expected refusal
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_fuzz: the reader threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
