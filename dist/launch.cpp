#include "dist/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::dist {

namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

// Installs the self-pipe handlers for SIGCHLD, SIGINT and SIGTERM; restores the old ones on exit.
class SignalScope {
 public:
  SignalScope() {
    PARE_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pare launch: pipe: ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }

 private:
  static constexpr int kSignals[3] = {SIGCHLD, SIGINT, SIGTERM};
  struct sigaction old_[3];
};

struct Stream {
  int fd = -1;
  int out = 1;  // where its lines go: 1 stdout, 2 stderr
  std::string pending;
};

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool stopped = false;  // was stopped (SIGSTOP, SIGTSTP, a debugger) when the job began to stop
  int status = 0;
  std::string error_file;
  Stream streams[2];
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Writes the complete lines of `s` (all of it when `flush`), each prefixed.
void emit(Stream& s, const std::string& prefix, bool flush) {
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    write_all(s.out, prefix + s.pending.substr(start, nl - start + 1));
  s.pending.erase(0, start);
  if (flush && !s.pending.empty()) {
    write_all(s.out, prefix + s.pending + "\n");
    s.pending.clear();
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "status " + std::to_string(status);
}

// Whether process `pid` is stopped (state T or t in /proc/PID/stat).
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'T' || line[paren + 2] == 't');
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// The message of a torchrun error file: {"message": "..."} or {"message": {"message": "..."}}.
std::string read_error_file(const std::string& path) {
  if (!file_exists(path)) return "";
  try {
    auto j = nlohmann::json::parse(read_file(path));
    auto m = j.at("message");
    std::string msg = m.is_string() ? m.get<std::string>() : m.at("message").get<std::string>();
    return msg.substr(0, msg.find('\n'));
  } catch (const std::exception&) {
    return "";
  }
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  PARE_CHECK(fd >= 0, "pare launch: socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  PARE_CHECK(ok, "pare launch: cannot find a free port: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

// The executable `cmd` resolves to, or "" (execvp's search, done first for a clear error).
std::string find_executable(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return ::access(cmd.c_str(), X_OK) == 0 ? cmd : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    std::string p = (dir.empty() ? "." : dir) + "/" + cmd;
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

class Job {
 public:
  Job(const LaunchOptions& o, int port, std::string tmp) : o_(o), port_(port), tmp_(std::move(tmp)) {}

  // Runs one attempt; returns true when every worker exited 0. Sets failed_/interrupted_.
  bool run_attempt(int attempt) {
    workers_.assign(static_cast<size_t>(o_.nproc_per_node), Worker{});
    const std::string dir = tmp_ + "/attempt_" + std::to_string(attempt);
    ::mkdir(dir.c_str(), 0700);
    for (int l = 0; l < o_.nproc_per_node; ++l) {
      Worker& w = workers_[static_cast<size_t>(l)];
      w.local_rank = l;
      w.rank = o_.node_rank * o_.nproc_per_node + l;
      w.error_file = dir + "/rank_" + std::to_string(w.rank) + ".json";
      spawn(w, attempt);
    }
    failed_rank_ = -1;
    stopping_ = false;
    loop();
    return failed_rank_ < 0 && interrupted_ == 0;
  }

  int failed_rank() const { return failed_rank_; }
  int interrupted() const { return interrupted_; }
  const Worker& worker_of_rank(int rank) const {
    return workers_.at(static_cast<size_t>(rank - o_.node_rank * o_.nproc_per_node));
  }
  int failed_status() const { return failed_status_; }
  // "; rank R (pid P) was stopped ..." for each worker that was stopped when the job failed.
  std::string stopped_workers() const {
    std::string s;
    for (auto& w : workers_)
      if (w.stopped)
        s += "; rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) +
             ") was stopped (SIGSTOP or SIGTSTP) and hung the job";
    return s;
  }

 private:
  void spawn(Worker& w, int attempt) {
    int out[2], err[2];
    PARE_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pare launch: pipe: ",
               std::strerror(errno));
    const int world = o_.nnodes * o_.nproc_per_node;
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(w.rank)},
        {"LOCAL_RANK", std::to_string(w.local_rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node)},
        {"GROUP_RANK", std::to_string(o_.node_rank)},
        {"GROUP_WORLD_SIZE", std::to_string(o_.nnodes)},
        {"ROLE_RANK", std::to_string(w.rank)},
        {"ROLE_WORLD_SIZE", std::to_string(world)},
        {"ROLE_NAME", "default"},
        {"MASTER_ADDR", o_.master_addr},
        {"MASTER_PORT", std::to_string(port_)},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts)},
        {"TORCHELASTIC_RUN_ID", o_.run_id},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"TORCHELASTIC_ERROR_FILE", w.error_file},
    };
    const bool set_omp = o_.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS");
    // Signals stay blocked across fork until the child has dropped the launcher's handlers: one
    // sent to the new worker's group meanwhile must not run them (they would report it to us).
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = ::fork();
    if (pid != 0) ::sigprocmask(SIG_SETMASK, &old, nullptr);
    PARE_CHECK(pid >= 0, "pare launch: fork: ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      // A launcher killed with SIGKILL (it cannot stop its workers then) takes them with it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::signal(SIGCHLD, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::close(g_signal_pipe[0]);
      ::close(g_signal_pipe[1]);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      if (set_omp) ::setenv("OMP_NUM_THREADS", "1", 1);
      std::vector<char*> argv;
      for (auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "pare launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);
    w.pid = pid;
    w.running = true;
    w.streams[0] = Stream{out[0], 1, ""};
    w.streams[1] = Stream{err[0], 2, ""};
  }

  std::string prefix(const Worker& w) const {
    return o_.prefix_output ? "[rank" + std::to_string(w.rank) + "]: " : "";
  }

  void signal_all(int sig) {
    for (auto& w : workers_)
      if (w.running) ::kill(-w.pid, sig);
  }

  void begin_stop(int sig) {
    if (stopping_) return;
    stopping_ = true;
    for (auto& w : workers_) w.stopped = w.running && is_stopped(w.pid);
    signal_all(sig);
    // A stopped worker would act on the signal only when continued, so only after the grace
    // period, by SIGKILL: continue it now and it ends at once.
    signal_all(SIGCONT);
    deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.grace_seconds * 1000));
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (auto& w : workers_) {
        if (w.pid != pid || !w.running) continue;
        w.running = false;
        w.status = status;
        if (failed(status) && !stopping_ && interrupted_ == 0) {
          failed_rank_ = w.rank;
          failed_status_ = status;
          begin_stop(SIGTERM);
        }
      }
    }
  }

  bool any_running() const {
    for (auto& w : workers_)
      if (w.running) return true;
    return false;
  }

  void loop() {
    Clock::time_point drain_until{};
    for (;;) {
      std::vector<pollfd> fds = {{g_signal_pipe[0], POLLIN, 0}};
      std::vector<Stream*> streams;
      for (auto& w : workers_)
        for (auto& s : w.streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            streams.push_back(&s);
          }
      const bool running = any_running();
      if (!running) {
        // Every worker is reaped: read what is left in the pipes, but do not wait for a
        // grandchild that keeps one open.
        if (drain_until == Clock::time_point{}) drain_until = Clock::now() + std::chrono::seconds(1);
        if (streams.empty() || Clock::now() > drain_until) break;
      }
      ::poll(fds.data(), fds.size(), 100);
      if (fds[0].revents & POLLIN) {
        unsigned char sigs[64];
        ssize_t n;
        while ((n = ::read(g_signal_pipe[0], sigs, sizeof(sigs))) > 0)
          for (ssize_t i = 0; i < n; ++i)
            if (sigs[i] == SIGINT || sigs[i] == SIGTERM) {
              if (interrupted_ == 0) interrupted_ = sigs[i];
              begin_stop(sigs[i]);
            }
      }
      reap();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Stream& s = *streams[i - 1];
        char buf[65536];
        ssize_t n = ::read(s.fd, buf, sizeof(buf));
        if (n > 0) {
          s.pending.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          ::close(s.fd);
          s.fd = -1;
        }
        for (auto& w : workers_)
          for (auto& ws : w.streams)
            if (&ws == &s) emit(s, prefix(w), s.fd < 0);
      }
      if (stopping_ && running && Clock::now() > deadline_) {
        signal_all(SIGKILL);
        deadline_ = Clock::time_point::max();
      }
    }
    for (auto& w : workers_) {
      for (auto& s : w.streams) {
        emit(s, prefix(w), true);
        if (s.fd >= 0) ::close(s.fd);
        s.fd = -1;
      }
      // Whatever the worker left in its process group goes with it.
      if (stopping_) ::kill(-w.pid, SIGKILL);
    }
  }

  const LaunchOptions& o_;
  const int port_;
  const std::string tmp_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  Clock::time_point deadline_{};
  int failed_rank_ = -1, failed_status_ = 0, interrupted_ = 0;
};

}  // namespace

