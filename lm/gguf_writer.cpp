// GgufWriter (lm/gguf.h): the GGUF v3 container written in the order GgufFile reads it.
#include <cstring>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "lm/gguf.h"

namespace pare::lm {

namespace {

constexpr uint32_t kVersion = 3;

template <class T>
void put(std::ostream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_string(std::ostream& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

template <class T>
GgufValue scalar(GgufValueType type, T v) {
  GgufValue out;
  out.type = type;
  out.bytes.assign(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

template <class T>
GgufValue array(GgufValueType elem, const std::vector<T>& v) {
  GgufValue out;
  out.type = GgufValueType::kArray;
  out.elem_type = elem;
  out.count = v.size();
  out.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return out;
}

void put_value(std::ostream& out, const GgufValue& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type == GgufValueType::kString) return put_string(out, v.strings.at(0));
  if (v.is_array()) {
    put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
    put<uint64_t>(out, v.count);
    if (v.elem_type == GgufValueType::kString) {
      for (const std::string& s : v.strings) put_string(out, s);
      return;
    }
  }
  out.write(v.bytes.data(), static_cast<std::streamsize>(v.bytes.size()));
}

uint64_t alignment_of(const std::vector<std::pair<std::string, GgufValue>>& values) {
  for (const auto& [key, v] : values)
    if (key == "general.alignment") {
      uint32_t a;
      std::memcpy(&a, v.bytes.data(), 4);
      return a;
    }
  return 32;
}

void pad_to(std::ostream& out, uint64_t pos, uint64_t alignment) {
  static const char zeros[256] = {};
  for (uint64_t n = (alignment - pos % alignment) % alignment; n > 0;) {
    const uint64_t k = std::min<uint64_t>(n, sizeof(zeros));
    out.write(zeros, static_cast<std::streamsize>(k));
    n -= k;
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment")
    PARE_CHECK(value.type == GgufValueType::kU32 && value.bytes.size() == 4, "general.alignment must be a uint32");
  for (auto& [k, v] : values_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  values_.emplace_back(key, std::move(value));
}

void GgufWriter::set_string(const std::string& key, const std::string& v) {
  GgufValue value;
  value.type = GgufValueType::kString;
  value.strings = {v};
  set(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, scalar(GgufValueType::kU32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set(key, scalar(GgufValueType::kI32, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, scalar(GgufValueType::kF32, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, scalar<uint8_t>(GgufValueType::kBool, v ? 1 : 0)); }

void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  GgufValue value;
  value.type = GgufValueType::kArray;
  value.elem_type = GgufValueType::kString;
  value.strings = v;
  value.count = v.size();
  set(key, std::move(value));
}

void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) { set(key, array(GgufValueType::kI32, v)); }
void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) { set(key, array(GgufValueType::kF32, v)); }

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type, std::string data) {
  for (const Tensor& t : tensors_) PARE_CHECK(t.info.name != name, "GGUF tensor '", name, "' added twice");
  PARE_CHECK(!shape.empty() && shape.size() <= kGgmlMaxDims, "GGUF tensor '", name, "' has ", shape.size(),
             " dimensions; GGUF takes 1 to ", kGgmlMaxDims);
  Tensor t;
  t.info.name = name;
  t.info.shape = shape;
  t.info.type = type;
  const int64_t block = ggml_block_size(type);
  PARE_CHECK(block > 0 && shape.back() % block == 0, "GGUF tensor '", name, "': rows of ", shape.back(),
             " values do not fill blocks of ", ggml_type_name(type));
  const uint64_t want = static_cast<uint64_t>(t.info.numel() / block * ggml_block_bytes(type));
  PARE_CHECK(data.size() == want, "GGUF tensor '", name, "' has ", data.size(), " bytes; its shape in ",
             ggml_type_name(type), " takes ", want);
  t.info.nbytes = want;
  t.data = std::move(data);
  tensors_.push_back(std::move(t));
}

void GgufWriter::write_to(std::ostream& out) const {
  const uint64_t alignment = alignment_of(values_);
  std::ostringstream head;
  put<uint32_t>(head, 0x46554747);  // "GGUF"
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, values_.size());
  for (const auto& [key, v] : values_) {
    put_string(head, key);
    put_value(head, v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.info.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.info.shape.size()));
    for (auto d = t.info.shape.rbegin(); d != t.info.shape.rend(); ++d) put<uint64_t>(head, static_cast<uint64_t>(*d));
    put<uint32_t>(head, t.info.type);
    put<uint64_t>(head, offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  const std::string h = head.str();
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  pad_to(out, h.size(), alignment);
  for (const Tensor& t : tensors_) {
    out.write(t.data.data(), static_cast<std::streamsize>(t.data.size()));
    pad_to(out, t.data.size(), alignment);
  }
}

std::string GgufWriter::bytes() const {
  std::ostringstream out;
  write_to(out);
  return out.str();
}

uint64_t GgufWriter::write(const std::string& path) const {
  uint64_t size = 0;
  write_file_atomic(path, [&](std::ostream& out) {
    const auto start = out.tellp();
    write_to(out);
    size = static_cast<uint64_t>(out.tellp() - start);
  });
  return size;
}

}  // namespace pare::lm
