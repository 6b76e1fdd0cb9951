#include "federated/launch.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "core/onnx_io.h"
#include "federated/split.h"

namespace pare::federated {

namespace {
// The first `n` samples of `spec`'s train split after a seeded shuffle.
core::TensorDataset root_set(const std::string& spec, int64_t n, uint64_t seed) {
  core::TensorDataset ds = core::load_dataset(spec, "train");
  PARE_CHECK_OPTION(n >= 1 && n <= ds.size(), "root_samples", "must be in [1, ", ds.size(), "] for ", spec, ", got ", n);
  const at::Tensor idx = at::randperm(ds.size(), at::make_generator<at::CPUGeneratorImpl>(seed)).narrow(0, 0, n);
  ds.x = ds.x.index_select(0, idx);
  ds.y = ds.y.index_select(0, idx);
  ds.name += " (root set)";
  return ds;
}

const core::TensorDataset* pointer(const std::optional<core::TensorDataset>& ds) { return ds ? &*ds : nullptr; }
}  // namespace

ServerData ServerDataSets::view() const { return {pointer(val), pointer(root), pointer(distill)}; }

ServerDataSets load_server_data(const ServerDataSpec& spec, uint64_t seed) {
  ServerDataSets d;
  if (!spec.val.empty()) d.val = core::load_dataset(spec.val, spec.val_split);
  if (!spec.root.empty()) d.root = root_set(spec.root, spec.root_samples, seed);
  if (!spec.distill.empty()) d.distill = core::load_dataset(spec.distill, "train");
  return d;
}

std::vector<RoundStats> serve(const std::vector<std::string>& models, const ServerOptions& o,
                              const ServerDataSpec& data) {
  std::vector<core::Graph> graphs;
  for (size_t k = 0; k < models.size(); ++k) graphs.push_back(core::load_model(models[k], o.seed + k));
  const ServerDataSets sets = load_server_data(data, o.seed + 17);
  return Server(std::move(graphs), o, sets.view()).run();
}

core::TensorDataset ClientDataSpec::load() const {
  core::TensorDataset ds = core::load_dataset(data, "train");
  if (partition.empty()) return ds;
  if (partitions < 1)
    throw InputError(pare::detail::concat("partitions must be at least 1 with partition, got ", partitions))
        .about("partitions")
        .about("partition");
  PARE_CHECK_OPTION(index >= 0 && index < partitions, "partition_index", "must be in [0, ", partitions, "), got ",
                    index);
  core::require_labels(ds, "a partition of the data");
  const Split split = split_by_spec(partition, ds.y, partitions, seed);
  const at::Tensor idx = at::tensor(split[index], at::kLong);
  ds.x = ds.x.index_select(0, idx);
  ds.y = ds.y.index_select(0, idx);
  ds.name += " (part " + std::to_string(index) + " of " + std::to_string(partitions) + ", " + partition + ")";
  return ds;
}

}  // namespace pare::federated
