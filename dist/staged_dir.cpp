#include "dist/staged_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"
#include "dist/world.h"

namespace pare::dist {

StagedDir::StagedDir(const std::string& dir, int rank, ProcessGroup* pg, const std::string& what)
    : dir_(dir), path_(dir + ".partial"), rank_(rank) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    PARE_CHECK(S_ISDIR(st.st_mode), "'", dir, "' exists and is not a folder");
    PARE_CHECK(file_exists(join_path(dir, "index.json")) || std::filesystem::is_empty(dir), "'", dir,
               "' is a folder that holds no ", what, ": a ", what, " replaces its folder whole, so give a new or "
               "empty one");
  }
  if (rank_ == 0) {
    remove_dir(path_);
    if (::mkdir(path_.c_str(), 0755) != 0) {
      const std::string why = "cannot create the folder '" + path_ + "': " + std::strerror(errno);
      if (errno == ENOENT || errno == ENOTDIR) throw InputError(why);  // the --out path's parent is not there
      throw Error(why);
    }
  }
  if (pg) pg->barrier();
}

StagedDir::~StagedDir() {
  std::error_code ec;
  if (rank_ == 0 && !committed_) std::filesystem::remove_all(path_, ec);
}

void StagedDir::commit(ProcessGroup* pg) {
  if (rank_ == 0) replace_dir(path_, dir_);
  committed_ = true;
  if (pg) pg->barrier();
}

}  // namespace pare::dist
