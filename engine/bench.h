// Latency, throughput and peak memory of one model on one engine, batch size and thread count
// (`pare bench`). Each configuration can run in a child process of its own, so that its peak
// resident memory is its own and thread pools start fresh.
//
//   engine::BenchOptions o;
//   o.model = "resnet18.int8.onnx";
//   engine::BenchRow r = engine::bench_in_child(o, "rt", /*batch=*/1, /*threads=*/2);   // r.p50 ms
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace pare::engine {

struct BenchOptions {
  std::string model;   ///< ONNX file or zoo spec
  double seconds = 2;  ///< time each configuration at least this long
  int warmup = 5, min_iters = 10;
  bool profile = false;  ///< rt: time each step; per op type and the largest convolution's rate
};

/// One configuration's figures.
struct BenchRow {
  std::string engine;
  int64_t batch = 0;
  int threads = 0;
  int64_t iters = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // ms
  double samples_per_s = 0;
  int64_t peak_rss_kb = 0;
  std::string error;
  nlohmann::json profile;  ///< with BenchOptions::profile, engine rt: time per op type, largest convolution
};

/// The row as `pare bench --json` prints it.
nlohmann::json to_json(const BenchRow& r);

/// Times `model` on `engine` ("torch": libtorch; "rt": pare_rt) in this process, on random inputs
/// of its declared shapes with the batch dims bound to `batch`. Throws InputError for a model
/// with an unknown dim other than the batch.
BenchRow bench(const BenchOptions& o, const std::string& engine, int64_t batch, int threads);

/// bench() in a child process (fork: call it before this process starts OpenMP or libtorch
/// threads); a failure comes back as the row's `error`, never as an exception.
BenchRow bench_in_child(const BenchOptions& o, const std::string& engine, int64_t batch, int threads);

}  // namespace pare::engine
