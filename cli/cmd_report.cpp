// pare report RUN_DIR [--out FILE]
#include <iostream>

#include "cli/commands.h"
#include "pipeline/report.h"

namespace pare::cli {

void add_report(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "report", "Write the HTML report of a pare pipeline run folder: stages, Pareto plots, training curves, layers");
  cmd->footer(
      "The report is one self-contained HTML file (inline CSS and SVG charts, no network access): the run's time, "
      "final artifact, compression and accuracy change against the teacher; a table of the stages; accuracy against "
      "file size and against latency with the Pareto frontier; validation accuracy and train loss per epoch; "
      "per-layer sparsity and quantization SQNR; the recipe, versions and machine. pare pipeline writes it at the end "
      "of a run; this command rewrites it, also for a run that is still going or has failed. Exit 2 naming the file "
      "when RUN_DIR has no valid run.json.\n\n"
      "Example:\n"
      "  pare pipeline recipe.yaml --run-dir runs/fmnist\n"
      "  pare report runs/fmnist            # writes runs/fmnist/report.html\n");
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("run_dir", *run_dir, "Run folder of pare pipeline (holds run.json and one folder per stage)")
      ->required();
  cmd->add_option("--out,-o", *out, "The HTML file to write (written atomically) [default: RUN_DIR/report.html]");
  cmd->callback([&action, run_dir, out] {
    action = [run_dir, out] { std::cout << pipeline::write_report(*run_dir, *out) << "\n"; };
  });
}

}  // namespace pare::cli
