// pare launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
// [--max-restarts R] -- COMMAND [ARGS...]
#include <cstdlib>

#include "cli/commands.h"
#include "dist/launch.h"

namespace pare::cli {

void add_launch(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start a distributed job: N workers per node with torchrun's environment (RANK, WORLD_SIZE, "
      "MASTER_ADDR, ...)");
  auto o = std::make_shared<dist::LaunchOptions>();
  cmd->add_option("--nproc-per-node", o->nproc_per_node, "Workers on this node")->capture_default_str();
  cmd->add_option("--nnodes", o->nnodes, "Nodes in the job")->capture_default_str();
  cmd->add_option("--node-rank", o->node_rank, "This node's index in [0, nnodes)")->capture_default_str();
  cmd->add_option("--master-addr", o->master_addr, "Address of rank 0's node (it hosts the store)")
      ->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "Port of rank 0's store (0: a free port; single node)")
      ->capture_default_str();
  cmd->add_option("--max-restarts", o->max_restarts,
                  "Restart all workers this many times after a failure (they resume from their checkpoints)")
      ->capture_default_str();
  cmd->add_option("--grace-period", o->grace_seconds, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  cmd->add_option("--run-id", o->run_id, "TORCHELASTIC_RUN_ID for the workers")->capture_default_str();
  cmd->add_flag("--no-prefix{false}", o->prefix_output, "Do not prefix worker output lines with [rankN]");
  cmd->add_option("command", o->command, "The worker command and its arguments, after --")->required();
  cmd->footer(
      "Example: pare launch --nproc-per-node 2 -- pare distill --teacher t.onnx --student s ...\n"
      "When a worker fails the others get SIGTERM, then SIGKILL after the grace period; the job\n"
      "restarts (TORCHELASTIC_RESTART_COUNT counts) or exits with the failed rank's exit code (1 for\n"
      "a signal), naming it. SIGINT and\n"
      "SIGTERM are forwarded to the workers; pare launch then exits 128 + the signal number.");
  cmd->callback([&action, o] {
    action = [o] {
      int code = dist::launch(*o);
      if (code != 0) std::exit(code);
    };
  });
}

}  // namespace pare::cli