void validate(const LaunchOptions& o) {
  PARE_CHECK_OPTION(o.nproc_per_node >= 1, "nproc_per_node", "must be at least 1, got ", o.nproc_per_node);
  PARE_CHECK_OPTION(o.nnodes >= 1, "nnodes", "must be at least 1, got ", o.nnodes);
  PARE_CHECK_OPTION(o.node_rank >= 0 && o.node_rank < o.nnodes, "node_rank", "must lie in [0, ", o.nnodes,
             "), got ", o.node_rank);
  PARE_CHECK_OPTION(o.max_restarts >= 0, "max_restarts", "must be >= 0, got ", o.max_restarts);
  PARE_CHECK_OPTION(o.master_port >= 0 && o.master_port < 65536, "master_port", "must lie in [0, 65535], got ",
                    o.master_port);
  if (o.nnodes > 1 && o.master_port <= 0)
    throw InputError(pare::detail::concat("nnodes ", o.nnodes, " needs master_port (and master_addr) shared by every node"))
        .about("nnodes").about("master_port").about("master_addr");
  if (o.nnodes > 1 && o.max_restarts != 0)
    throw InputError("max_restarts needs every node to restart together, which needs a rendezvous; "
                     "pare launch restarts single-node jobs only").about("max_restarts");
  PARE_CHECK_OPTION(o.grace_seconds >= 0, "grace_seconds", "must be >= 0, got ", o.grace_seconds);
  PARE_CHECK(!o.command.empty(), "no command to launch: pare launch [OPTIONS] -- COMMAND [ARGS...]");
  PARE_CHECK(!find_executable(o.command[0]).empty(), "cannot launch '", o.command[0],
             "': no such executable (in PATH or as a path)");
}

