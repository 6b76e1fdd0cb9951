// The sanitizer build's `pare`: cli/main.cpp with this add_commands in place of cli/common.cpp's,
// so that it has the `launch` command alone (cli/cmd_launch.cpp) and needs no more of the library
// than dist/ and core/. tests/fuzz/sanitize runs tests/cli/launch_test.sh against it.
#include "cli/commands.h"

namespace pare::cli {

void add_commands(CLI::App& app, Action& action) { add_launch(app, action); }

}  // namespace pare::cli
