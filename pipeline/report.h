// The HTML report of a run folder (format "pare-run-1", written by `pare pipeline`): one
// self-contained file (inline CSS and SVG charts, no network) with the run's header figures, a
// table of the stages, Pareto plots of accuracy against file size and latency, training curves,
// per-layer sparsity and quantization SQNR, the recipe and the machine.
#pragma once

#include <string>

namespace pare::pipeline {

/// Reads the run folder `run_dir` and writes its report atomically to `out` (default
/// RUN_DIR/report.html); returns the path written. Partial runs (running or failed, stages without
/// stage.json, summary or metrics) give a partial report. Throws InputError naming the file when
/// `run_dir` is not a folder, or its run.json is missing, not JSON or not of format "pare-run-1";
/// Error when the report cannot be written.
std::string write_report(const std::string& run_dir, const std::string& out = "");

}  // namespace pare::pipeline
