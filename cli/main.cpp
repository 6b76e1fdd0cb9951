// pare: distill, prune, quantize and export models. Exit codes: 0 ok, 1 runtime failure,
// 2 bad input or usage.
#include <malloc.h>

#include <c10/util/Exception.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/torch_compat.h"
#include "dist/world.h"
#include "lm/model.h"

namespace {

// libtorch allocates with plain malloc; glibc returns every block >= 128 KiB to the kernel on
// free, and the page faults on reuse cost more than the math on small models. Keep freed memory
// in the process instead.
void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

// The command-line flag of a library option: "batch_size" is --batch-size, except where a flag
// took another name.
std::string flag_of(const std::string& option) {
  static const std::pair<const char*, const char*> renamed[] = {
      {"grace_seconds", "--grace-period"}, {"teachers", "--teacher"}, {"q4_k", "--grid q4_k"}};
  for (const auto& [name, flag] : renamed)
    if (option == name) return flag;
  std::string flag = "--" + option;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// The message of a library error with the options it names (Error::about) written as flags: the
// first whole-word occurrence of each.
std::string with_flags(const pare::Error& e) {
  std::string msg = e.what();
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
  for (const std::string& option : e.options()) {
    for (size_t at = msg.find(option); at != std::string::npos; at = msg.find(option, at + 1)) {
      const size_t end = at + option.size();
      if ((at > 0 && word_char(msg[at - 1])) || (end < msg.size() && word_char(msg[end]))) continue;
      msg.replace(at, option.size(), flag_of(option));
      break;
    }
  }
  return msg;
}

// Prints the error and, under torchrun or pare launch, writes it to TORCHELASTIC_ERROR_FILE in
// torchrun's format so the launcher can name it.
void report_error(const char* what) {
  std::fprintf(stderr, "pare: error: %s\n", what);
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  nlohmann::json j = {{"message",
                       {{"message", std::string("pare: ") + what},
                        {"extraInfo", {{"py_callstack", ""}, {"timestamp", std::to_string(std::time(nullptr))}}}}}};
  try {
    pare::write_file_atomic(path, j.dump());
  } catch (const std::exception&) {
    // The error itself was printed; a failed error file must not hide it.
  }
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first argument names a command: an unknown one is an error that names it (with the
// nearest command), whatever follows it, --help included.
bool check_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return true;
  const std::string given = argv[1];
  std::string list, nearest;
  size_t best = std::string::npos;
  for (const CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    if (name == given) return true;
    list += (list.empty() ? "" : ", ") + name;
    // Nearest by edit distance; of equals, one that the given word begins (prun: prune, not run).
    const size_t d = 2 * edit_distance(given, name) + (name.rfind(given, 0) == 0 ? 0 : 1);
    if (d < best) best = d, nearest = name;
  }
  const std::string hint = best <= 5 ? " (did you mean '" + nearest + "'?)" : "";
  std::fprintf(stderr, "pare: error: unknown command '%s'%s\ncommands: %s\nRun 'pare --help' for what each does.\n",
               given.c_str(), hint.c_str(), list.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  tune_malloc();
  pare::lm::register_model_sources();  // hf:DIR (and gguf:FILE) wherever a model is taken
  CLI::App app{"pare: make big models small and fast (distill, prune, quantize, export)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pare ") + PARE_VERSION + " (libtorch " +
                                        pare::compat::torch_version() + ", CUDA " +
                                        (pare::compat::cuda_built() ? "yes" : "no") + ", NCCL " +
                                        (pare::dist::nccl_built() ? "yes" : "no") + ")");
  app.footer("Exit codes: 0 ok, 1 runtime failure, 2 bad input or usage.\n"
             "Run 'pare COMMAND --help' for a command's options.");
  pare::cli::Action action;
  pare::cli::add_commands(app, action);
  if (!check_command(app, argc, argv)) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (action) action();
    return 0;
  } catch (const pare::Error& e) {
    report_error(with_flags(e).c_str());
    return e.exit_code();
  } catch (const c10::Error& e) {
    report_error(e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    report_error(e.what());
    return 1;
  }
}
