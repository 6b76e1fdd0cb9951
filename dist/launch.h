// `pare launch`: a torchrun-style launcher. Starts N worker processes per node with torchrun's
// environment, prefixes each output line with its rank, forwards SIGINT/SIGTERM, and when a
// worker fails stops the others (SIGTERM, then SIGKILL after a grace period) and either restarts
// the whole group or exits non-zero naming the failed rank.
//
//   dist::LaunchOptions o;
//   o.nproc_per_node = 2;
//   o.max_restarts = 1;
//   o.command = {"pare", "distill", ...};
//   int code = dist::launch(o);   // 0 when every worker exited 0
//
// Workers get: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE (False: rank 0
// hosts the store), TORCHELASTIC_ERROR_FILE (a per-worker file the launcher reads back to name
// the error), and OMP_NUM_THREADS=1 when it is unset and there is more than one worker per node,
// as torchrun does. Each worker runs in its own process group, so stopping it stops its children.
#pragma once

#include <string>
#include <vector>

namespace pare::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  ///< 0: a free port on this machine (single node only)
  int max_restarts = 0;
  double grace_seconds = 5.0;  ///< between SIGTERM and SIGKILL when stopping workers
  std::string run_id = "none";
  bool prefix_output = true;  ///< "[rank1]: " before each line of a worker's stdout and stderr
  std::vector<std::string> command;
};

/// Checks the options. Throws InputError naming the option.
void validate(const LaunchOptions& o);

/// Runs the job (validate() first). Returns 0 when every worker of an attempt exited 0; otherwise,
/// after the last allowed restart, prints "pare launch: ... rank R ... exit code C" (or the
/// signal) on stderr and returns the failed worker's exit code (1 when a signal killed it). When the launcher itself gets SIGINT or SIGTERM it forwards
/// it, stops the workers and returns 128 + the signal number. Throws InputError when the command
/// cannot be started (not found or not executable).
int launch(const LaunchOptions& o);

}  // namespace pare::dist
