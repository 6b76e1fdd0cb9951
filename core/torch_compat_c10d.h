// The c10d side of core/torch_compat.h (kept apart: only dist/ includes c10d's headers).
// libtorch 1.13's backends (ProcessGroupGloo, ProcessGroupNCCL) derive from c10d::ProcessGroup;
// 2.x split that into the user-facing ProcessGroup and the c10d::Backend the backends derive from.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/torch_compat.h"

#if PARE_TORCH_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace pare::compat {

#if PARE_TORCH_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

}  // namespace pare::compat
