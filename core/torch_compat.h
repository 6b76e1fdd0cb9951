// The one place where libtorch versions differ (Debian's 1.13 CPU build and 2.x with CUDA).
// Selected by PARE_TORCH_MAJOR, which CMake sets from the libtorch it found.
#pragma once

#include <ATen/ATen.h>

#ifndef PARE_TORCH_MAJOR
#define PARE_TORCH_MAJOR 1
#endif

namespace pare::compat {

/// The version string of the libtorch pare was built against.
inline const char* torch_version() {
#ifdef TORCH_VERSION
  return TORCH_VERSION;
#else
  return "unknown";
#endif
}

/// True when this libtorch was built with CUDA and a device is present.
bool cuda_available();

}  // namespace pare::compat
