// Host tensors, views, dtypes and memory descriptors of pare_rt.
#include <cstdlib>
#include <cstring>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"

namespace pare::rt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kUInt8: case DType::kInt8: case DType::kBool: return 1;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::optional<DType> dtype_from_onnx(int64_t t) {
  switch (t) {
    case reader::kFloat: return DType::kFloat32;
    case reader::kUInt8: return DType::kUInt8;
    case reader::kInt8: return DType::kInt8;
    case reader::kInt32: return DType::kInt32;
    case reader::kInt64: return DType::kInt64;
    case reader::kBool: return DType::kBool;
    default: return std::nullopt;
  }
}

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorView::numel() const { return numel_of(dims); }
int64_t View::numel() const { return numel_of(dims); }
int64_t HTensor::numel() const { return numel_of(dims); }

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

HTensor HTensor::zeros(DType t, std::vector<int64_t> dims) {
  HTensor h;
  h.dtype = t;
  h.dims = std::move(dims);
  const size_t bytes = static_cast<size_t>(h.nbytes());
  const size_t size = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, size);
  if (!p) throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, size);
  h.storage = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  h.data = p;
  return h;
}

double HTensor::f(int64_t k) const {
  switch (dtype) {
    case DType::kFloat32: return ptr<float>()[k];
    case DType::kUInt8: return ptr<uint8_t>()[k];
    case DType::kInt8: return ptr<int8_t>()[k];
    case DType::kInt32: return ptr<int32_t>()[k];
    case DType::kInt64: return static_cast<double>(ptr<int64_t>()[k]);
    case DType::kBool: return ptr<uint8_t>()[k] ? 1 : 0;
  }
  return 0;
}

int64_t HTensor::i(int64_t k) const {
  if (dtype == DType::kInt64) return ptr<int64_t>()[k];
  if (dtype == DType::kFloat32) return static_cast<int64_t>(ptr<float>()[k]);
  return static_cast<int64_t>(f(k));
}

bool has_dnnl_type(DType t) {
  return t == DType::kFloat32 || t == DType::kUInt8 || t == DType::kInt8 || t == DType::kInt32;
}

dnnl::memory::data_type dnnl_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::kFloat32: return dt::f32;
    case DType::kUInt8: return dt::u8;
    case DType::kInt8: return dt::s8;
    case DType::kInt32: return dt::s32;
    default: PARE_ASSERT(false, "no oneDNN type for ", dtype_name(t));
  }
  return dt::undef;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * std::max<int64_t>(dims[k], 1);
  return s;
}

dnnl::memory::desc plain_md(DType t, const std::vector<int64_t>& dims) {
  // oneDNN has no 0-d tensors and no int64/bool: those are described by their bytes (u8), which
  // is all a reorder or a buffer needs.
  std::vector<int64_t> d = dims.empty() ? std::vector<int64_t>{1} : dims;
  if (!has_dnnl_type(t)) {
    d.back() *= dtype_size(t);
    return dnnl::memory::desc(d, dnnl::memory::data_type::u8, row_major_strides(d));
  }
  return dnnl::memory::desc(d, dnnl_type(t), row_major_strides(d));
}

bool is_plain(const dnnl::memory::desc& md) { return compat::is_row_major(md); }

bool PValue::plain() const { return is_plain(md); }

View RunCtx::view(const Plan& p, int v) const {
  const PValue& pv = p.values[static_cast<size_t>(v)];
  return View{pv.dtype, pv.dims, ptr[static_cast<size_t>(v)]};
}

}  // namespace pare::rt
