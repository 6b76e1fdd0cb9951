// pare's one error type and its two checks.
//
//   PARE_CHECK(cond, "what was expected", ...)   bad input or usage: throws InputError (exit 2)
//   PARE_CHECK_OPTION(cond, "batch_size", "must be at least 1, got ", n)
//                                                 a bad option: InputError naming the option
//   PARE_ASSERT(cond, ...)                        broken invariant:   throws InternalError ("bug in pare")
//
// Messages state the rule, then what was seen, and name the file / node / op involved. Libraries
// name options by their names in the options structs ("batch_size"), never by a command-line flag:
// an error records the options it mentions (about()), and the command line rewrites them to its
// flags ("--batch-size") when it prints the message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pare {

/// Base of every exception pare throws. `exit_code()` is what the CLI returns for it:
/// 1 for a runtime failure, 2 for bad input or usage.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, int exit_code = 1)
      : std::runtime_error(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

  /// Records that the message names the option `name` (as the options struct spells it).
  Error& about(std::string name) {
    options_.push_back(std::move(name));
    return *this;
  }
  /// The options the message names, in the order about() recorded them.
  const std::vector<std::string>& options() const { return options_; }

 private:
  int exit_code_;
  std::vector<std::string> options_;
};

/// A file, option or model that pare cannot accept (exit code 2).
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg, 2) {}
  InputError& about(std::string name) {
    Error::about(std::move(name));
    return *this;
  }
};

/// An invariant inside pare was broken: a bug, never the user's fault (exit code 1).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& msg) : Error("bug in pare: " + msg, 1) {}
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace pare

#define PARE_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) throw ::pare::InputError(::pare::detail::concat(__VA_ARGS__));     \
  } while (0)

// A bad value of option `option`: the message starts with the option's name.
#define PARE_CHECK_OPTION(cond, option, ...)                                         \
  do {                                                                               \
    if (!(cond))                                                                     \
      throw ::pare::InputError(::pare::detail::concat(option, " ", __VA_ARGS__)).about(option); \
  } while (0)

#define PARE_ASSERT(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond))                                                                     \
      throw ::pare::InternalError(::pare::detail::concat(                           \
          __FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__));                \
  } while (0)
