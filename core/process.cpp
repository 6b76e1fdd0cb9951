#include "core/process.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace pare::core {

std::string self_executable(const std::string& who) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  PARE_CHECK(n > 0, who, ": cannot find its own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

pid_t spawn_child(const std::vector<std::string>& args, const std::string& who, const std::function<void()>& setup) {
  std::vector<char*> argv;  // built before the fork: the child only makes system calls
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(who + ": fork: " + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (setup) setup();
  ::execv(argv[0], argv.data());
  std::fprintf(stderr, "%s: cannot run %s: %s\n", who.c_str(), argv[0], std::strerror(errno));
  ::_exit(127);
}

}  // namespace pare::core
