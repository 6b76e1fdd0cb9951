// Helpers shared by the subcommands.
#include <ATen/Parallel.h>

#include "cli/commands.h"
#include "core/error.h"

namespace pare::cli {

void set_threads(int threads) {
  PARE_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  if (threads > 0) at::set_num_threads(threads);
}

}  // namespace pare::cli
