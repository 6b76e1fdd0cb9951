// pare pipeline RECIPE.yaml [--run-dir DIR] [--out FILE] [--resume] [--from STAGE] [--until STAGE]
// [--dry-run] [--quiet]
#include <cstdlib>

#include "cli/commands.h"
#include "pipeline/pipeline.h"

namespace pare::cli {

namespace {

// The recipe's keys checked against pare's own command line: every command added to a scratch app,
// exactly as main() adds them.
class CliSchema : public pipeline::CommandSchema {
 public:
  CliSchema() { add_commands(app_, action_); }

  std::vector<std::string> options(const std::string& command) const override {
    std::vector<std::string> names;
    for (const CLI::Option* o : sub(command)->get_options())
      for (const std::string& n : o->get_lnames()) names.push_back(n);
    return names;
  }
  bool is_flag(const std::string& command, const std::string& name) const override {
    const CLI::Option* o = sub(command)->get_option_no_throw("--" + name);
    return o != nullptr && o->get_expected_max() == 0;
  }
  std::string refusal(const std::vector<std::string>& args) const override {
    CLI::App app;
    Action action;
    add_commands(app, action);
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  }

 private:
  CLI::App* sub(const std::string& command) const { return app_.get_subcommand(command); }
  mutable CLI::App app_;
  Action action_;
};

}  // namespace

std::unique_ptr<pipeline::CommandSchema> command_schema() { return std::make_unique<CliSchema>(); }

void add_pipeline(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "pipeline",
      "Run a compression recipe (YAML): teacher, distill, prune, quantize, export and eval stages into a run folder, "
      "each skipped while its inputs are unchanged, ending with report.html");
  auto recipe = std::make_shared<std::string>();
  auto o = std::make_shared<pipeline::PipelineOptions>();
  cmd->add_option("recipe", *recipe, "The recipe (YAML; schema in docs/PIPELINE.md, examples in examples/recipes/)")
      ->required();
  cmd->add_option("--run-dir", o->run_dir, "Run folder: one folder per stage, run.json, report.html (default: runs/NAME)");
  cmd->add_option("--out,-o", o->out, "Also copy the final model here (atomically) when the run succeeds");
  cmd->add_flag("--resume", o->resume,
                "A stage killed midway continues from its checkpoint (bit-exact on the CPU) instead of starting over");
  cmd->add_option("--from", o->from, "Run again from this stage on (the stages before it must have finished)");
  cmd->add_option("--until", o->until, "Stop after this stage");
  cmd->add_flag("--dry-run", o->dry_run, "Check the recipe and print the plan: each stage's command and whether it runs");
  cmd->add_flag("--quiet,-q", o->quiet, "Only errors (the stages' output still goes to their log.txt)");
  cmd->footer(
      "A recipe lists stages; a stage's keys are the long options of its command (teacher: pare train, or model: "
      "FILE.onnx to load one; distill, prune, quantize, export, eval: the commands of that name) plus name:, input: "
      "(the stage or file whose model it reads; default: the previous stage's) and nproc: (run under pare launch). "
      "teacher:, student: and input: may name an earlier stage. The whole recipe is checked before any stage runs: "
      "errors name the recipe's line and key and exit 2. A stage is skipped while its command, pare's version, the "
      "models and files it reads and its data hash as before.\n"
      "Example: pare pipeline examples/recipes/fashion-mnist.yaml --run-dir runs/fm\n"
      "Exit codes: 0 ok, 1 a stage failed at run time, 2 a bad recipe (or a stage refused its input), "
      "128+N killed by signal N.");
  cmd->callback([&action, recipe, o] {
    action = [recipe, o] {
      const pipeline::Recipe r = pipeline::load_recipe(*recipe, *command_schema());
      const int code = pipeline::run_pipeline(r, *o);
      if (code != 0) std::exit(code);
    };
  });
}

}  // namespace pare::cli
