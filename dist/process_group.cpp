// World from the environment, and the c10d shim: ProcessGroup over ProcessGroupGloo or, with a
// CUDA libtorch, ProcessGroupNCCL (dist/nccl.cpp).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "dist/nccl.h"
#include "dist/world.h"

namespace pare::dist {

namespace {

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  size_t used = 0;
  int out = 0;
  try {
    out = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PARE_CHECK(used > 0 && v[used] == '\0', "environment variable ", name, "='", v, "' is not an integer");
  return out;
}

std::string env_str(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

// Gloo's options for this world: the loopback device when every rank is on this host.
c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options(const World& w, std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (w.local_world_size == w.world_size)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return opts;
}

// The one shim over a c10d backend (Gloo or NCCL): the backend differs only in how a group over a
// store is made (`make_`), the collectives are the same calls.
class C10dGroup : public ProcessGroup {
 public:
  using Maker = std::function<c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>&)>;

  C10dGroup(const World& w, Backend backend, const at::Device& device, std::chrono::milliseconds timeout)
      : rank_(w.rank), size_(w.world_size), backend_(backend), timeout_(timeout) {
    const std::string where = w.master_addr + ":" + std::to_string(w.master_port);
    try {
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(w.master_port);
      so.isServer = !w.use_agent_store && w.rank == 0;
      so.numWorkers = w.world_size;
      so.waitWorkers = false;
      so.timeout = timeout;
      c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(w.master_addr, so);
      if (w.use_agent_store)
        store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(w.restart_count), store);
      store_ = store;
      if (backend == Backend::kNccl) {
        make_ = [rank = w.rank, size = w.world_size, device, timeout](const c10::intrusive_ptr<c10d::Store>& st) {
          return make_nccl_backend(st, rank, size, device, timeout);
        };
      } else {
        auto opts = gloo_options(w, timeout);
        make_ = [rank = w.rank, size = w.world_size, opts](const c10::intrusive_ptr<c10d::Store>& st) {
          return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<c10d::ProcessGroupGloo>(st, rank, size, opts));
        };
      }
      pg_ = make_(c10::make_intrusive<c10d::PrefixStore>("pare_pg", store_));
    } catch (const c10::Error& e) {
      throw Error("rank " + std::to_string(w.rank) + " of " + std::to_string(w.world_size) + " could not join the " +
                  backend_name(backend) + " process group at " + where + ": " + e.what_without_backtrace());
    }
  }

  C10dGroup(const C10dGroup& parent, const std::string& name)
      : rank_(parent.rank_),
        size_(parent.size_),
        backend_(parent.backend_),
        timeout_(parent.timeout_),
        store_(parent.store_),
        make_(parent.make_) {
    try {
      pg_ = make_(c10::make_intrusive<c10d::PrefixStore>("pare_pg_" + name, store_));
    } catch (const c10::Error& e) {
      throw Error("rank " + std::to_string(rank_) + " could not create process group '" + name +
                  "': " + e.what_without_backtrace());
    }
  }

  std::shared_ptr<ProcessGroup> new_group(const std::string& name) override {
    return std::make_shared<C10dGroup>(*this, name);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return backend_; }

  void all_reduce(at::Tensor& t, Reduce op) override {
    const bool low = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;  // Gloo 1.13: no bf16
    std::vector<at::Tensor> ts = {low || !t.is_contiguous() ? t.to(at::kFloat).contiguous() : t};
    finish(pg_->allreduce(ts), "all_reduce");
    if (op == Reduce::kAvg) ts[0].div_(size_);
    if (!ts[0].is_same(t)) t.copy_(ts[0]);
  }

  void all_reduce_async(at::Tensor& flat) override {
    PARE_ASSERT(flat.is_contiguous(), "all_reduce_async needs a contiguous buffer");
    std::vector<at::Tensor> ts = {flat};
    pending_.push_back(pg_->allreduce(ts));
  }

  void wait() override {
    const auto works = std::move(pending_);
    pending_.clear();
    for (auto& w : works) finish(w, "an asynchronous all_reduce, send or recv");
  }

  void broadcast(at::Tensor& t, int root) override {
    std::vector<at::Tensor> ts = {t.is_contiguous() ? t : t.contiguous()};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    finish(pg_->broadcast(ts, o), "broadcast");
    if (!ts[0].is_same(t)) t.copy_(ts[0]);
  }

  std::vector<at::Tensor> all_gather(const at::Tensor& t) override {
    std::vector<at::Tensor> in = {t.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(at::empty_like(in[0]));
    finish(pg_->allgather(out, in), "all_gather");
    return out[0];
  }

  void barrier() override { finish(pg_->barrier(), "barrier"); }

  void send(const at::Tensor& t, int dst, int tag) override {
    PARE_ASSERT(t.is_contiguous(), "send needs a contiguous tensor");
    std::vector<at::Tensor> ts = {t};
    pending_.push_back(pg_->send(ts, dst, tag));
  }

  void recv(at::Tensor& t, int src, int tag) override {
    PARE_ASSERT(t.is_contiguous(), "recv needs a contiguous tensor");
    std::vector<at::Tensor> ts = {t};
    finish(pg_->recv(ts, src, tag), "recv");
  }

 private:
  // Waits for `work`. A peer that died or stopped answering surfaces here as c10d's error (Gloo:
  // "Connection closed by peer", "Timed out waiting 5000ms ..."): it becomes pare's, saying which
  // rank waited in what, and why that happens.
  void finish(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      work->wait();
    } catch (const c10::Error& e) {
      fail(what, e.what_without_backtrace());
    } catch (const std::exception& e) {  // Gloo's own exceptions (gloo::IoException) come through as they are
      fail(what, e.what());
    }
  }

