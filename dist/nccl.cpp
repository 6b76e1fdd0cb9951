#include "dist/nccl.h"

#include "core/error.h"

#ifdef PARE_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace pare::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, const at::Device& device,
                                                    std::chrono::milliseconds timeout) {
#ifdef PARE_WITH_NCCL
  PARE_ASSERT(device.is_cuda(), "NCCL needs a CUDA device, got ", device.str());
  c10::cuda::set_device(device.index());  // NCCL's communicator binds to the current device
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
#else
  (void)store, (void)rank, (void)size, (void)device, (void)timeout;
  throw InternalError("pare was built without NCCL (PARE_WITH_NCCL); parse_backend refuses nccl");
#endif
}

}  // namespace pare::dist
