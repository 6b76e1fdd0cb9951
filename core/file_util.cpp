#include "core/file_util.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pare {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PARE_CHECK(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  PARE_CHECK(!in.bad(), "cannot read '", path, "'");
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string dir_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& rel) {
  if (rel.empty()) return dir;
  if (rel[0] == '/' || dir.empty() || dir == ".") return rel;
  return dir.back() == '/' ? dir + rel : dir + "/" + rel;
}

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out.good()) throw Error("cannot write '" + path + "': " + std::strerror(errno));
      write(out);
      out.flush();
      if (!out.good()) throw Error("write to '" + path + "' failed: " + std::strerror(errno));
    }
    int fd = ::open(tmp.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void write_file_atomic(const std::string& path, std::string_view data) {
  write_file_atomic(path, [&](std::ostream& out) { out.write(data.data(), data.size()); });
}

void remove_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) throw Error("cannot remove the folder '" + dir + "': " + ec.message());
}

void replace_dir(const std::string& staged, const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (std::rename(staged.c_str(), dir.c_str()) != 0)
      throw Error("cannot rename '" + staged + "' to '" + dir + "': " + std::strerror(errno));
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_dir(staged);  // now the old folder
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    throw Error("cannot put '" + staged + "' in the place of '" + dir + "': " + std::strerror(errno));
  const std::string old = dir + ".old." + std::to_string(::getpid());
  if (std::rename(dir.c_str(), old.c_str()) != 0 || std::rename(staged.c_str(), dir.c_str()) != 0)
    throw Error("cannot put '" + staged + "' in the place of '" + dir + "': " + std::strerror(errno));
  remove_dir(old);
}

}  // namespace pare
