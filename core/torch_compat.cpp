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
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
}

void set_autocast_state(at::DeviceType type, const AutocastState& s) {
  at::autocast::set_autocast_enabled(type, s.enabled);
  at::autocast::set_autocast_dtype(type, s.dtype);
}

void autocast_clear_cache() { at::autocast::clear_cache(); }

}  // namespace pare::compat
