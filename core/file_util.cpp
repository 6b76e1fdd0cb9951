#include "core/file_util.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

namespace {

// A temporary file of write_file_atomic: PATH.tmp.PID.N. Returns PID, or 0 if `name` is not one of
// `base`'s.
pid_t temporary_owner(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  const char* p = name.c_str() + prefix.size();
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(p, &end, 10);
  if (errno != 0 || end == p || *end != '.' || pid <= 0 || pid > INT32_MAX) return 0;
  const char* n = end + 1;
  if (*n == '\0' || std::strspn(n, "0123456789") != std::strlen(n)) return 0;
  return static_cast<pid_t>(pid);
}

// Removes the temporary files of `path` that killed writers left (a SIGKILL, a power cut). One is
// stale when its process no longer runs here and nobody holds its lock: every writer holds an
// flock on its temporary file while it writes, which the kernel drops when the process dies, and
// which NFS carries to the other hosts that share the folder (where the PID means nothing).
void remove_stale_temporaries(const std::string& path) {
  const std::string dir = dir_name(path);
  const std::string base = std::filesystem::path(path).filename().string();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = temporary_owner(name, base);
    if (pid == 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string file = join_path(dir, name);
    const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(file.c_str());
    ::close(fd);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  // Held until the file is renamed (or removed): while it is, no other pare takes the file for a
  // killed writer's (remove_stale_temporaries).
  const int lock = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (lock < 0) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  ::flock(lock, LOCK_EX | LOCK_NB);
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out.good()) throw Error("cannot write '" + path + "': " + std::strerror(errno));
      write(out);
      out.flush();
      if (!out.good()) throw Error("write to '" + path + "' failed: " + std::strerror(errno));
    }
    ::fsync(lock);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    ::close(lock);
    throw;
  }
  ::close(lock);
  remove_stale_temporaries(path);
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

void make_dirs(const std::string& dir) {
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error("cannot create the folder '" + part + "': " + std::strerror(errno));
    if (at == std::string::npos) return;
  }
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  PARE_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError("'" + path + "' is not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile);
  m->path_ = path;
  m->size_ = static_cast<int64_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(m->size_), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    PARE_CHECK(p != MAP_FAILED, "cannot map '", path, "' (", m->size_, " bytes): ", std::strerror(err));
    m->data_ = static_cast<uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, static_cast<size_t>(size_));
}

void Hasher::add(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001B3ULL;
}

void Hasher::add(const std::string& s) {
  const uint64_t n = s.size();
  add(&n, sizeof(n));
  add(s.data(), s.size());
}

void Hasher::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PARE_CHECK(in.good(), "cannot read '", path, "'");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    add(buf.data(), static_cast<size_t>(in.gcount()));
  }
}

std::string Hasher::hex() const {
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h_));
  return out;
}

}  // namespace pare
