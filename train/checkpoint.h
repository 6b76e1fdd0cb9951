// A training checkpoint file: "PARECKPT", a format version, the CRC-32 and byte count of the
// payload (8 bytes, little-endian), then the payload: safetensors (core/tensor_io, the reader pare
// fuzzes) holding model/NAME, extra/I, optimizer/I/STATE (I: the optimizer's parameters in group
// order), rng (the CPU generator's state), rng_cuda (on a GPU: its generator's state, which Dropout
// draws from), and in its metadata "state", the run's position and history as JSON (the Trainer
// writes and reads those, train/trainer.cpp). Format 1 was libtorch's archive, refused.
#pragma once

#include <torch/optim.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace pare::train {

/// The header of a checkpoint file whose payload (safetensors) is `payload`. For tests and fuzzers
/// that build checkpoints of their own.
std::string checkpoint_header(std::string_view payload);

/// The payload of checkpoint file `path` (its bytes in `file`, which the view points into), after
/// checking its header and CRC. Throws InputError naming the file when it is truncated or damaged,
/// or of a format this pare does not read.
std::string_view checkpoint_payload(const std::string& file, const std::string& path);

/// The optimizer's parameters in group order, which numbers them in checkpoints.
std::vector<at::Tensor> optimizer_params(torch::optim::Optimizer& opt);

/// The optimizer keys its state by the parameter's TensorImpl.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
StateKey state_key(const at::Tensor& p);

/// Each parameter's optimizer state: Adam and AdamW keep exp_avg, exp_avg_sq (max_exp_avg_sq with
/// amsgrad) and a step count, SGD a momentum buffer. Into `tensors` as optimizer/I/NAME, and the
/// step counts into `steps` (-1: no state yet; SGD's: 0).
void save_optimizer(torch::optim::Optimizer& opt, std::map<std::string, at::Tensor>& tensors, nlohmann::json& steps);

/// The optimizer states a checkpoint holds for `opt`'s parameters (optimizer `kind`), each checked
/// against its parameter (shape, dtype, finite values) before any is installed; by state key.
/// Consumes the tensors it reads from `tensors`.
using OptimizerStates = std::vector<std::pair<StateKey, std::unique_ptr<torch::optim::OptimizerParamState>>>;
OptimizerStates read_optimizer(torch::optim::Optimizer& opt, const std::string& kind,
                               std::map<std::string, at::Tensor>& tensors, const nlohmann::json& steps,
                               const std::string& path);

}  // namespace pare::train
