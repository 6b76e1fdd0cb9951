// Reading files whole and writing them atomically: every file pare writes goes through
// write_file_atomic, and every folder it writes whole (a teacher cache) through replace_dir, so an
// interrupted run or a full disk leaves the previous artifact intact, never half of one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace pare {

/// Reads a whole file. Throws InputError naming `path` if it is missing or unreadable.
std::string read_file(const std::string& path);

/// True if `path` names an existing regular file.
bool file_exists(const std::string& path);

/// Writes `path` atomically: `write` fills a temporary file next to `path`, which is flushed,
/// fsync'ed and renamed over `path`. If `write` throws (or the process dies), `path` is untouched
/// and the temporary file is removed. After a crash it is left as `PATH.tmp.PID.N`, never as `path`;
/// the next write of `path` removes such files of processes that are gone.
/// Throws Error if the directory is not writable.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);

/// Convenience overload for data already in memory.
void write_file_atomic(const std::string& path, std::string_view data);

/// Puts the folder `staged` in the place of `dir`: with one renameat2(RENAME_EXCHANGE) when `dir`
/// exists, so that a reader sees the old folder or the new one, never a mix, then removes the old
/// one. Where the filesystem cannot exchange (NFS), two renames leave a moment without `dir`.
/// Throws Error naming both.
void replace_dir(const std::string& staged, const std::string& dir);

/// Removes a folder and everything in it; nothing when it does not exist. Throws Error naming it.
void remove_dir(const std::string& dir);

/// Creates `dir` and its missing parents (mkdir -p). Throws Error naming the part it cannot create.
void make_dirs(const std::string& dir);

/// A whole file mapped into memory, copy-on-write: pages are read from the file when first
/// touched and shared with the page cache, so a model's weights cost no copy; a write to the
/// mapping (training a mapped weight in place) makes a private page and never reaches the file.
/// Tensors that view the mapping hold a shared_ptr to it.
class MappedFile {
 public:
  /// Maps `path`. Throws InputError naming it when it is missing or unreadable.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

/// FNV-1a, 64 bits: change detection of files and inputs (a pipeline stage's, a token cache's),
/// not security.
class Hasher {
 public:
  void add(const void* data, size_t n);
  /// The string's length, then its bytes (so "ab" + "c" and "a" + "bc" differ).
  void add(const std::string& s);
  /// The file's bytes. Throws InputError naming it when it cannot be read.
  void add_file(const std::string& path);
  /// 16 hex digits.
  std::string hex() const;

 private:
  uint64_t h_ = 0xCBF29CE484222325ULL;
};

/// True when `s` ends with `suffix` (a file's extension: ".onnx", ".gguf", ".index.json").
bool ends_with(const std::string& s, const std::string& suffix);

/// Directory part of `path` ("." when there is none).
std::string dir_name(const std::string& path);

/// Joins a directory and a relative path ("a/b" + "c" = "a/b/c"); absolute `rel` wins.
std::string join_path(const std::string& dir, const std::string& rel);

}  // namespace pare
