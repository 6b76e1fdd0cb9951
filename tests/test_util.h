// Helpers shared by the GoogleTest suites: a scratch folder and an InputError expectation.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace pare::testing {

/// A fresh folder under the GoogleTest temp dir, removed with its files at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "pare_test_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << "mkdtemp " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the entries in the folder.
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

/// Runs `fn`, expecting an InputError whose message contains every string in `parts`.
template <class Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

}  // namespace pare::testing
