// Ranks and process groups for data-parallel training, on PyTorch's own c10d (Gloo on CPU; NCCL
// when libtorch has CUDA), behind one small shim (dist/process_group.cpp).
//
//   auto world = dist::World::from_env();             // torchrun's or pare launch's variables
//   if (world.distributed()) {
//     auto pg = dist::ProcessGroup::connect(world);    // rendezvous through the TCPStore
//     pg->all_reduce(t, dist::Reduce::kAvg);
//   }
//
// Store: when the launcher hosts one (TORCHELASTIC_USE_AGENT_STORE=True, torchrun's agent) every
// rank connects to MASTER_ADDR:MASTER_PORT as a client under the prefix
// "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"; otherwise (pare launch, or plain env) rank 0
// hosts a TCPStore there and the others connect to it.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace pare::dist {

/// This process's place in the job, from torchrun-style environment variables (defaults: one
/// process, rank 0 of 1).
struct World {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1, group_rank = 0;
  int restart_count = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool use_agent_store = false;
  std::string error_file;  ///< TORCHELASTIC_ERROR_FILE, "" when unset

  /// Reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
  /// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_ERROR_FILE. Throws
  /// InputError naming the variable when one is malformed or RANK is outside [0, WORLD_SIZE).
  static World from_env();
  bool distributed() const { return world_size > 1; }
};

enum class Reduce { kSum, kAvg };

/// The c10d backend that carries a group's collectives: Gloo (CPU tensors, and CUDA tensors where
/// libtorch has CUDA) or NCCL (CUDA tensors; a libtorch with CUDA and NCCL).
enum class Backend { kGloo, kNccl };
/// True when pare was built with c10d's NCCL backend (PARE_WITH_NCCL, set by CMake).
bool nccl_built();
/// "auto" (NCCL for a CUDA device when built with it, else Gloo), "gloo" or "nccl". Throws
/// InputError naming option "backend" for another name, for nccl without NCCL in this build, and
/// for nccl with a CPU `device`.
Backend parse_backend(const std::string& name, const at::Device& device);
const char* backend_name(Backend b);

/// A process group: collectives over every rank of the World, in the same order on every rank.
/// Tensors are CPU tensors with Gloo (or CUDA tensors on a CUDA libtorch), CUDA tensors with NCCL. Collectives
/// the Gloo backend lacks are covered here, the same way on every backend: kAvg (sum, then divide),
/// bfloat16 and float16 (reduced in float32), reduce_scatter (all-reduce, keep this rank's slice).
class ProcessGroup {
 public:
  /// Connects every rank (blocks until all of them have joined, or throws Error after `timeout`
  /// naming the store address).
  static std::shared_ptr<ProcessGroup> connect(const World& world,
                                               std::chrono::milliseconds timeout = std::chrono::minutes(5));
  /// The same over `backend`; with NCCL, `device` is this rank's GPU (its collectives run there).
  static std::shared_ptr<ProcessGroup> connect(const World& world, Backend backend, const at::Device& device,
                                               std::chrono::milliseconds timeout = std::chrono::minutes(5));
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  /// In place, on every rank.
  virtual void all_reduce(at::Tensor& t, Reduce op = Reduce::kSum) = 0;
  /// Several tensors reduced with one flattened buffer per call; `async` lets the caller start
  /// several buckets before waiting (wait() waits for all of them).
  virtual void all_reduce_async(at::Tensor& flat) = 0;
  /// Waits for every all_reduce_async and send started so far.
  virtual void wait() = 0;
  /// Point to point: starts sending contiguous `t` to rank `dst` (returns at once; `t` must stay
  /// alive and unchanged until wait()). Messages between two ranks with one tag arrive in order.
  virtual void send(const at::Tensor& t, int dst, int tag) = 0;
  /// Blocks until a message from `src` with `tag` has filled contiguous `t` (same size as sent).
  virtual void recv(at::Tensor& t, int src, int tag) = 0;
  /// In place: `t` takes root's value.
  virtual void broadcast(at::Tensor& t, int root = 0) = 0;
  /// Every rank's `t` (same shape everywhere), in rank order.
  virtual std::vector<at::Tensor> all_gather(const at::Tensor& t) = 0;
  /// The reduction of `t` over ranks, split along dim 0 into size() equal parts: this rank's part.
  at::Tensor reduce_scatter(const at::Tensor& t, Reduce op = Reduce::kSum);
  /// Every rank's rows of `t` (rank r holds rows[r] along dim 0; the other dims the same everywhere)
  /// concatenated in rank order, on every rank (padded to the most rows for the all-gather).
  at::Tensor all_gather_rows(const at::Tensor& t, const std::vector<int64_t>& rows);
  virtual void barrier() = 0;
  /// Another group over the same ranks and store, named `name` (collective: every rank calls it
  /// with the same name), so that its traffic never interleaves with this group's.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::string& name) = 0;
};

}  // namespace pare::dist
