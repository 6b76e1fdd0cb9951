// Classifies images with a model pare exported (fp32 or int8 QDQ ONNX), on pare_rt only.
//
//   edge_classify MODEL.onnx PIXELS.f32 [THREADS]
//
// PIXELS.f32 holds raw float32 images, each of the model's input shape without the batch dim
// (Fashion-MNIST: 1x28x28); all of them run as one batch. Prints one predicted class per image,
// then the latency of that batch. Exit codes: 0 ok, 2 bad model or input, 1 other failure.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "rt/rt.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: edge_classify MODEL.onnx PIXELS.f32 [THREADS]\n");
    return 2;
  }
  try {
    pare::rt::Model model = pare::rt::Model::load(argv[1], pare::rt::Options().threads(argc > 3 ? std::atoi(argv[3]) : 0));
    const pare::rt::ValueSpec& in = model.inputs().at(0);
    int64_t per_image = 1;
    for (size_t d = 1; d < in.dims.size(); ++d) per_image *= in.dims[d];
    std::ifstream file(argv[2], std::ios::binary | std::ios::ate);
    if (!file) {
      std::fprintf(stderr, "edge_classify: cannot open '%s'\n", argv[2]);
      return 2;
    }
    const int64_t bytes = file.tellg();
    if (per_image <= 0 || bytes <= 0 || bytes % (per_image * 4) != 0) {
      std::fprintf(stderr, "edge_classify: '%s' holds %lld bytes, not a whole number of %lld-float images\n", argv[2],
                   static_cast<long long>(bytes), static_cast<long long>(per_image));
      return 2;
    }
    const int64_t n = bytes / (per_image * 4);
    std::vector<float> pixels(static_cast<size_t>(n * per_image));
    file.seekg(0);
    file.read(reinterpret_cast<char*>(pixels.data()), bytes);
    std::vector<int64_t> dims = in.dims;
    dims[0] = n;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<pare::rt::TensorView> out = model.run({pare::rt::TensorView::of(pixels.data(), dims)});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const pare::rt::TensorView& logits = out.at(0);
    const int64_t classes = logits.dims.back();
    for (int64_t i = 0; i < n; ++i) {
      const float* row = static_cast<const float*>(logits.data) + i * classes;
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (row[k] > row[best]) best = k;
      std::printf("%lld\n", static_cast<long long>(best));
    }
    std::fprintf(stderr, "edge_classify: %lld images in %.3f ms\n", static_cast<long long>(n), ms);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edge_classify: %s\n", e.what());
    return 2;
  }
}
