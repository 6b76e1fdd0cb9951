// pare bench MODEL [--engine torch|rt|all] [--batch 1,64] [--threads 1,2] [--seconds S] [--json]
//
// Latency (p50/p90/p99), throughput and peak memory of inference, per engine, batch size and
// thread count. Each configuration runs in a child process of its own, so that its peak resident
// memory is its own and thread pools start fresh.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>  // at::set_num_threads

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/cpu_peak.h"
#include "core/error.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/onnx_reader.h"
#include "core/zoo.h"
#include "export/rt_bridge.h"

namespace pare::cli {

namespace {

struct BenchOpts {
  std::string model, engine = "all";
  std::vector<int64_t> batches = {1, 64};
  std::vector<int> threads = {1, 2};
  double seconds = 2;
  int warmup = 5, min_iters = 10;
  bool json = false, profile = false, peak = false;
};

struct Row {
  std::string engine;
  int64_t batch = 0;
  int threads = 0;
  int64_t iters = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // ms
  double samples_per_s = 0;
  int64_t peak_rss_kb = 0;
  std::string error;
  nlohmann::json profile;  ///< --profile, engine rt: time per op type and the largest convolution
};

nlohmann::json to_json(const Row& r) {
  nlohmann::json j = {{"engine", r.engine},   {"batch", r.batch},  {"threads", r.threads},
                      {"iters", r.iters},     {"p50_ms", r.p50},   {"p90_ms", r.p90},
                      {"p99_ms", r.p99},      {"mean_ms", r.mean}, {"samples_per_s", r.samples_per_s},
                      {"peak_rss_kb", r.peak_rss_kb}};
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.profile.is_null()) j["profile"] = r.profile;
  return j;
}

// Per op type: ms per run; and the convolution with the most multiply-accumulates, with its rate.
nlohmann::json summarize_profile(const std::vector<rt::StepProfile>& steps) {
  std::map<std::string, double> per_op;
  const rt::StepProfile* largest = nullptr;
  int64_t runs = 1;
  for (auto& s : steps) {
    runs = std::max(runs, s.calls);
    if ((s.op == "Conv" || s.op == "QConv") && (!largest || s.macs > largest->macs)) largest = &s;
  }
  for (auto& s : steps) per_op[s.op] += s.ms / static_cast<double>(runs);
  nlohmann::json j = {{"ms_per_run_by_op", per_op}};
  if (largest && largest->calls) {
    const double ms = largest->ms / static_cast<double>(largest->calls);
    j["largest_conv"] = {{"node", largest->node}, {"op", largest->op}, {"macs", largest->macs}, {"ms", ms},
                         {"gmacs_per_s", static_cast<double>(largest->macs) / ms / 1e6}};
  }
  return j;
}

// Inputs of the declared shapes with the batch dims bound to `batch`: floats uniform in [0, 1),
// integers 0 (valid token ids and indices).
std::vector<at::Tensor> make_inputs(const std::vector<core::ValueInfo>& inputs, int64_t batch, const std::string& model) {
  std::vector<at::Tensor> r;
  for (auto& in : inputs) {
    std::vector<int64_t> dims;
    for (auto& d : in.shape) {
      PARE_CHECK(d.is_fixed() || !d.symbol.empty() || &d == &in.shape[0], "'", model, "': input '", in.name,
                 "' has an unnamed unknown dim; pare bench binds only the batch dim");
      dims.push_back(d.is_fixed() ? d.value : batch);
    }
    if (at::isFloatingType(in.dtype)) r.push_back(at::rand(dims, at::TensorOptions().dtype(in.dtype)));
    else r.push_back(at::zeros(dims, at::TensorOptions().dtype(in.dtype)));
  }
  return r;
}

// Times `step` until both `min_iters` runs and `seconds` have passed, after `warmup` runs.
template <class F>
Row time_it(F step, const BenchOpts& o) {
  for (int i = 0; i < o.warmup; ++i) step();
  std::vector<double> ms;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const double total = std::chrono::duration<double>(t1 - start).count();
    if (static_cast<int>(ms.size()) >= o.min_iters && total >= o.seconds) break;
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) { return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * (sorted.size() - 1) + 0.5))]; };
  Row r;
  r.iters = static_cast<int64_t>(ms.size());
  r.p50 = pct(0.5);
  r.p90 = pct(0.9);
  r.p99 = pct(0.99);
  double sum = 0;
  for (double v : ms) sum += v;
  r.mean = sum / static_cast<double>(ms.size());
  return r;
}

