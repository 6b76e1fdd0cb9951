// Post-training static int8 quantization: calibrate activation ranges on a few batches and write a
// standard QDQ model: `pare quantize --calib` in a few lines.
// Usage: quantize_example MODEL.onnx|SPEC CALIB_DATA OUT.onnx     (e.g. cnn.onnx fashion-mnist cnn.int8.onnx)
#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "core/data.h"
#include "core/onnx_io.h"
#include "quantize/ptq.h"

int main(int argc, char** argv) try {
  if (argc < 4) return std::fprintf(stderr, "usage: %s MODEL CALIB_DATA OUT.onnx\n", argv[0]), 2;
  using namespace pare;
  const core::Graph fp32 = core::load_model(argv[1], /*seed=*/1);
  const auto calib = core::load_dataset(argv[2], "train");
  const auto result = quantize::quantize_static(
      fp32, calib.x.slice(0, 0, 512),
      quantize::PtqOptions().method(quantize::CalibMethod::kPercentile).calib_name(argv[2]));
  std::cout << result.report.to_text();
  core::save_onnx(result.graph, argv[3]);
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
