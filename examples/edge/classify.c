/* The C twin of classify.cpp, on pare_rt's C API: prints one predicted class per image.
 *
 *   edge_classify_c MODEL.onnx PIXELS.f32 H W   (images of 1 x H x W float32 pixels) */
#include <stdio.h>
#include <stdlib.h>

#include "rt/pare_rt.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: edge_classify_c MODEL.onnx PIXELS.f32 H W\n");
    return 2;
  }
  char err[1024];
  pare_rt_model* m = pare_rt_load(argv[1], 0, err, sizeof err);
  if (!m) {
    fprintf(stderr, "edge_classify_c: %s\n", err);
    return 2;
  }
  const long h = atol(argv[3]), w = atol(argv[4]);
  FILE* f = fopen(argv[2], "rb");
  if (!f || h <= 0 || w <= 0) {
    fprintf(stderr, "edge_classify_c: cannot read '%s'\n", argv[2]);
    pare_rt_free(m);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  const long n = bytes / (long)(h * w * sizeof(float));
  float* pixels = malloc((size_t)bytes);
  if (!pixels || fread(pixels, 1, (size_t)bytes, f) != (size_t)bytes || n * h * w * (long)sizeof(float) != bytes) {
    fprintf(stderr, "edge_classify_c: '%s' is not a whole number of 1x%ldx%ld images\n", argv[2], h, w);
    fclose(f);
    free(pixels);
    pare_rt_free(m);
    return 2;
  }
  fclose(f);
  int64_t dims[4] = {n, 1, h, w};
  pare_rt_tensor in = {PARE_RT_FLOAT32, 4, dims, pixels}, out;
  int rc = pare_rt_run(m, &in, 1, &out, 1, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "edge_classify_c: %s\n", err);
  } else {
    const int64_t classes = out.dims[out.ndim - 1];
    for (long i = 0; i < n; ++i) {
      const float* row = (const float*)out.data + i * classes;
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (row[k] > row[best]) best = k;
      printf("%lld\n", (long long)best);
    }
  }
  free(pixels);
  pare_rt_free(m);
  return rc;
}
