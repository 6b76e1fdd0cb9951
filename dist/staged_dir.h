// A folder written whole by the ranks of a run (a teacher cache's shards, a sequence-KD set), then
// put in the place of the one it replaces.
//
//   dist::StagedDir staged(out, rank, pg.get(), "teacher cache");  // out.partial, made by rank 0
//   ... every rank writes its files into staged.path() ...
//   staged.commit(pg.get());                                        // out.partial becomes out
#pragma once

#include <string>

namespace pare::dist {

class ProcessGroup;

/// DIR.partial, where a folder is written whole before it takes the place of DIR (replace_dir): a
/// crash or a full disk leaves the previous folder as it was, never a mix of old and new files.
/// Rank 0 makes it (removing one that a dead run left) and removes it when the write fails.
class StagedDir {
 public:
  /// Throws InputError when `dir` exists and is not a folder, or is a non-empty folder without an
  /// index.json (not a `what` that may be replaced), or DIR's parent does not exist. Collective with `pg`.
  StagedDir(const std::string& dir, int rank, ProcessGroup* pg, const std::string& what);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  const std::string& path() const { return path_; }
  /// Once every rank's files and the index are in: the folder takes DIR's place, and every rank
  /// returns with it there. Collective with `pg`.
  void commit(ProcessGroup* pg);

 private:
  std::string dir_, path_;
  int rank_;
  bool committed_ = false;
};

}  // namespace pare::dist
