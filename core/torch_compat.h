// The one place for what differs between libtorch builds. pare supports one libtorch, PyTorch 2.x
// from the PyPI wheel (scripts/install-deps pins it; a GPU machine's own 2.11 or later is accepted):
// what changes between 2.x releases goes here, selected by TORCH_VERSION_MAJOR/MINOR.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>  // TORCH_VERSION, for torch_version() in every includer, not only those of torch/torch.h

#if TORCH_VERSION_MAJOR < 2
#error "pare needs PyTorch 2.x (scripts/install-deps installs it into .venv)"
#endif

namespace pare::compat {

/// The version string of the libtorch pare was built against.
inline const char* torch_version() { return TORCH_VERSION; }

/// True when pare was built against a libtorch with CUDA (PARE_WITH_CUDA, set by CMake), whether
/// or not a device is present.
bool cuda_built();
/// True when this libtorch was built with CUDA and a device is present.
bool cuda_available();
/// CUDA devices visible to this process (0 without CUDA).
int cuda_device_count();

/// Autocast of one device type (kCPU or kCUDA): whether it is on and its lower precision.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
};
AutocastState autocast_state(at::DeviceType type);
void set_autocast_state(at::DeviceType type, const AutocastState& state);
/// Drops the casts autocast cached for the weights (call when leaving the outermost scope).
void autocast_clear_cache();

}  // namespace pare::compat
