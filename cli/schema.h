// pare's command line as a pipeline recipe is checked against it: a recipe's stage keys are the
// long options of the stage's command, and its values must parse as that command parses them.
//
//   auto recipe = pipeline::load_recipe("recipe.yaml", *cli::command_schema());
#pragma once

#include <memory>

#include "pipeline/pipeline.h"

namespace pare::cli {

/// Every pare command's options, from the same definitions the pare executable parses with
/// (cli/cmd_pipeline.cpp).
std::unique_ptr<pipeline::CommandSchema> command_schema();

}  // namespace pare::cli