Row bench_one(const BenchOpts& o, const std::string& engine, int64_t batch, int threads) {
  core::Graph g = core::load_model(o.model);
  const std::vector<at::Tensor> xs = make_inputs(g.inputs, batch, o.model);
  Row r;
  if (engine == "torch") {
    at::set_num_threads(threads);
    core::Module m(std::move(g), core::Module::Use::kFrozen);
    m.eval();
    at::NoGradGuard no_grad;
    r = time_it([&] { m.forward(xs); }, o);
  } else {
    rt::Model m = exporter::load_rt_model(o.model, rt::Options().threads(threads).profile(o.profile));
    std::vector<rt::TensorView> views;
    for (auto& x : xs) views.push_back(exporter::rt_view(x));
    r = time_it([&] { m.run(views); }, o);
    if (o.profile) r.profile = summarize_profile(m.profile());
  }
  r.engine = engine;
  r.batch = batch;
  r.threads = threads;
  r.samples_per_s = static_cast<double>(batch) * 1000.0 / r.mean;
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  r.peak_rss_kb = ru.ru_maxrss;
  return r;
}

// Runs one configuration in a child process and reads its row back through a pipe.
Row bench_forked(const BenchOpts& o, const std::string& engine, int64_t batch, int threads) {
  int fds[2];
  PARE_CHECK(::pipe(fds) == 0, "pare bench: cannot create a pipe");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  PARE_CHECK(pid >= 0, "pare bench: cannot fork");
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = to_json(bench_one(o, engine, batch, threads)).dump();
    } catch (const std::exception& e) {
      Row r;
      r.engine = engine;
      r.batch = batch;
      r.threads = threads;
      r.error = e.what();
      out = to_json(r).dump();
    }
    const char* p = out.data();
    size_t left = out.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  Row r;
  r.engine = engine;
  r.batch = batch;
  r.threads = threads;
  if (text.empty()) {
    r.error = "the benchmark process died (status " + std::to_string(status) + ")";
    return r;
  }
  const auto j = nlohmann::json::parse(text);
  r.iters = j.at("iters");
  r.p50 = j.at("p50_ms");
  r.p90 = j.at("p90_ms");
  r.p99 = j.at("p99_ms");
  r.mean = j.at("mean_ms");
  r.samples_per_s = j.at("samples_per_s");
  r.peak_rss_kb = j.at("peak_rss_kb");
  if (j.contains("error")) r.error = j.at("error");
  if (j.contains("profile")) r.profile = j.at("profile");
  return r;
}

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
  cmd->add_option("model", o->model, "ONNX file or zoo spec")->required();
  cmd->add_option("--engine", o->engine, "torch (libtorch interpreter), rt (pare_rt on oneDNN) or all")
      ->check(CLI::IsMember({"torch", "rt", "all"}))
      ->capture_default_str();
  cmd->add_option("--batch,-b", o->batches, "Batch sizes (comma-separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--threads", o->threads, "Thread counts (comma-separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--seconds", o->seconds, "Time each configuration at least this long")->capture_default_str();
  cmd->add_option("--iters", o->min_iters, "... and at least this many runs")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the rows as JSON");
  cmd->add_flag("--profile", o->profile,
                "--engine rt: time each step; report ms per op type and the largest convolution's "
                "multiply-accumulates per second");
  cmd->add_flag("--peak", o->peak,
                "Also measure this CPU's int8 and fp32 peak per --threads count (the instructions int8 and "
                "float kernels use, no memory traffic), to put the convolution rate in proportion");
  cmd->callback([&action, o] {
    action = [o] {
      for (auto b : o->batches) PARE_CHECK(b >= 1, "--batch sizes must be >= 1, got ", b);
      for (auto t : o->threads) PARE_CHECK(t >= 1, "--threads must be >= 1, got ", t);
      PARE_CHECK(o->seconds >= 0 && o->min_iters >= 1 && o->warmup >= 0, "--seconds, --iters and --warmup must be "
                 "non-negative (--iters >= 1)");
      // A bad file fails here, once, with exit 2. The parent runs no libtorch or OpenMP code before
      // forking (an OpenMP runtime with threads does not survive fork).
      if (!core::is_zoo_spec(o->model)) reader::read_model(o->model);
      std::vector<std::string> engines = o->engine == "all" ? std::vector<std::string>{"torch", "rt"}
                                                            : std::vector<std::string>{o->engine};
      std::vector<Row> rows;
      if (!o->json)
        std::printf("%-6s %6s %7s %10s %10s %10s %13s %10s\n", "engine", "batch", "threads", "p50 ms", "p90 ms",
                    "p99 ms", "samples/s", "peak MB");
      for (int64_t b : o->batches)
        for (int t : o->threads)
          for (auto& e : engines) {
            Row r = bench_forked(*o, e, b, t);
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
        j.push_back(to_json(r));
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
        nlohmann::json out = {{"model", o->model}, {"rows", j}};
        if (!peak.is_null()) out["peak"] = peak;
        std::cout << out.dump(2) << "\n";
      }
      if (failed) throw Error("pare bench: a configuration failed (see above)");
    };
  });
}

}  // namespace pare::cli
