// pare: distill, prune, quantize and export models. Exit codes: 0 ok, 1 runtime failure,
// 2 bad input or usage.
#include <malloc.h>

#include <c10/util/Exception.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/torch_compat.h"

namespace {

// libtorch allocates with plain malloc; glibc returns every block >= 128 KiB to the kernel on
// free, and the page faults on reuse cost more than the math on small models (DESIGN.md,
// performance notes). Keep freed memory in the process instead.
void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
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

}  // namespace

int main(int argc, char** argv) {
  tune_malloc();
  CLI::App app{"pare: make big models small and fast (distill, prune, quantize, export)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pare ") + PARE_VERSION + " (libtorch " +
                                        pare::compat::torch_version() + ")");
  app.footer("Exit codes: 0 ok, 1 runtime failure, 2 bad input or usage.\n"
             "Run 'pare COMMAND --help' for a command's options.");
  pare::cli::Action action;
  pare::cli::add_inspect(app, action);
  pare::cli::add_run(app, action);
  pare::cli::add_train(app, action);
  pare::cli::add_distill(app, action);
  pare::cli::add_launch(app, action);
  pare::cli::add_teacher_cache(app, action);
  pare::cli::add_prune(app, action);
  pare::cli::add_eval(app, action);
  pare::cli::add_quantize(app, action);
  pare::cli::add_bench(app, action);
  pare::cli::add_export(app, action);
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
    report_error(e.what());
    return e.exit_code();
  } catch (const c10::Error& e) {
    report_error(e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    report_error(e.what());
    return 1;
  }
}
