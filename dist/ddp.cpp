#include "dist/ddp.h"

#include <ATen/core/grad_mode.h>

#include "core/error.h"

namespace pare::dist {

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int64_t global_batch, int rank, int world) {
  PARE_CHECK(global_batch >= 1 && world >= 1 && global_batch % world == 0, "the batch size ", global_batch,
             " must be a multiple of the world size ", world, " (each rank takes batch / world samples)");
  PARE_ASSERT(rank >= 0 && rank < world, "rank ", rank, " outside world ", world);
  const auto n = static_cast<int64_t>(order.size());
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n / world + global_batch));
  for (int64_t start = 0; start < n; start += global_batch) {
    const int64_t m = std::min(global_batch, n - start);
    if (m < world) break;
    const int64_t lo = start + m * rank / world, hi = start + m * (rank + 1) / world;
    out.insert(out.end(), order.begin() + lo, order.begin() + hi);
  }
  return out;
}

GradientSync::GradientSync(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params, int64_t bucket_bytes)
    : pg_(std::move(pg)), params_(std::move(params)) {
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    if (buckets_.empty() || bytes >= bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(k);
    bytes += params_[k].numel() * params_[k].element_size();
  }
}

std::vector<at::Tensor> GradientSync::pack(int64_t local_samples) const {
  std::vector<at::Tensor> flats;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<at::Tensor> parts;
    for (size_t k : buckets_[b]) {
      const at::Tensor& p = params_[k];
      // A parameter the loss did not reach has no gradient on this rank: it counts as zero.
      parts.push_back((p.grad().defined() ? p.grad() : at::zeros_like(p)).reshape(-1).to(at::kFloat));
    }
    // The first bucket also carries the sample count (1 times it), so no extra collective is needed;
    // on the gradients' device, which may be a GPU.
    if (b == 0) parts.push_back(at::ones({1}, parts.front().options()));
    flats.push_back(at::cat(parts).mul_(static_cast<double>(local_samples)));
  }
  return flats;
}

void GradientSync::sync(int64_t local_samples) {
  if (buckets_.empty()) return;
  std::vector<at::Tensor> flats = pack(local_samples);
  for (at::Tensor& flat : flats) pg_->all_reduce_async(flat);
  pg_->wait();
  const double total = flats[0][-1].item<double>();
  PARE_CHECK(total > 0, "no rank saw a sample in this step");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t off = 0;
    for (size_t k : buckets_[b]) {
      at::Tensor& p = params_[k];
      const int64_t n = p.numel();
      at::Tensor g = flats[b].narrow(0, off, n).div_(total).view(p.sizes()).to(p.scalar_type());
      if (p.grad().defined()) p.mutable_grad().copy_(g);
      else p.mutable_grad() = g.clone();
      off += n;
    }
  }
}

void broadcast_from_rank0(ProcessGroup& pg, const std::vector<at::Tensor>& ts) {
  at::NoGradGuard no_grad;
  for (auto t : ts) pg.broadcast(t, 0);
}

}  // namespace pare::dist
