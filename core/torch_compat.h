// The one place where libtorch versions differ (Debian's 1.13 CPU build and 2.x with CUDA).
// Selected by PARE_TORCH_MAJOR, which CMake sets from the libtorch it found.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>  // TORCH_VERSION, for torch_version() in every includer, not only those of torch/torch.h

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

/// True when pare was built against a libtorch with CUDA (PARE_WITH_CUDA, set by CMake), whether
/// or not a device is present.
bool cuda_built();
/// True when this libtorch was built with CUDA and a device is present.
bool cuda_available();
/// CUDA devices visible to this process (0 without CUDA).
int cuda_device_count();

/// Autocast of one device type (kCPU or kCUDA): whether it is on and its lower precision.
/// 1.13 has one setter per device type (set_cpu_enabled, set_autocast_gpu_dtype, ...), 2.x one
/// setter taking the device type.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
};
AutocastState autocast_state(at::DeviceType type);
void set_autocast_state(at::DeviceType type, const AutocastState& state);
/// Drops the casts autocast cached for the weights (call when leaving the outermost scope).
void autocast_clear_cache();

}  // namespace pare::compat
