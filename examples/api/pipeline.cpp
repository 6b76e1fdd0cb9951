// Run a compression recipe (teacher, distill, prune, quantize, export, eval stages) into a run
// folder with report.html: `pare pipeline` from a program. The stages run the pare executable,
// and the recipe is checked against its command line (cli/schema.h) before anything runs.
// Usage: pipeline_example RECIPE.yaml RUN_DIR PARE_EXECUTABLE
#include <cstdio>

#include "core/error.h"
#include "cli/schema.h"
#include "pipeline/pipeline.h"
#include "pipeline/report.h"

int main(int argc, char** argv) try {
  if (argc < 4) return std::fprintf(stderr, "usage: %s RECIPE.yaml RUN_DIR PARE\n", argv[0]), 2;
  using namespace pare;
  const pipeline::Recipe recipe = pipeline::load_recipe(argv[1], *cli::command_schema());
  std::printf("recipe '%s': %zu stages\n", recipe.name.c_str(), recipe.stages.size());
  pipeline::PipelineOptions opts;
  opts.run_dir = argv[2];
  opts.pare = argv[3];
  opts.quiet = true;
  const int code = pipeline::run_pipeline(recipe, opts);
  if (code == 0) std::printf("report %s\n", pipeline::write_report(argv[2]).c_str());
  return code;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
