// Timing a model on an engine (engine/bench.h).
#include "engine/bench.h"

#include <ATen/Parallel.h>  // at::set_num_threads
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "export/rt_bridge.h"

namespace pare::engine {

nlohmann::json to_json(const BenchRow& r) {
  nlohmann::json j = {{"engine", r.engine},   {"batch", r.batch},  {"threads", r.threads},
                      {"iters", r.iters},     {"p50_ms", r.p50},   {"p90_ms", r.p90},
                      {"p99_ms", r.p99},      {"mean_ms", r.mean}, {"samples_per_s", r.samples_per_s},
                      {"peak_rss_kb", r.peak_rss_kb}};
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.profile.is_null()) j["profile"] = r.profile;
  return j;
}

namespace {

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
BenchRow time_it(F step, const BenchOptions& o) {
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
  BenchRow r;
  r.iters = static_cast<int64_t>(ms.size());
  r.p50 = pct(0.5);
  r.p90 = pct(0.9);
  r.p99 = pct(0.99);
  double sum = 0;
  for (double v : ms) sum += v;
  r.mean = sum / static_cast<double>(ms.size());
  return r;
}

}  // namespace

BenchRow bench(const BenchOptions& o, const std::string& engine, int64_t batch, int threads) {
  core::Graph g = core::load_model(o.model);
  const std::vector<at::Tensor> xs = make_inputs(g.inputs, batch, o.model);
  BenchRow r;
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

BenchRow bench_in_child(const BenchOptions& o, const std::string& engine, int64_t batch, int threads) {
  int fds[2];
  PARE_CHECK(::pipe(fds) == 0, "pare bench: cannot create a pipe");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  PARE_CHECK(pid >= 0, "pare bench: cannot fork");
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = to_json(bench(o, engine, batch, threads)).dump();
    } catch (const std::exception& e) {
      BenchRow r;
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
  BenchRow r;
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

}  // namespace pare::engine
