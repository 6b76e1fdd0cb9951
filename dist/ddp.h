// Data parallel pieces: the per-rank shard of an epoch's order and the bucketed gradient
// all-reduce. train::Trainer wires them in when it is given a ProcessGroup.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/world.h"

namespace pare::dist {

/// This rank's part of an epoch's global `order`, cut so that its b-th batch of
/// global_batch / world samples and the other ranks' b-th batches together are exactly the b-th
/// global batch of `order` (what one process with batch `global_batch` would train on). A last,
/// short global batch is split as evenly as possible; one with fewer samples than ranks is dropped
/// so that every rank runs the same number of steps. Throws InputError when global_batch is not a
/// multiple of world.
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int64_t global_batch, int rank, int world);

/// Averages gradients over the ranks after backward: gradients are flattened into buckets of
/// about `bucket_bytes`, in reverse parameter order (the order backward produces them), each
/// bucket's all-reduce started before waiting for any. Each rank's gradient is weighted by the
/// samples it saw in the step, so the result is the gradient of the mean loss over the global
/// batch even when the ranks' batches differ in size.
class GradientSync {
 public:
  GradientSync(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params,
               int64_t bucket_bytes = 25 << 20);
  /// Call after backward on every rank with the samples this rank's gradients cover.
  void sync(int64_t local_samples);
  /// The buckets sync() all-reduces: each bucket's gradients flattened to fp32 and multiplied by
  /// `local_samples`, the first bucket followed by `local_samples` itself; on the parameters' device.
  std::vector<at::Tensor> pack(int64_t local_samples) const;
  size_t buckets() const { return buckets_.size(); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<at::Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;  // indices into params_, reverse order
};

/// Rank 0's values of `ts` on every rank (parameters and buffers at the start of training).
void broadcast_from_rank0(ProcessGroup& pg, const std::vector<at::Tensor>& ts);

}  // namespace pare::dist
