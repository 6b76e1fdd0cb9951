#include "federated/simulate.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/tensor_io.h"
#include "federated/split.h"

namespace pare::federated {

namespace {

const char kWho[] = "pare federate simulate";

std::string pare(const SimulateOptions& o) { return o.pare.empty() ? core::self_executable(kWho) : o.pare; }

std::string client_id(int64_t k) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "client-%02lld", (long long)k);
  return buf;
}

void append(std::vector<std::string>& a, std::initializer_list<std::string> xs) { a.insert(a.end(), xs); }

// Starts `args` with stdout and stderr into `log` ("": stdout to the inherited stderr, since the
// server's JSON summary is not simulate's); it dies with this process.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const int fd = log.empty() ? 2 : ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(std::string(kWho) + ": cannot write " + log + ": " + std::strerror(errno));
  const pid_t pid = core::spawn_child(args, kWho, [&] {
    ::dup2(fd, 1);
    if (fd != 2) ::dup2(fd, 2);
  });
  if (fd != 2) ::close(fd);
  return pid;
}

// Writes client k's part of the training set as DIR/data/client-K.{x,y}.npy, and for feddf the
// server's distillation inputs (held out from the clients' data) as DIR/data/server-distill.x.npy.
// Returns each client's data spec.
std::vector<std::string> write_parts(const SimulateOptions& o) {
  core::TensorDataset ds = core::load_dataset(o.data, "train");
  core::require_labels(ds, "federated simulation");
  const uint64_t seed = o.server.seed;
  const bool feddf = o.server.mode == "feddf";
  const int64_t keep = o.train_samples > 0 ? std::min(o.train_samples, ds.size()) : ds.size();
  if (feddf && (o.distill_samples < 1 || o.distill_samples >= keep))
    throw InputError(pare::detail::concat("distill_samples must be in [1, ", keep, ") with mode feddf, got ",
                                          o.distill_samples))
        .about("distill_samples")
        .about("mode");
  const int64_t held = feddf ? o.distill_samples : 0;
  const at::Tensor perm = at::randperm(ds.size(), at::make_generator<at::CPUGeneratorImpl>(seed + 1));
  const at::Tensor server_x = ds.x.index_select(0, perm.narrow(0, keep - held, held));
  if (held > 0 || keep < ds.size()) {
    const at::Tensor idx = perm.narrow(0, 0, keep - held);
    ds.x = ds.x.index_select(0, idx);
    ds.y = ds.y.index_select(0, idx);
  }
  const Split split = split_by_spec(o.partition, ds.y, o.clients, seed);
  const std::string dir = join_path(o.out, "data");
  make_dirs(dir);
  if (feddf) core::save_npy(server_x, join_path(dir, "server-distill.x.npy"));
  std::vector<std::string> specs;
  for (int64_t k = 0; k < o.clients; ++k) {
    const at::Tensor idx = at::tensor(split[k], at::kLong);
    const std::string stem = join_path(dir, client_id(k));
    core::save_npy(ds.x.index_select(0, idx), stem + ".x.npy");
    core::save_npy(ds.y.index_select(0, idx), stem + ".y.npy");
    specs.push_back("npy:" + stem + ".x.npy," + stem + ".y.npy");
  }
  return specs;
}

// `pare federate server` with every option of o.server.
std::vector<std::string> server_args(const SimulateOptions& o, const std::string& port_file) {
  const ServerOptions& s = o.server;
  const auto str = [](auto v) { return std::to_string(v); };
  std::vector<std::string> a = {pare(o), "federate", "server", "--dir", join_path(o.out, "server"), "--listen",
                                "127.0.0.1:0", "--port-file", port_file, "--clients", str(o.clients)};
  append(a, {"--val-data", o.data, "--val-split", o.val_split, "--rounds", str(s.rounds), "--per-round",
             str(s.per_round), "--min-clients", str(s.min_clients), "--round-timeout", str(s.round_timeout),
             "--join-timeout", str(s.join_timeout)});
  append(a, {"--aggregator", s.agg.name, "--assume-byzantine", str(s.agg.assume_byzantine), "--trim", str(s.agg.trim),
             "--multi-krum-m", str(s.agg.multi_krum_m), "--clip-norm", str(s.agg.clip_norm), "--bucket",
             str(s.agg.bucket), "--server-momentum", str(s.server_momentum), "--server-lr", str(s.server_lr)});
  append(a, {"--local-epochs", str(s.local.epochs), "--batch-size", str(s.local.batch_size), "--lr", str(s.local.lr),
             "--optimizer", s.local.optimizer, "--momentum", str(s.local.momentum), "--local-kd-alpha",
             str(s.local.kd_alpha), "--local-kd-temperature", str(s.local.kd_temperature)});
  append(a, {"--seed", str(s.seed), "--max-message-mb", str(s.max_message_mb), "--threads",
             str(o.threads > 0 ? o.threads : 2)});
  for (const std::string& m : o.models) append(a, {"--model", m});
  append(a, {"--mode", s.mode, "--ensemble", s.ensemble, "--distill-epochs", str(s.distill_epochs), "--distill-lr",
             str(s.distill_lr), "--distill-temperature", str(s.distill_temperature), "--distill-batch",
             str(s.distill_batch), "--distill-val", str(s.distill_val)});
  if (s.mode == "feddf") append(a, {"--distill-data", "npy:" + join_path(o.out, "data/server-distill.x.npy")});
  if (s.agg.nnm) a.push_back("--nnm");
  if (s.agg.name == "fltrust") append(a, {"--root-data", o.data, "--root-samples", str(o.root_samples)});
  if (s.quiet) a.push_back("--quiet");
  return a;
}

