// `pare pipeline RECIPE.yaml`: a recipe (YAML) of stages — teacher, distill, prune, quantize,
// export, eval — each run as a pare command into its own folder of the run folder, skipped when
// the content hash of its inputs is unchanged, resumed from its checkpoint after a kill.
// The recipe schema is in docs/PIPELINE.md; the run folder's format in the same file.
//
//   auto recipe = pipeline::load_recipe("examples/recipes/fashion-mnist.yaml", *cli::command_schema());
//   pipeline::PipelineOptions o;
//   o.run_dir = "runs/demo", o.pare = "/usr/local/bin/pare";
//   int code = pipeline::run_pipeline(recipe, o);
//
// The stages run the pare executable (PipelineOptions::pare), so a program that runs a pipeline
// needs pare installed; the recipe's keys are checked against pare's command line through a
// CommandSchema, which pare_cli provides (cli/schema.h) from the option definitions pare parses.
#pragma once

#include <string>
#include <vector>

namespace pare::pipeline {

/// One stage of a checked recipe: the pare command it runs and what it reads.
struct RecipeStage {
  std::string name, kind;            ///< kind: teacher, distill, prune, quantize, export or eval
  int line = 0;                      ///< 1-based recipe line of the stage
  int nproc = 1;                     ///< > 1: run under pare launch --nproc-per-node
  std::string dir;                   ///< its folder in the run folder: "02-distill"
  std::vector<std::string> command;  ///< pare's arguments (paths in the run folder relative to it)
  std::string load;                  ///< a teacher stage that loads this ONNX file instead of training
  std::string input;                 ///< folder of the stage whose model it reads ("" none)
  std::vector<std::string> upstream;      ///< folders of every stage whose artifact it reads
  std::vector<std::string> files;         ///< files from outside the run folder it reads (hashed)
  std::vector<std::string> data;          ///< data specs it reads (hashed)
  bool artifact = true;              ///< writes model.onnx (eval stages do not)
  bool checkpoint = false;           ///< trains: gets --checkpoint (and --resume) and --metrics
  std::string engine = "torch";      ///< the engine its artifact is measured on (rt after export --target rt)
  std::string eval_data;             ///< data its artifact is evaluated on for the report
};

/// A recipe file, parsed and checked.
struct Recipe {
  std::string path, text, name;
  std::vector<RecipeStage> stages;
};

/// The commands a recipe's stages run, as pare's command line parses them: a stage's keys are the
/// long options of its command ("teacher" stages run `train`).
class CommandSchema {
 public:
  virtual ~CommandSchema() = default;
  /// The long option names of `command` ("epochs", "lr", ...), in the order its --help lists them.
  virtual std::vector<std::string> options(const std::string& command) const = 0;
  /// True when option --`name` of `command` takes no value (a flag); `name` is one of options().
  virtual bool is_flag(const std::string& command, const std::string& name) const = 0;
  /// Parses `args` (args[0] the command) as pare would, running nothing; returns the parser's
  /// message when it refuses them (a type, a range, a choice), "" when they parse. May throw Error.
  virtual std::string refusal(const std::vector<std::string>& args) const = 0;
};

/// Reads and checks `path`: YAML syntax, known keys (each stage's keys are the long flags of its
/// command, checked against that command's options, values parsed as the command would), stage
/// names and references, and files that must exist. Throws InputError as
/// "RECIPE:LINE: key 'K': what is wrong" before anything runs.
Recipe load_recipe(const std::string& path, const CommandSchema& commands);

struct PipelineOptions {
  std::string run_dir, out, from, until;
  bool resume = false, dry_run = false, quiet = false;
  /// The pare executable the stages run; "" for this process's own (the pare command itself).
  std::string pare;
};

/// Runs (or with dry_run prints) the recipe's stages in the run folder; returns the exit code.
int run_pipeline(const Recipe& recipe, const PipelineOptions& opts);

}  // namespace pare::pipeline
