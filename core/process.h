// Running pare again as a child process: the pipeline runs each stage, the federated simulation
// its server and clients, this way.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace pare::core {

/// This executable's path (/proc/self/exe), for work that runs pare again; `who` names the caller
/// in the error.
std::string self_executable(const std::string& who);

/// Forks and runs `args` (args[0] a path). The child first restores SIGINT and SIGTERM to their
/// defaults and runs `setup` (redirections, chdir: system calls only, no allocation), and is killed
/// when this process dies, even by SIGKILL. Returns its pid; throws Error naming `who` when fork fails.
pid_t spawn_child(const std::vector<std::string>& args, const std::string& who, const std::function<void()>& setup);

}  // namespace pare::core
