#include "core/torch_compat.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace pare::compat {

bool cuda_built() {
#ifdef PARE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() { return at::hasCUDA(); }

int cuda_device_count() { return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()) : 0; }

AutocastState autocast_state(at::DeviceType type) {
  AutocastState s;
#if PARE_TORCH_MAJOR >= 2
  s.enabled = at::autocast::is_autocast_enabled(type);
  s.dtype = at::autocast::get_autocast_dtype(type);
#else
  if (type == at::kCUDA) {
    s.enabled = at::autocast::is_enabled();
    s.dtype = at::autocast::get_autocast_gpu_dtype();
  } else {
    s.enabled = at::autocast::is_cpu_enabled();
    s.dtype = at::autocast::get_autocast_cpu_dtype();
  }
#endif
  return s;
}

void set_autocast_state(at::DeviceType type, const AutocastState& s) {
#if PARE_TORCH_MAJOR >= 2
  at::autocast::set_autocast_enabled(type, s.enabled);
  at::autocast::set_autocast_dtype(type, s.dtype);
#else
  if (type == at::kCUDA) {
    at::autocast::set_enabled(s.enabled);
    at::autocast::set_autocast_gpu_dtype(s.dtype);
  } else {
    at::autocast::set_cpu_enabled(s.enabled);
    at::autocast::set_autocast_cpu_dtype(s.dtype);
  }
#endif
}

void autocast_clear_cache() { at::autocast::clear_cache(); }

}  // namespace pare::compat