int launch(const LaunchOptions& o) {
  validate(o);
  const int port = o.master_port > 0 ? o.master_port : free_port();
  std::string tmpl = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/pare-launch.XXXXXX";
  PARE_CHECK(::mkdtemp(tmpl.data()) != nullptr, "pare launch: cannot create a folder for error files: ",
             std::strerror(errno));
  SignalScope signals;
  Job job(o, port, tmpl);
  int code = 0;
  for (int attempt = 0;; ++attempt) {
    if (job.run_attempt(attempt)) break;
    if (job.interrupted()) {
      std::fprintf(stderr, "pare launch: interrupted by signal %d (SIG%s); workers stopped\n", job.interrupted(),
                   sigabbrev_np(job.interrupted()));
      code = 128 + job.interrupted();
      break;
    }
    const Worker& w = job.worker_of_rank(job.failed_rank());
    std::string why = read_error_file(w.error_file);
    std::string line = "rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) +
                       ", pid " + std::to_string(w.pid) + ") failed with " + describe_status(job.failed_status()) +
                       (why.empty() ? "" : ": " + why) + job.stopped_workers();
    if (attempt < o.max_restarts) {
      std::fprintf(stderr, "pare launch: %s; restarting all workers (restart %d of %d)\n", line.c_str(),
                   attempt + 1, o.max_restarts);
      continue;
    }
    std::fprintf(stderr, "pare launch: %s%s\n", line.c_str(),
                 o.max_restarts ? (" after " + std::to_string(o.max_restarts) + " restart(s)").c_str() : "");
    const int st = job.failed_status();
    code = WIFEXITED(st) && WEXITSTATUS(st) != 0 ? WEXITSTATUS(st) : 1;
    break;
  }
  std::system(("rm -rf '" + tmpl + "'").c_str());
  return code;
}

}  // namespace pare::dist
