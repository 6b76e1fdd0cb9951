// The set-up of a training job (train/run.h).
#include "train/run.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "core/device.h"
#include "core/error.h"
#include "dist/world.h"

namespace pare::train {

void set_threads(int threads) {
  PARE_CHECK_OPTION(threads >= 0, "threads", "must be >= 0, got ", threads);
  if (threads > 0) at::set_num_threads(threads);
}

TrainerOptions RunSetup::start() const {
  set_threads(threads);
  TrainerOptions opts = trainer;
  opts.progress(!quiet);
  const dist::World world = dist::World::from_env();
  opts.device(core::parse_device(device, world.local_rank));
  opts.precision(core::parse_precision(precision));
  opts.validate();
  const dist::Backend be = dist::parse_backend(backend, opts.device_);
  PARE_CHECK_OPTION(timeout > 0, "timeout", "must be > 0 seconds, got ", timeout);
  // Under pare launch or torchrun (WORLD_SIZE > 1): data parallel over the ranks.
  if (world.distributed()) {
    opts.process_group(dist::ProcessGroup::connect(
        world, be, opts.device_, std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000))));
    if (!quiet && world.rank == 0)
      std::fprintf(stderr, "data parallel over %d ranks (%s, %s): global batch %lld, %lld per rank\n",
                   world.world_size, dist::backend_name(be), opts.device_.str().c_str(), (long long)opts.batch_size_,
                   (long long)(opts.batch_size_ / world.world_size));
  }
  if (!quiet && world.rank == 0 && (!opts.device_.is_cpu() || opts.precision_ != core::Precision::kFp32))
    std::fprintf(stderr, "device %s, precision %s\n", opts.device_.str().c_str(), core::precision_name(opts.precision_));
  return opts;
}

const core::TensorDataset* RunSetup::load_data(core::TensorDataset& train, core::TensorDataset& val,
                                                  core::Graph& model, TrainerOptions& opts) const {
  if (!augment.empty()) opts.augment(core::parse_augment(augment));
  train = core::load_dataset(data, "train");
  if (!no_val) val = core::load_dataset(data, val_split);
  PARE_CHECK_OPTION(!opts.augment_.any() || (train.x.dim() == 4 && train.x.is_floating_point()), "augment",
                    augment, ": the training set '", data, "' is not images [N, C, H, W] but ",
                    train.x.scalar_type(), " ", train.x.sizes());
  if (!normalize.empty()) {
    core::normalize(train, normalize);
    if (!no_val) core::normalize(val, normalize);
    model.metadata["pare.normalize"] = normalize;
    if (opts.augment_.any()) {
      // Pixels shifted in are black (0) before normalization.
      core::TensorDataset black{at::zeros({1, train.x.size(1), 1, 1}), at::zeros({1}, at::kLong), "fill"};
      core::normalize(black, normalize);
      at::Tensor f = black.x.flatten().contiguous();
      opts.augment_.fill.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    }
  }
  return no_val ? nullptr : &val;
}

}  // namespace pare::train
