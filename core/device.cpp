#include "core/device.h"

#include "core/error.h"
#include "core/torch_compat.h"

namespace pare::core {

namespace {

at::Device cuda_device(const std::string& spec, int index) {
  PARE_CHECK_OPTION(compat::cuda_built(), "device", spec, ": this pare is built against libtorch ",
                    compat::torch_version(), " without CUDA; use cpu, or build pare against a CUDA libtorch "
                    "(docs/BUILDING.md: Building and checking on a GPU machine)");
  const int n = compat::cuda_device_count();
  PARE_CHECK_OPTION(n > 0, "device", spec, ": libtorch has CUDA but sees no GPU on this machine (check "
                    "nvidia-smi and CUDA_VISIBLE_DEVICES)");
  PARE_CHECK_OPTION(index >= 0 && index < n, "device", spec, ": GPU ", index, " does not exist; this machine has ",
                    n, " (cuda:0", n > 1 ? pare::detail::concat(" to cuda:", n - 1) : std::string(), ")",
                    spec == "cuda" ? "; under a launcher 'cuda' takes GPU LOCAL_RANK: start at most one rank per GPU"
                                   : "");
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index));
}

}  // namespace

at::Device parse_device(const std::string& spec, int local_rank) {
  if (spec == "cpu") return at::kCPU;
  if (spec == "auto") return compat::cuda_available() ? cuda_device(spec, local_rank) : at::Device(at::kCPU);
  if (spec == "cuda") return cuda_device(spec, local_rank);
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string num = spec.substr(5);
    const bool digits = !num.empty() && num.size() <= 4 && num.find_first_not_of("0123456789") == std::string::npos;
    PARE_CHECK_OPTION(digits, "device", "must be cpu, cuda, cuda:N or auto, got '", spec, "'");
    return cuda_device(spec, std::stoi(num));
  }
  throw InputError("device must be cpu, cuda, cuda:N or auto, got '" + spec + "'").about("device");
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw InputError("precision must be fp32, bf16 or fp16, got '" + name + "'").about("precision");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    default: return "fp32";
  }
}

at::ScalarType precision_dtype(Precision p) {
  switch (p) {
    case Precision::kBf16: return at::kBFloat16;
    case Precision::kFp16: return at::kHalf;
    default: return at::kFloat;
  }
}

void check_precision(Precision p, const at::Device& d) {
  PARE_CHECK_OPTION(p != Precision::kFp16 || d.is_cuda(), "precision",
                    "fp16 runs on CUDA only (libtorch's CPU autocast has bf16 alone); on ", d.str(),
                    " use bf16 or fp32");
}

AutocastScope::AutocastScope(const at::Device& d, Precision p) {
  if (p == Precision::kFp32) return;
  check_precision(p, d);
  type_ = d.is_cuda() ? at::kCUDA : at::kCPU;
  const compat::AutocastState before = compat::autocast_state(type_);
  was_enabled_ = before.enabled;
  was_dtype_ = before.dtype;
  compat::set_autocast_state(type_, {true, precision_dtype(p)});
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  compat::set_autocast_state(type_, {was_enabled_, was_dtype_});
  if (!was_enabled_) compat::autocast_clear_cache();
}

}  // namespace pare::core
