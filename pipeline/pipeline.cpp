// Running a checked recipe: each stage is a pare command started in the run folder, its output
// relayed to the terminal and kept in its log; a stage whose inputs hash as before is skipped; a
// killed stage resumes from its checkpoint with --resume. After each stage its artifact is
// measured (accuracy, size, FLOPs, latency, per-layer sparsity) for the report.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "pipeline/pipeline.h"
#include "pipeline/report.h"
#include "core/data.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/torch_compat.h"

namespace pare::pipeline {

namespace {

using nlohmann::json;

volatile sig_atomic_t g_child = 0;   // the running stage's pid
volatile sig_atomic_t g_signal = 0;  // SIGINT or SIGTERM received

void forward_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) ::kill(g_child, sig);
}

std::string file_hash(const std::string& path) {
  Hasher h;
  h.add_file(path);
  return h.hex();
}

// A data spec's files: every file of the Fashion-MNIST folder, or the .npy files.
std::string data_hash(const std::string& spec) {
  std::vector<std::string> files;
  if (spec.rfind("npy:", 0) == 0) {
    for (size_t from = 4; from <= spec.size();) {
      const size_t comma = std::min(spec.find(',', from), spec.size());
      files.push_back(spec.substr(from, comma - from));
      from = comma + 1;
    }
  } else {
    const std::string dir = spec.size() > 14 ? spec.substr(14) : core::kFashionMnistDir;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (file_exists(join_path(dir, e->d_name))) files.push_back(join_path(dir, e->d_name));
      ::closedir(d);
    }
    std::sort(files.begin(), files.end());
  }
  Hasher h;
  h.add(spec);
  for (const std::string& f : files) {
    h.add(f);
    if (file_exists(f)) h.add_file(f);
  }
  return h.hex();
}

std::string now_utc() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string first_line_with(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(line.find_first_not_of(" \t:=", prefix.size()));
  return "";
}

json machine() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string os = first_line_with("/etc/os-release", "PRETTY_NAME");
  os.erase(std::remove(os.begin(), os.end(), '"'), os.end());
  return {{"cpu", first_line_with("/proc/cpuinfo", "model name")},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_bytes", static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE)},
          {"os", os},
          {"host", host}};
}

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=+@%") ==
                        std::string::npos)
    return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

json read_json(const std::string& path) {
  if (!file_exists(path)) return nullptr;
  try {
    return json::parse(read_file(path));
  } catch (const std::exception&) {
    return nullptr;
  }
}

