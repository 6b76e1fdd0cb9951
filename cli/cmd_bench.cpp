// pare bench MODEL [--engine torch|rt|all] [--batch 1,64] [--threads 1,2] [--seconds S] [--json]
//
// Latency (p50/p90/p99), throughput and peak memory of inference, per engine, batch size and
// thread count. Each configuration runs in a child process of its own, so that its peak resident
// memory is its own and thread pools start fresh.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/cpu_peak.h"
#include "core/error.h"
#include "core/onnx_reader.h"
#include "core/zoo.h"
#include "engine/bench.h"

namespace pare::cli {

namespace {

struct BenchOpts {
  engine::BenchOptions run;
  std::string engine = "all";
  std::vector<int64_t> batches = {1, 64};
  std::vector<int> threads = {1, 2};
  bool json = false, peak = false;
};

// --peak, as JSON: the instructions and the rates per thread count (core/cpu_peak.h).
nlohmann::json peak_json(const std::vector<int>& threads) {
  const core::CpuPeak p = core::measure_cpu_peak(threads);
  nlohmann::json j = {{"int8_instructions", p.int8_instructions}, {"fp32_instructions", p.fp32_instructions}};
  for (const auto& r : p.rates)
    j["threads_" + std::to_string(r.threads)] = {{"int8_gmacs_per_s", r.int8_gmacs}, {"fp32_gflops_per_s", r.fp32_gflops}};
  return j;
}

}  // namespace

void add_bench(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("bench", "Inference latency, throughput and peak memory per engine, batch and threads");
  auto o = std::make_shared<BenchOpts>();
  cmd->add_option("model", o->run.model, "ONNX file or zoo spec")->required();
  cmd->add_option("--engine", o->engine, "torch (libtorch interpreter), rt (pare_rt on oneDNN) or all")
      ->check(CLI::IsMember({"torch", "rt", "all"}))
      ->capture_default_str();
  cmd->add_option("--batch,-b", o->batches, "Batch sizes (comma-separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--threads", o->threads, "Thread counts (comma-separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--seconds", o->run.seconds, "Time each configuration at least this long")->capture_default_str();
  cmd->add_option("--iters", o->run.min_iters, "... and at least this many runs")->capture_default_str();
  cmd->add_option("--warmup", o->run.warmup, "Untimed runs first")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the rows as JSON");
  cmd->add_flag("--profile", o->run.profile,
                "--engine rt: time each step; report ms per op type and the largest convolution's "
                "multiply-accumulates per second");
  cmd->add_flag("--peak", o->peak,
                "Also measure this CPU's int8 and fp32 peak per --threads count (the instructions int8 and "
                "float kernels use, no memory traffic), to put the convolution rate in proportion");
  cmd->callback([&action, o] {
    action = [o] {
      for (auto b : o->batches) PARE_CHECK(b >= 1, "--batch sizes must be >= 1, got ", b);
      for (auto t : o->threads) PARE_CHECK(t >= 1, "--threads must be >= 1, got ", t);
      PARE_CHECK(o->run.seconds >= 0 && o->run.min_iters >= 1 && o->run.warmup >= 0, "--seconds, --iters and --warmup must be "
                 "non-negative (--iters >= 1)");
      // A bad file fails here, once, with exit 2. The parent runs no libtorch or OpenMP code before
      // forking (an OpenMP runtime with threads does not survive fork).
      if (!core::is_zoo_spec(o->run.model)) reader::read_model(o->run.model);
      std::vector<std::string> engines = o->engine == "all" ? std::vector<std::string>{"torch", "rt"}
                                                            : std::vector<std::string>{o->engine};
      std::vector<engine::BenchRow> rows;
      if (!o->json)
        std::printf("%-6s %6s %7s %10s %10s %10s %13s %10s\n", "engine", "batch", "threads", "p50 ms", "p90 ms",
                    "p99 ms", "samples/s", "peak MB");
      for (int64_t b : o->batches)
        for (int t : o->threads)
          for (auto& e : engines) {
            engine::BenchRow r = engine::bench_in_child(o->run, e, b, t);
            if (!o->json) {
              if (!r.error.empty())
                std::printf("%-6s %6lld %7d  failed: %s\n", e.c_str(), (long long)b, t, r.error.c_str());
              else
                std::printf("%-6s %6lld %7d %10.3f %10.3f %10.3f %13.0f %10.1f\n", e.c_str(), (long long)b, t, r.p50,
                            r.p90, r.p99, r.samples_per_s, r.peak_rss_kb / 1024.0);
              std::fflush(stdout);
            }
            rows.push_back(r);
          }
      bool failed = false;
      nlohmann::json j = nlohmann::json::array();
      for (auto& r : rows) {
        j.push_back(engine::to_json(r));
        failed = failed || !r.error.empty();
      }
      nlohmann::json peak;
      if (o->peak) peak = peak_json(o->threads);
      if (!o->json) {
        for (auto& r : rows) {
          if (r.profile.is_null()) continue;
          std::printf("profile %s batch %lld threads %d:", r.engine.c_str(), (long long)r.batch, r.threads);
          for (auto& [op, ms] : r.profile["ms_per_run_by_op"].items()) std::printf(" %s %.3f ms", op.c_str(), ms.get<double>());
          std::printf("\n");
          if (r.profile.contains("largest_conv")) {
            const auto& c = r.profile["largest_conv"];
            std::printf("  largest conv %s: %.1f M MACs in %.3f ms = %.1f GMAC/s\n", c["node"].get<std::string>().c_str(),
                        c["macs"].get<double>() / 1e6, c["ms"].get<double>(), c["gmacs_per_s"].get<double>());
          }
        }
        if (!peak.is_null()) std::printf("peak: %s\n", peak.dump().c_str());
      }
      if (o->json) {
        nlohmann::json out = {{"model", o->run.model}, {"rows", j}};
        if (!peak.is_null()) out["peak"] = peak;
        std::cout << out.dump(2) << "\n";
      }
      if (failed) throw Error("pare bench: a configuration failed (see above)");
    };
  });
}

}  // namespace pare::cli
