// Where tensors live and in which precision the math runs: what --device and --precision name,
// checked against the libtorch pare was built with.
//
//   at::Device d = core::parse_device("cuda", world.local_rank);   // cuda:LOCAL_RANK
//   core::Precision p = core::parse_precision("bf16");
//   core::check_precision(p, d);
//   { core::AutocastScope amp(d, p); logits = model.forward({x})[0]; }   // matmuls in bf16
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace pare::core {

/// "cpu", "cuda", "cuda:N" or "auto" (the GPU when this libtorch has CUDA and a device is
/// present, else the CPU). "cuda" and "auto" take GPU `local_rank` (a launcher's LOCAL_RANK:
/// one GPU per rank). Throws InputError naming option "device" for another spelling, for CUDA on
/// a libtorch without it or on a machine without a GPU, and for an index past the last GPU.
at::Device parse_device(const std::string& spec, int local_rank = 0);

/// The precision of a training run's forward passes (teacher and student): fp32, or bf16 / fp16
/// under autocast, the weights (master copies) and optimizer state staying fp32.
enum class Precision { kFp32, kBf16, kFp16 };
/// "fp32", "bf16" or "fp16"; throws InputError naming option "precision" for another.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
/// The lower-precision type of `p` (kFloat for fp32).
at::ScalarType precision_dtype(Precision p);
/// Throws InputError naming option "precision" when `p` cannot run on `d`: fp16 autocast needs
/// CUDA (this libtorch's CPU autocast knows only bf16).
void check_precision(Precision p, const at::Device& d);

/// For its lifetime, ops that autocast lists (convolutions, matmuls, ...) run in `p` on `d`'s
/// device type, and precision-sensitive ones (softmax, losses, norms) in fp32, as under
/// torch.autocast. Restores the previous state on exit; fp32 changes nothing.
class AutocastScope {
 public:
  AutocastScope(const at::Device& d, Precision p);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  at::DeviceType type_ = at::kCPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

/// Pinned host memory speeds up and unblocks host-to-GPU copies: true for a CUDA device.
inline bool wants_pinned_memory(const at::Device& d) { return d.is_cuda(); }

}  // namespace pare::core
