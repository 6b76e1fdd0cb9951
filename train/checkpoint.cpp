// The checkpoint file format (train/checkpoint.h): its header, and the optimizer's state in it.
#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/json_util.h"

namespace pare::train {

namespace {

// A checkpoint file: "PARECKPT", a format version, the CRC-32 and byte count of the payload (8 bytes,
// little-endian), then the payload: safetensors (core/tensor_io, the reader pare fuzzes) holding
// model/NAME, extra/I, optimizer/I/STATE (I: the optimizer's parameters in group order), rng
// (the CPU generator's state), rng_cuda (on a GPU: its generator's state, which Dropout draws
// from), and in its metadata "state", the run's position and history as JSON.
// Format 1 was libtorch's archive (torch::serialize), whose reader in libtorch 1.13 crashes on
// damaged archives (found by tests/fuzz's checkpoint_fuzz): it is refused, not read.
constexpr char kCheckpointMagic[8] = {'P', 'A', 'R', 'E', 'C', 'K', 'P', 'T'};
constexpr uint32_t kCheckpointVersion = 2;
constexpr size_t kCheckpointHeader = 8 + 4 + 4 + 8;

uint32_t crc_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size();) {  // zlib's length is 32-bit
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes.size() - at, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), n);
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::string checkpoint_header(std::string_view payload) {
  std::string out(kCheckpointHeader, '\0');
  const uint32_t version = kCheckpointVersion, crc = crc_of(payload);
  const uint64_t size = payload.size();
  std::memcpy(&out[0], kCheckpointMagic, 8);
  std::memcpy(&out[8], &version, 4);
  std::memcpy(&out[12], &crc, 4);
  std::memcpy(&out[16], &size, 8);
  return out;
}

std::vector<at::Tensor> optimizer_params(torch::optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  for (auto& group : opt.param_groups()) out.insert(out.end(), group.params().begin(), group.params().end());
  return out;
}

StateKey state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }

namespace {

// Adam's and AdamW's state of one parameter into `tensors` (false for another kind).
template <class Adam>
bool save_adam_state(const torch::optim::OptimizerParamState* s, const std::string& pre,
                     std::map<std::string, at::Tensor>& tensors, int64_t& step) {
  auto* a = dynamic_cast<const Adam*>(s);
  if (!a) return false;
  tensors[pre + "exp_avg"] = a->exp_avg();
  tensors[pre + "exp_avg_sq"] = a->exp_avg_sq();
  if (a->max_exp_avg_sq().defined()) tensors[pre + "max_exp_avg_sq"] = a->max_exp_avg_sq();
  step = a->step();
  return true;
}

}  // namespace

void save_optimizer(torch::optim::Optimizer& opt, std::map<std::string, at::Tensor>& tensors, nlohmann::json& steps) {
  steps = nlohmann::json::array();
  const auto params = optimizer_params(opt);
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = opt.state().find(state_key(params[i]));
    int64_t step = -1;
    const std::string pre = "optimizer/" + std::to_string(i) + "/";
    if (it != opt.state().end() &&
        !save_adam_state<torch::optim::AdamParamState>(it->second.get(), pre, tensors, step) &&
        !save_adam_state<torch::optim::AdamWParamState>(it->second.get(), pre, tensors, step)) {
      auto* m = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get());
      PARE_CHECK(m, "an optimizer state pare cannot save");
      step = 0;
      if (m->momentum_buffer().defined()) tensors[pre + "momentum_buffer"] = m->momentum_buffer();
    }
    steps.push_back(step);
  }
}

OptimizerStates read_optimizer(torch::optim::Optimizer& opt, const std::string& kind,
                               std::map<std::string, at::Tensor>& tensors, const nlohmann::json& steps,
                               const std::string& path) {
  const auto params = optimizer_params(opt);
  PARE_CHECK(steps.is_array() && steps.size() == params.size(), "'", path, "': its optimizer state is for ",
             steps.is_array() ? steps.size() : 0, " parameters, this run has ", params.size());
  OptimizerStates out;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t step = json_int<int64_t>(steps[i], "an optimizer step count");
    if (step < 0) continue;
    const std::string pre = "optimizer/" + std::to_string(i) + "/";
    const at::Tensor& p = params[i];
    auto take = [&](const std::string& name, bool required) {
      auto it = tensors.find(pre + name);
      if (it == tensors.end()) {
        PARE_CHECK(!required, "'", path, "': no tensor '", pre + name, "' for ", kind, "'s state");
        return at::Tensor();
      }
      const at::Tensor t = it->second;
      PARE_CHECK(t.sizes() == p.sizes() && t.scalar_type() == p.scalar_type() && at::isfinite(t).all().item<bool>(),
                 "'", path, "': optimizer state '", pre + name, "' is a ", t.sizes(), " ", t.scalar_type(),
                 " tensor for a ", p.sizes(), " ", p.scalar_type(), " parameter, or not finite");
      tensors.erase(it);
      return t.to(p.device());
    };
    if (kind == "sgd") {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(take("momentum_buffer", false));
      out.emplace_back(state_key(p), std::move(s));
    } else {
      auto fill = [&](auto s) {
        s->step(step);
        s->exp_avg(take("exp_avg", true));
        s->exp_avg_sq(take("exp_avg_sq", true));
        s->max_exp_avg_sq(take("max_exp_avg_sq", false));
        out.emplace_back(state_key(p), std::move(s));
      };
      if (kind == "adamw") fill(std::make_unique<torch::optim::AdamWParamState>());
      else fill(std::make_unique<torch::optim::AdamParamState>());
    }
  }
  return out;
}

std::string_view checkpoint_payload(const std::string& file, const std::string& path) {
  const std::string why = "'" + path + "' is not a usable pare checkpoint: ";
  const std::string what_now = "; nothing was loaded (restore a good copy, or delete it to start afresh)";
  const std::string old_format =
      " (a libtorch archive, written by an older pare), which this pare no longer reads: libtorch's reader of "
      "such archives crashes on damaged ones. Finish that run with the pare that wrote it, or delete the file to "
      "start afresh";
  PARE_CHECK(file.compare(0, 2, "PK") != 0, why, "it is a checkpoint without a header", old_format);
  PARE_CHECK(file.size() >= kCheckpointHeader && std::memcmp(file.data(), kCheckpointMagic, 8) == 0, why,
             file.size() < kCheckpointHeader ? "it is truncated (" + std::to_string(file.size()) + " bytes)"
                                             : std::string("it does not start with a pare checkpoint header"),
             what_now);
  uint32_t version = 0, crc = 0;
  uint64_t size = 0;
  std::memcpy(&version, &file[8], 4);
  std::memcpy(&crc, &file[12], 4);
  std::memcpy(&size, &file[16], 8);
  PARE_CHECK(version != 1, why, "it is of format 1", old_format);
  PARE_CHECK(version == kCheckpointVersion, why, "format version ", version, " is not ", kCheckpointVersion,
             " (written by another pare)", what_now);
  PARE_CHECK(size == file.size() - kCheckpointHeader, why, "it is truncated or padded: the header announces ", size,
             " bytes of checkpoint, the file holds ", file.size() - kCheckpointHeader, what_now);
  const std::string_view payload = std::string_view(file).substr(kCheckpointHeader);
  const uint32_t actual = crc_of(payload);
  PARE_CHECK(actual == crc, why, "its checksum does not match (CRC-32 ", actual, ", written ", crc,
             "): the file was damaged after pare wrote it", what_now);
  return payload;
}

}  // namespace pare::train
