#include "export/rt_bridge.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/zoo.h"

namespace pare::exporter {

at::ScalarType torch_dtype(rt::DType t) {
  switch (t) {
    case rt::DType::kFloat32: return at::kFloat;
    case rt::DType::kUInt8: return at::kByte;
    case rt::DType::kInt8: return at::kChar;
    case rt::DType::kInt32: return at::kInt;
    case rt::DType::kInt64: return at::kLong;
    case rt::DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

rt::TensorView rt_view(const at::Tensor& t) {
  PARE_CHECK(t.device().is_cpu(), "pare_rt runs on the CPU; the tensor is on ", t.device());
  PARE_CHECK(t.is_contiguous(), "pare_rt reads contiguous tensors");
  rt::DType d;
  switch (t.scalar_type()) {
    case at::kFloat: d = rt::DType::kFloat32; break;
    case at::kByte: d = rt::DType::kUInt8; break;
    case at::kChar: d = rt::DType::kInt8; break;
    case at::kInt: d = rt::DType::kInt32; break;
    case at::kLong: d = rt::DType::kInt64; break;
    case at::kBool: d = rt::DType::kBool; break;
    default:
      throw InputError("pare_rt takes float32, uint8, int8, int32, int64 and bool tensors, got " +
                       core::dtype_name(t.scalar_type()));
  }
  return rt::TensorView{d, t.sizes().vec(), t.data_ptr()};
}

at::Tensor from_rt(const rt::TensorView& v) {
  at::Tensor t = at::empty(v.dims, at::TensorOptions().dtype(torch_dtype(v.dtype)));
  if (v.nbytes() > 0) std::memcpy(t.data_ptr(), v.data, static_cast<size_t>(v.nbytes()));
  return t;
}

rt::Model load_rt_model(const std::string& path_or_spec, const rt::Options& opts, uint64_t seed) {
  if (core::is_zoo_spec(path_or_spec))
    return rt::Model::load_bytes(core::serialize_onnx(core::build_zoo_model(path_or_spec, seed)), path_or_spec, opts);
  PARE_CHECK(file_exists(path_or_spec), "'", path_or_spec, "' is neither an ONNX file nor a zoo model");
  return rt::Model::load(path_or_spec, opts);
}

}  // namespace pare::exporter