void write_json(const std::string& path, const json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

class Runner {
 public:
  Runner(const Recipe& r, PipelineOptions o)
      : r_(r), o_(std::move(o)), self_(o_.pare.empty() ? core::self_executable("pare pipeline") : o_.pare) {
    if (o_.run_dir.empty()) o_.run_dir = "runs/" + r_.name;
  }
  int run();
  void dry_run();

 private:
  std::string path(const std::string& rel) const { return join_path(o_.run_dir, rel); }
  std::vector<std::string> argv_of(const RecipeStage& s) const;
  std::string key_of(const RecipeStage& s);
  bool done(const RecipeStage& s, const std::string& key) const;
  int spawn(const std::vector<std::string>& args, const std::string& out_file, const std::string& log, bool relay) const;
  json capture(const RecipeStage& s, std::vector<std::string> args) const;
  json summarize(const RecipeStage& s) const;
  int run_stage(const RecipeStage& s, bool force);
  void check_range(size_t& first, size_t& last);
  void write_run(const std::string& status);
  void prepare(const RecipeStage& s, const std::string& key, bool& resume) const;

  const Recipe& r_;
  PipelineOptions o_;
  std::string self_;
  std::string started_ = now_utc();
  size_t last_ = 0;  // the last stage this invocation runs (--until)
  std::map<std::string, std::string> data_hashes_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// The command line of a stage: pare (this very binary), under pare launch for nproc > 1.
std::vector<std::string> Runner::argv_of(const RecipeStage& s) const {
  std::vector<std::string> a = {self_};
  if (s.nproc > 1) a.insert(a.end(), {"launch", "--nproc-per-node", std::to_string(s.nproc), "--", self_});
  a.insert(a.end(), s.command.begin(), s.command.end());
  return a;
}

// The stage's inputs: pare's version, its command line, the artifacts of the stages it reads,
// its files and its data.
std::string Runner::key_of(const RecipeStage& s) {
  Hasher h;
  h.add(std::string("pare-pipeline-1 ") + PARE_VERSION + " libtorch " + compat::torch_version());
  h.add(std::to_string(s.nproc));
  for (const std::string& a : s.command) h.add(a);
  h.add(s.load);
  for (const std::string& up : s.upstream) {
    const json st = read_json(path(up + "/stage.json"));
    h.add(st.is_object() ? st.value("artifact_hash", std::string()) : std::string());
  }
  for (const std::string& f : s.files) h.add(file_hash(f));
  for (const std::string& d : s.data) {
    auto it = data_hashes_.find(d);
    if (it == data_hashes_.end()) it = data_hashes_.emplace(d, data_hash(d)).first;
    h.add(it->second);
  }
  return h.hex();
}

// Finished before with the same inputs, and its artifact is the one it wrote.
bool Runner::done(const RecipeStage& s, const std::string& key) const {
  const json st = read_json(path(s.dir + "/stage.json"));
  if (!st.is_object() || st.value("status", "") != "done" || st.value("key", "") != key) return false;
  if (!s.artifact) return true;
  const std::string art = path(s.dir + "/model.onnx");
  return file_exists(art) && file_hash(art) == st.value("artifact_hash", "");
}

// Runs `args` in the run folder: stdout into `out_file` (relative to the run folder) or, like
// stderr, appended to `log` and relayed to the terminal (indented) when `relay`. The child dies
// with the pipeline, even by SIGKILL. Returns its exit code (128 + signal when killed).
int Runner::spawn(const std::vector<std::string>& args, const std::string& out_file, const std::string& log,
                  bool relay) const {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(std::string("pare pipeline: pipe: ") + std::strerror(errno));
  const int out_fd = out_file.empty() ? -1 : ::open(path(out_file).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (!out_file.empty() && out_fd < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error("pare pipeline: cannot write " + path(out_file) + ": " + std::strerror(errno));
  }
  pid_t pid = -1;
  try {
    pid = core::spawn_child(args, "pare pipeline", [&] {
      if (::chdir(o_.run_dir.c_str()) != 0) ::_exit(126);
      ::dup2(fds[1], 2);
      ::dup2(out_fd < 0 ? fds[1] : out_fd, 1);
      ::close(fds[0]);
    });
  } catch (...) {
    for (const int fd : {fds[0], fds[1], out_fd})
      if (fd >= 0) ::close(fd);
    throw;
  }
  if (out_fd >= 0) ::close(out_fd);
  g_child = pid;
  ::close(fds[1]);
  std::ofstream out(log, std::ios::app | std::ios::binary);
  bool line_start = true;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.write(buf, n);
    out.flush();
    for (ssize_t i = 0; relay && i < n; ++i) {
      if (line_start) std::fputs("    ", stderr);
      std::fputc(buf[i], stderr);
      line_start = buf[i] == '\n';
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (relay && !line_start) std::fputc('\n', stderr);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// `pare ARGS --json` run for the report; its JSON, or null when it failed (noted in the log).
json Runner::capture(const RecipeStage& s, std::vector<std::string> args) const {
  args.insert(args.begin(), self_);
  const std::string out = s.dir + "/.capture.json";
  const int code = spawn(args, out, path(s.dir + "/log.txt"), false);
  json j = code == 0 ? read_json(path(out)) : nullptr;
  std::remove(path(out).c_str());
  return j;
}

// The artifact measured: size, parameters, FLOPs and per-layer sparsity (pare inspect), test
// accuracy (pare eval) and batch-1 latency on one thread (pare bench).
json Runner::summarize(const RecipeStage& s) const {
  const std::string art = s.dir + "/model.onnx";
  json sum = {{"engine", s.engine}, {"accuracy", nullptr}, {"latency_ms", nullptr}}, layers = json::array();
  const json info = capture(s, {"inspect", art, "--json"});
  if (info.is_object()) {
    for (const char* k : {"file_bytes", "parameters", "flops_per_sample", "sparsity"}) sum[k] = info.value(k, json());
    layers = info.value("layers", json::array());
  }
  if (!s.eval_data.empty()) {
    const json e = capture(s, {"eval", art, "--data", s.eval_data, "--split", "test", "--engine", s.engine, "--json"});
    if (e.is_object()) sum["accuracy"] = e.value("accuracy", json());
  }
  const json b = capture(s, {"bench", art, "--engine", s.engine, "--batch", "1", "--threads", "1", "--seconds", "0.5", "--json"});
  if (b.is_object() && b.contains("rows") && !b["rows"].empty()) sum["latency_ms"] = b["rows"][0].value("p50_ms", json());
  return {{"summary", sum}, {"layers", layers}};
}

// Before a stage runs: it resumes (--resume, the same inputs, a checkpoint left by a killed run)
// or starts clean.
void Runner::prepare(const RecipeStage& s, const std::string& key, bool& resume) const {
  const json st = read_json(path(s.dir + "/stage.json"));
  const bool same = st.is_object() && st.value("key", "") == key;
  resume = o_.resume && s.checkpoint && same && file_exists(path(s.dir + "/checkpoint.pt"));
  if (resume) return;
  for (const char* f : {"checkpoint.pt", "metrics.jsonl", "log.txt", "eval.json", "quantization.json"})
    std::remove(path(s.dir + "/" + f).c_str());
}

std::string describe(const json& sum) {
  std::string d;
  char buf[96];
  if (sum.value("accuracy", json()).is_number()) {
    std::snprintf(buf, sizeof(buf), "accuracy %.2f%%", 100 * sum["accuracy"].get<double>());
    d += buf;
  }
  if (sum.value("file_bytes", json()).is_number()) {
    std::snprintf(buf, sizeof(buf), "%s%.1f kB", d.empty() ? "" : ", ", sum["file_bytes"].get<double>() / 1000);
    d += buf;
  }
  if (sum.value("latency_ms", json()).is_number()) {
    std::snprintf(buf, sizeof(buf), ", %.3f ms (batch 1, %s)", sum["latency_ms"].get<double>(),
                  sum.value("engine", "torch").c_str());
    d += buf;
  }
  return d;
}

int Runner::run_stage(const RecipeStage& s, bool force) {
  const size_t index = static_cast<size_t>(&s - r_.stages.data());
  const std::string tag = "[" + std::to_string(index + 1) + "/" + std::to_string(r_.stages.size()) + "] " + s.name;
  make_dirs(path(s.dir));
  const std::string key = key_of(s);
  if (!force && done(s, key)) {
    if (!o_.quiet) std::fprintf(stderr, "%s: unchanged, skipped\n", tag.c_str());
    return 0;
  }
  bool resume = false;
  prepare(s, key, resume);
  json st = {{"name", s.name}, {"kind", s.kind}, {"index", index + 1}, {"line", s.line}, {"nproc", s.nproc},
             {"key", key}, {"status", "running"}, {"started", now_utc()},
             {"artifact", s.artifact ? json("model.onnx") : json()}, {"input", s.input.empty() ? json() : json(s.input)},
             {"metrics", s.checkpoint ? json("metrics.jsonl") : json()}};
  st["command"] = json::array();
  for (const std::string& a : s.load.empty() ? argv_of(s) : std::vector<std::string>{"cp", s.load, "model.onnx"})
    st["command"].push_back(a == self_ ? "pare" : a);
  write_json(path(s.dir + "/stage.json"), st);
  if (!o_.quiet) {
    std::string line;
    for (const std::string& a : st["command"]) line += (line.empty() ? "" : " ") + shell_quote(a.c_str());
    std::fprintf(stderr, "%s (%s): %s\n    $ %s\n", tag.c_str(), s.kind.c_str(), resume ? "resuming from its checkpoint" : "running",
                 line.c_str());
  }
  const auto t = std::chrono::steady_clock::now();
  int code = 0;
  if (!s.load.empty()) {
    write_file_atomic(path(s.dir + "/model.onnx"), read_file(s.load));
  } else {
    std::vector<std::string> args = argv_of(s);
    if (resume) args.push_back("--resume");
    code = spawn(args, s.kind == "eval" ? s.dir + "/eval.json" : "", path(s.dir + "/log.txt"), !o_.quiet);
  }
  st["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  if (code != 0) {
    st["status"] = "failed";
    st["exit_code"] = code;
    write_json(path(s.dir + "/stage.json"), st);
    return code;
  }
  if (s.artifact) {
    st["artifact_hash"] = file_hash(path(s.dir + "/model.onnx"));
    const json m = summarize(s);
    st["summary"] = m["summary"];
    st["layers"] = m["layers"];
  } else {
    const json e = read_json(path(s.dir + "/eval.json"));
    st["summary"] = {{"engine", s.engine}, {"accuracy", e.is_object() ? e.value("accuracy", json()) : json()}};
  }
  if (s.kind == "quantize") {
    const json q = read_json(path(s.dir + "/quantization.json"));
    if (q.is_object()) st["quantization"] = q.value("layers", json::array());
  }
  st["status"] = "done";
  st["finished"] = now_utc();
  write_json(path(s.dir + "/stage.json"), st);
  if (!o_.quiet)
    std::fprintf(stderr, "%s: done in %.1f s: %s\n", tag.c_str(), st["seconds"].get<double>(), describe(st["summary"]).c_str());
  return 0;
}

// `from` and `until` as stage indices; the stages before `from` must have finished.
void Runner::check_range(size_t& first, size_t& last) {
  auto find = [&](const std::string& name, const char* option) {
    for (size_t i = 0; i < r_.stages.size(); ++i)
      if (r_.stages[i].name == name) return i;
    std::string names;
    for (const RecipeStage& s : r_.stages) names += (names.empty() ? "" : ", ") + s.name;
    throw InputError(std::string(option) + " " + name + ": " + r_.path + " has no such stage (its stages: " + names + ")")
        .about(option);
  };
  first = o_.from.empty() ? 0 : find(o_.from, "from");
  last = o_.until.empty() ? r_.stages.size() - 1 : find(o_.until, "until");
  last_ = last;
  if (first > last)
    throw InputError(pare::detail::concat("from ", o_.from, " comes after until ", o_.until)).about("from").about("until");
  for (size_t i = 0; i < first; ++i) {
    const json st = read_json(path(r_.stages[i].dir + "/stage.json"));
    PARE_CHECK_OPTION(st.is_object() && st.value("status", "") == "done", "from", o_.from, ": the earlier stage '",
                      r_.stages[i].name, "' has not finished in ", o_.run_dir, "; run the whole recipe first");
  }
}

void Runner::write_run(const std::string& status) {
  json stages = json::array();
  std::string final_artifact;
  double seconds = 0;  // what the finished stages took, in this run or the earlier ones they come from
  for (const RecipeStage& s : r_.stages) {
    stages.push_back(s.dir);
    const json st = read_json(path(s.dir + "/stage.json"));
    // Stages after --until are not this run's, even when an earlier run finished them.
    if (&s - r_.stages.data() > static_cast<std::ptrdiff_t>(last_) || !st.is_object() ||
        st.value("status", "") != "done")
      continue;
    seconds += st.value("seconds", 0.0);
    if (s.artifact) final_artifact = s.dir + "/model.onnx";
  }
  json run = {{"format", "pare-run-1"}, {"name", r_.name}, {"recipe", r_.path}, {"pare_version", PARE_VERSION},
              {"torch_version", compat::torch_version()}, {"machine", machine()}, {"status", status},
              {"started", started_}, {"stages", stages},
              {"seconds", seconds},
              {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count()}};
  if (status != "running") run["finished"] = now_utc();
  if (!final_artifact.empty()) run["final"] = final_artifact;
  write_json(path("run.json"), run);
}

// One pipeline per run folder at a time: the lock goes with the process, even on SIGKILL.
void lock_run_dir(const std::string& dir) {
  const std::string lock = join_path(dir, ".lock");
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open '" + lock + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    throw Error("the run folder '" + dir + "' is in use by another pare pipeline; wait for it or use another --run-dir");
}

int Runner::run() {
  size_t first = 0, last = 0;
  check_range(first, last);
  make_dirs(o_.run_dir);
  lock_run_dir(o_.run_dir);
  write_file_atomic(path("recipe.yaml"), r_.text);
  write_run("running");
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  int code = 0;
  size_t i = first;
  for (; i <= last && code == 0 && !g_signal; ++i) {
    code = run_stage(r_.stages[i], !o_.from.empty());
    write_run("running");  // the final model and time so far, for a report made meanwhile
  }
  write_run(code == 0 && !g_signal ? "done" : "failed");
  try {
    write_report(o_.run_dir);
    if (!o_.quiet) std::fprintf(stderr, "report: %s\n", path("report.html").c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pare: warning: no report: %s\n", e.what());
  }
  if (g_signal) return 128 + g_signal;
  if (code != 0) {
    const RecipeStage& s = r_.stages[i - 1];
    std::fprintf(stderr, "pare: error: stage '%s' (%s:%d) failed with exit code %d; its log: %s\n", s.name.c_str(),
                 r_.path.c_str(), s.line, code, path(s.dir + "/log.txt").c_str());
    return code == 2 ? 2 : 1;
  }
  const json run = read_json(path("run.json"));
  if (!o_.out.empty() && run.contains("final")) write_file_atomic(o_.out, read_file(path(run["final"])));
  if (!o_.quiet)
    std::fprintf(stderr, "done in %.1f s: %s%s\n", run.value("wall_seconds", 0.0),
                 run.contains("final") ? path(run["final"]).c_str() : "no model",
                 o_.out.empty() ? "" : (", copied to " + o_.out).c_str());
  return 0;
}

// The plan: each stage's command and whether it would run, be skipped or resume.
void Runner::dry_run() {
  size_t first = 0, last = 0;
  check_range(first, last);
  std::printf("plan of %s (run folder %s):\n", r_.path.c_str(), o_.run_dir.c_str());
  std::vector<std::string> running;
  for (size_t i = first; i <= last; ++i) {
    const RecipeStage& s = r_.stages[i];
    std::string what;
    for (const std::string& up : s.upstream)
      if (what.empty() && std::find(running.begin(), running.end(), up) != running.end()) what = "runs (after " + up + ")";
    if (what.empty()) {
      const std::string key = key_of(s);
      const json st = read_json(path(s.dir + "/stage.json"));
      if (o_.from.empty() && done(s, key)) what = "unchanged, skipped";
      else if (o_.resume && s.checkpoint && st.is_object() && st.value("key", "") == key &&
               file_exists(path(s.dir + "/checkpoint.pt")))
        what = "resumes from its checkpoint";
      else what = "runs";
    }
    if (what.rfind("runs", 0) == 0 || what.rfind("resumes", 0) == 0) running.push_back(s.dir);
    std::string line;
    for (const std::string& a : s.load.empty() ? argv_of(s) : std::vector<std::string>{"cp", s.load, "model.onnx"})
      line += (line.empty() ? "" : " ") + shell_quote(a == self_ ? "pare" : a);
    std::printf("  %s (%s, recipe line %d): %s\n    $ %s\n", s.dir.c_str(), s.kind.c_str(), s.line, what.c_str(), line.c_str());
  }
}

}  // namespace

int run_pipeline(const Recipe& recipe, const PipelineOptions& opts) {
  Runner runner(recipe, opts);
  if (opts.dry_run) {
    runner.dry_run();
    return 0;
  }
  return runner.run();
}

}  // namespace pare::pipeline