// `pare federate client` number k (the first `byzantine` attack).
std::vector<std::string> client_args(const SimulateOptions& o, int64_t k, const std::string& part, int port) {
  const auto str = [](auto v) { return std::to_string(v); };
  std::vector<std::string> a = {pare(o), "federate", "client", "--server", "127.0.0.1:" + str(port), "--id",
                                client_id(k), "--data", part, "--threads", "1", "--architecture",
                                str(k % int64_t(o.models.size())), "--server-timeout",
                                str(o.server.round_timeout * 2 + 60)};
  if (k >= o.byzantine) return a;
  append(a, {"--attack", o.attack, "--attack-scale", str(o.attack_opts.scale), "--attack-flip",
             str(o.attack_opts.flip), "--attack-sigma", str(o.attack_opts.sigma), "--attack-seed",
             str(o.server.seed + uint64_t(k))});
  if (o.attack == "alie")
    append(a, {"--collude-dir", join_path(o.out, "collude"), "--colluders", str(o.byzantine), "--round-clients",
               str(o.server.per_round > 0 ? o.server.per_round : o.clients)});
  return a;
}

// Waits for the server's port file (or its early exit).
int wait_for_port(pid_t server, const std::string& port_file, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (file_exists(port_file)) return std::stoi(read_file(port_file));
    int status = 0;
    if (::waitpid(server, &status, WNOHANG) == server)
      throw Error(std::string(kWho) + ": the server exited before it listened (exit " +
                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(server, SIGKILL);
  throw Error(std::string(kWho) + ": the server did not listen within " + std::to_string(int(timeout_s)) + " s");
}

// The clients exit once the server said DONE; stragglers (a client that hangs) get 10 s, then are
// killed. Returns how many did not exit cleanly.
int wait_for_clients(const std::vector<pid_t>& pids) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    while (::waitpid(p, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(p, &st, WNOHANG) == 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, &st, 0);
    }
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  return failed;
}

// Bad options fail here, before any process starts.
void validate(const SimulateOptions& o) {
  PARE_CHECK_OPTION(o.pare.empty() || file_exists(o.pare), "pare", "must name the pare executable, got '", o.pare,
                    "', which does not exist");
  PARE_CHECK_OPTION(o.clients >= 1, "clients", "must be at least 1, got ", o.clients);
  PARE_CHECK_OPTION(o.byzantine >= 0 && o.byzantine <= o.clients, "byzantine", "must be in [0, ", o.clients, "], got ",
                    o.byzantine);
  const AttackKind kind = parse_attack(o.attack);
  PARE_CHECK_OPTION(o.byzantine == 0 || kind != AttackKind::kNone, "attack",
                    "is needed with --byzantine (sign-flip, scaling, gaussian, label-flip or alie)");
  if (kind == AttackKind::kAlie && o.byzantine > 0)  // z must be finite for the round's n
    alie_z(o.server.per_round > 0 ? std::min(o.server.per_round, o.clients) : o.clients, o.byzantine);
  ServerOptions check = o.server;
  check.clients = o.clients;
  check.dir = join_path(o.out, "server");
  check.validate();
}

}  // namespace

SimulateResult simulate(const SimulateOptions& o) {
  validate(o);
  const std::vector<std::string> parts = write_parts(o);  // a bad --partition fails before any folder is made
  make_dirs(join_path(o.out, "logs"));
  const std::string port_file = join_path(o.out, "server.port");
  std::remove(port_file.c_str());
  const pid_t server = spawn(server_args(o, port_file), "");
  const int port = wait_for_port(server, port_file, 60);
  std::vector<pid_t> pids;
  for (int64_t k = 0; k < o.clients; ++k)
    pids.push_back(spawn(client_args(o, k, parts[k], port), join_path(o.out, "logs/" + client_id(k) + ".log")));
  if (!o.server.quiet)
    std::fprintf(stderr, "simulate: server on port %d, %lld clients (%lld attacking with %s), logs in %s\n", port,
                 (long long)o.clients, (long long)o.byzantine, o.attack.c_str(), join_path(o.out, "logs").c_str());
  int status = 0;
  while (::waitpid(server, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  SimulateResult r;
  r.failed_clients = wait_for_clients(pids);
  if (code != 0) throw Error(std::string(kWho) + ": the server failed (exit " + std::to_string(code) + "); see above");
  r.model = join_path(o.out, "server/model.onnx");
  r.rounds_log = join_path(o.out, "server/rounds.jsonl");
  const std::string log = read_file(r.rounds_log);  // the last line: the last round
  const size_t start = log.size() < 2 ? std::string::npos : log.find_last_of('\n', log.size() - 2);
  r.last = parse_round(log.substr(start == std::string::npos ? 0 : start + 1), r.rounds_log);
  return r;
}

}  // namespace pare::federated