  [[noreturn]] void fail(const char* what, const std::string& why) {
    pending_.clear();
    throw Error(pare::detail::concat("rank ", rank_, " of ", size_, ": ", what, " failed: another rank died, or did not ",
                               "take part within the timeout of ", timeout_.count() / 1000.0, " s (--timeout): ", why));
  }

  int rank_, size_;
  Backend backend_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  Maker make_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_;
};

}  // namespace

World World::from_env() {
  World w;
  w.world_size = env_int("WORLD_SIZE", 1);
  w.rank = env_int("RANK", 0);
  w.local_rank = env_int("LOCAL_RANK", w.rank);
  w.local_world_size = env_int("LOCAL_WORLD_SIZE", w.world_size);
  w.group_rank = env_int("GROUP_RANK", 0);
  w.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  w.master_addr = env_str("MASTER_ADDR", w.master_addr);
  w.master_port = env_int("MASTER_PORT", w.master_port);
  const std::string agent = env_str("TORCHELASTIC_USE_AGENT_STORE", "False");
  w.use_agent_store = agent == "True" || agent == "true" || agent == "1";
  w.error_file = env_str("TORCHELASTIC_ERROR_FILE", "");
  PARE_CHECK(w.world_size >= 1, "environment variable WORLD_SIZE=", w.world_size, " must be at least 1");
  PARE_CHECK(w.rank >= 0 && w.rank < w.world_size, "environment variable RANK=", w.rank,
             " must lie in [0, WORLD_SIZE=", w.world_size, ")");
  PARE_CHECK(w.master_port > 0 && w.master_port < 65536, "environment variable MASTER_PORT=", w.master_port,
             " is not a port");
  return w;
}

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const World& world, std::chrono::milliseconds timeout) {
  return connect(world, Backend::kGloo, at::kCPU, timeout);
}

// c10d's FlightRecorder (PyTorch 2.x) keeps a record of every collective, with a captured
// traceback, for debugging NCCL hangs from Python: a cost on every collective that pare never
// reads, and in 2.11 it inserts into a std::map before taking its lock, so groups recording at once
// in one process race (a SEGV under ASan in dist's tests, whose ranks are threads). Off unless the
// user asks for it; c10d reads the variable when it first records.
namespace {
void flight_recorder_off_unless_asked() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("TORCH_FR_BUFFER_SIZE") && !std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE"))
      ::setenv("TORCH_FR_BUFFER_SIZE", "0", 0);
  });
}
}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const World& world, Backend backend, const at::Device& device,
                                                    std::chrono::milliseconds timeout) {
  flight_recorder_off_unless_asked();
  if (backend == Backend::kNccl) parse_backend("nccl", device);  // checked: built with NCCL, a CUDA device
  return std::make_shared<C10dGroup>(world, backend, device, timeout);
}

bool nccl_built() {
#ifdef PARE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

Backend parse_backend(const std::string& name, const at::Device& device) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "auto") return device.is_cuda() && nccl_built() ? Backend::kNccl : Backend::kGloo;
  PARE_CHECK_OPTION(name == "nccl", "backend", "must be auto, gloo or nccl, got '", name, "'");
  PARE_CHECK_OPTION(nccl_built(), "backend", "nccl: this pare is built without c10d's NCCL backend (it needs a "
                    "libtorch with CUDA and NCCL); use gloo");
  PARE_CHECK_OPTION(device.is_cuda(), "backend", "nccl reduces CUDA tensors, but the device is ", device.str(),
                    "; use gloo, or a CUDA device");
  return Backend::kNccl;
}

const char* backend_name(Backend b) { return b == Backend::kNccl ? "NCCL" : "Gloo"; }

at::Tensor ProcessGroup::all_gather_rows(const at::Tensor& t, const std::vector<int64_t>& rows) {
  PARE_CHECK(static_cast<int>(rows.size()) == size() && t.dim() >= 1 && t.size(0) == rows[rank()],
             "all_gather_rows: ", t.sizes(), " on rank ", rank(), " of rows ", c10::IntArrayRef(rows));
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  at::Tensor padded = t.contiguous();
  if (t.size(0) < most) {
    std::vector<int64_t> pad = t.sizes().vec();
    pad[0] = most - t.size(0);
    padded = at::cat({padded, at::zeros(pad, t.options())});
  }
  auto parts = all_gather(padded);
  for (size_t r = 0; r < parts.size(); ++r) parts[r] = parts[r].narrow(0, 0, rows[r]);
  return at::cat(parts);
}

at::Tensor ProcessGroup::reduce_scatter(const at::Tensor& t, Reduce op) {
  PARE_CHECK(t.dim() >= 1 && t.size(0) % size() == 0, "reduce_scatter: dim 0 of ", t.sizes(),
             " does not split into ", size(), " equal parts");
  at::Tensor all = t.clone();
  all_reduce(all, op);
  const int64_t part = t.size(0) / size();
  return all.narrow(0, part * rank(), part).clone();
}

}  // namespace pare::dist
