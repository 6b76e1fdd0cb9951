#include "core/dtype.h"

#include "core/error.h"

namespace pare::core {

std::optional<at::ScalarType> scalar_type_from_onnx(int t) {
  switch (t) {
    case kOnnxFloat: return at::kFloat;
    case kOnnxUInt8: return at::kByte;
    case kOnnxInt8: return at::kChar;
    case kOnnxInt16: return at::kShort;
    case kOnnxInt32: return at::kInt;
    case kOnnxInt64: return at::kLong;
    case kOnnxBool: return at::kBool;
    case kOnnxFloat16: return at::kHalf;
    case kOnnxDouble: return at::kDouble;
    case kOnnxBFloat16: return at::kBFloat16;
    default: return std::nullopt;
  }
}

int onnx_type_from_scalar(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kOnnxFloat;
    case at::kByte: return kOnnxUInt8;
    case at::kChar: return kOnnxInt8;
    case at::kShort: return kOnnxInt16;
    case at::kInt: return kOnnxInt32;
    case at::kLong: return kOnnxInt64;
    case at::kBool: return kOnnxBool;
    case at::kHalf: return kOnnxFloat16;
    case at::kDouble: return kOnnxDouble;
    case at::kBFloat16: return kOnnxBFloat16;
    default: PARE_CHECK(false, "element type ", c10::toString(t), " has no ONNX equivalent");
  }
  return 0;
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    default: return c10::toString(t);
  }
}

}  // namespace pare::core
