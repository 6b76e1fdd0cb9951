// c10d's NCCL backend, built only against a libtorch with CUDA and NCCL (PARE_WITH_NCCL).
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace pare::dist {

/// A ProcessGroupNCCL over `store` whose collectives run on GPU `device`. Throws InternalError in a
/// build without NCCL (parse_backend refuses nccl there first).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, const at::Device& device,
                                                    std::chrono::milliseconds timeout);

}  // namespace pare::dist
