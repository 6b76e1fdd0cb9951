// The pare command line: one file per subcommand, each adding itself to the app. The commands
// only fill the options structs of the library and print; the work happens below cli/.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "distill/trainer.h"

namespace pare::cli {

/// A subcommand's action; throws pare::Error (exit code from the error) on failure.
using Action = std::function<void()>;

void add_inspect(CLI::App& app, Action& action);
void add_run(CLI::App& app, Action& action);
void add_train(CLI::App& app, Action& action);
void add_eval(CLI::App& app, Action& action);
void add_distill(CLI::App& app, Action& action);

/// Sets libtorch's intra-op thread count (0 keeps its default).
void set_threads(int threads);

/// Adds the options of distill::TrainerOptions (epochs, lr, schedule, checkpoints, ...) to a
/// command; train and distill share them.
void add_trainer_options(CLI::App* cmd, distill::TrainerOptions& opts);

}  // namespace pare::cli
