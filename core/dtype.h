// Element types: ONNX's TensorProto.DataType numbers, safetensors/numpy names, and at::ScalarType.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace pare::core {

/// ONNX TensorProto.DataType values pare handles.
enum OnnxType : int {
  kOnnxFloat = 1, kOnnxUInt8 = 2, kOnnxInt8 = 3, kOnnxInt16 = 5, kOnnxInt32 = 6, kOnnxInt64 = 7,
  kOnnxBool = 9, kOnnxFloat16 = 10, kOnnxDouble = 11, kOnnxBFloat16 = 16,
};

/// at::ScalarType for an ONNX data type number; std::nullopt for types pare does not handle.
std::optional<at::ScalarType> scalar_type_from_onnx(int onnx_type);
/// ONNX data type number for a scalar type; throws InputError for types ONNX export lacks.
int onnx_type_from_scalar(at::ScalarType t);
/// "float32", "int64", ... for messages and reports.
std::string dtype_name(at::ScalarType t);

}  // namespace pare::core
