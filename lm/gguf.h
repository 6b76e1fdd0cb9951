// GGUF files (llama.cpp's model format, versions 2 and 3): metadata, tensor infos, and tensors
// dequantized to fp32 exactly as ggml does it.
//
//   lm::GgufFile f("model.gguf");                       // maps the file; reads no tensor data
//   std::string arch = f.get_string("general.architecture");
//   int64_t layers = f.get_int(arch + ".block_count");
//   at::Tensor w = f.tensor("blk.0.attn_q.weight");     // fp32 [out, in] (PyTorch order)
//   at::Tensor bytes = f.raw("blk.0.attn_q.weight");    // the Q4_1 blocks themselves
//
// A GGUF file is: "GGUF", version, tensor count, key/value count; the key/values (typed scalars,
// strings, arrays of either); the tensor infos (name, dims innermost first, ggml type, offset into
// the data section); padding to `general.alignment` (default 32); the data section. pare checks
// every count, length, offset and size against the file before it allocates or reads.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quantize/gptq.h"

namespace pare::lm {

/// The most dimensions a ggml tensor has (GGML_MAX_DIMS).
constexpr uint32_t kGgmlMaxDims = 4;

/// A metadata value's type, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

/// The GGUF spelling of a value type ("uint32", "string", "array", ...).
const char* gguf_value_type_name(GgufValueType type);

/// A ggml tensor type, numbered as in ggml.h (the numbers GGUF stores).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kBF16 = 30,
};

/// ggml's name of a tensor type ("Q4_1"), or "type N" for a number ggml does not define.
std::string ggml_type_name(uint32_t type);
/// True if GgufFile::tensor() dequantizes tensors of this type: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1
/// Q8_0 Q2_K Q4_K Q5_K Q6_K Q8_K.
bool ggml_type_dequantizable(uint32_t type);
/// True if ggml_quantize writes tensors of this type: F32 F16 BF16 Q8_0 Q5_0 Q4_0 Q4_K.
bool ggml_type_quantizable(uint32_t type);
/// Elements in one block of the type (1 for F32, F16, BF16; 32 for Q8_0, Q4_0; 256 for Q4_K), and
/// its bytes; 0 for a number ggml does not define.
int64_t ggml_block_size(uint32_t type);
int64_t ggml_block_bytes(uint32_t type);
/// `values` (fp32; rows of the last dimension) as the type's bytes, as ggml-quants.c's
/// quantize_row_*_ref writes them: bit for bit what gguf-py's gguf.quants.quantize gives for F16 BF16
/// Q8_0 Q5_0 Q4_0 (Q4_K: ggml's reference algorithm, ported with its float operations in order). Throws
/// InputError naming `what` when the last dimension is not a multiple of the block or the type is
/// not quantizable.
std::string ggml_quantize(const at::Tensor& values, uint32_t type, const std::string& what);
/// A matrix's blocks as its quantizer chose them (GPTQ's codes on a format's grid): written as they
/// are, never rounded again.
struct GgmlBlocks {
  GgmlType type = GgmlType::kQ4_0;
  std::string bytes;
};

/// The grid of Q4_K blocks `blocks` (ggml_quantize's of a [rows, cols] weight, cols a multiple of
/// 256): per group of 32 columns, scale d * sc and offset -(dmin * m) (fp16 super-block scales,
/// 6-bit sub-block scales and mins), codes 0..15; grid_values computes d * sc * q - dmin * m as
/// ggml's dequantizer does. Codes chosen on it (GPTQ's) go back into the blocks by ggml_pack_q4_k.
/// Throws InputError when the bytes are not [rows, cols] in Q4_K.
quantize::Grid q4_k_grid(const std::string& blocks, int64_t rows, int64_t cols);
/// `blocks` (Q4_K) with their 4-bit quants replaced by `codes` (int [rows, cols], 0..15, on
/// q4_k_grid(blocks)); the super-block headers stay.
std::string ggml_pack_q4_k(const at::Tensor& codes, std::string blocks);

/// The blocks of Q4_0 or Q8_0 from codes already chosen (GPTQ's on the format's grid): `codes` int
/// [rows, cols] (Q4_0: 0..15 standing for (code - 8) * scale; Q8_0: -127..127 for code * scale) and
/// `scales` float [rows, cols / 32], each exact in fp16. Nothing is rounded again.
std::string ggml_pack(const at::Tensor& codes, const at::Tensor& scales, uint32_t type);
/// The fp32 values of `bytes`, blocks of `type`, as `shape` (PyTorch order): what GgufFile::tensor
/// gives for them.
at::Tensor ggml_dequantize(const std::string& bytes, uint32_t type, const std::vector<int64_t>& shape);

/// One metadata value: a scalar, a string, or an array of scalars or of strings (GGUF allows
/// arrays of arrays; llama.cpp reads none and neither does pare).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  /// For arrays, the elements' type (never kArray).
  GgufValueType elem_type = GgufValueType::kU8;
  /// Scalars and arrays of scalars: the values' little-endian bytes as stored (a bool is one byte).
  std::string bytes;
  /// A string, or the elements of an array of strings.
  std::vector<std::string> strings;
  /// Number of elements (1 for a scalar or a string).
  uint64_t count = 1;

  bool is_array() const { return type == GgufValueType::kArray; }
};

/// Where one tensor lives in a GGUF file.
struct GgufTensorInfo {
  std::string name;
  /// PyTorch order, outermost first: a matrix ggml calls ne = {cols, rows} is {rows, cols} here.
  std::vector<int64_t> shape;
  /// ggml type number (GgmlType for the ones pare names).
  uint32_t type = 0;
  /// Byte offset from the start of the data section, and the tensor's size in bytes.
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  int64_t numel() const;
};

/// A GGUF file, mapped into memory (copy on write: a tensor that views it may be changed in place
/// without touching the file). Tensors returned by tensor() or raw() keep the mapping alive.
class GgufFile {
 public:
  /// Maps and checks `path`. Throws InputError naming the file and what is wrong: bad magic, a
  /// version other than 2 or 3, a truncated header, key, value or tensor info, counts or lengths
  /// the file cannot hold, a duplicate key or tensor name, an array of arrays, an unknown value or
  /// tensor type, a bad `general.alignment`, a first dimension that is not a multiple of the type's
  /// block, a misaligned tensor offset, or a tensor past the end of the file.
  explicit GgufFile(const std::string& path);
  /// The same checks on a GGUF file in memory (`bytes` is moved in and kept); `what` names it in
  /// messages.
  static GgufFile from_bytes(std::string bytes, const std::string& what);

  /// The file's name, as messages give it.
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  /// `general.alignment`, or 32 when the file does not set it.
  uint64_t alignment() const { return alignment_; }
  /// Offset of the data section from the start of the file.
  uint64_t data_offset() const { return data_offset_; }

  /// Metadata keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  /// The value of `key`. Throws InputError naming the file and the key when it is missing.
  const GgufValue& value(const std::string& key) const;
  /// Typed getters. Each throws InputError naming the file and the key when the key is missing or
  /// holds another type (saying which); a value out of the result's range is refused too.
  std::string get_string(const std::string& key) const;
  /// Any integer type (u8 ... i64).
  int64_t get_int(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;
  /// f32 or f64 (an f32 widened exactly).
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  /// Arrays: of strings; of any integer type; of f32 or f64; of bools.
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  std::vector<double> get_floats(const std::string& key) const;
  std::vector<bool> get_bools(const std::string& key) const;
  /// The getter's value, or `fallback` when the key is missing (a wrong type still throws).
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;

  /// Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool has_tensor(const std::string& name) const { return tensor_index_.count(name) != 0; }
  /// Throws InputError naming the file and the tensor when there is no such tensor.
  const GgufTensorInfo& tensor_info(const std::string& name) const;
  /// The tensor as fp32 in PyTorch order, bit for bit what ggml's dequantize_row_* (and gguf-py's
  /// gguf.quants.dequantize) give. An F32 tensor views the mapping; the others are fresh tensors.
  /// Throws InputError naming the tensor and its type when pare does not dequantize the type.
  at::Tensor tensor(const std::string& name) const;
  /// The tensor's bytes exactly as stored (uint8, 1-D, viewing the mapping): ggml blocks for a
  /// quantized type.
  at::Tensor raw(const std::string& name) const;

 private:
  GgufFile() = default;
  void parse();
  at::Tensor view_bytes(const GgufTensorInfo& info) const;

  std::string path_;
  std::shared_ptr<const void> storage_;  // the mapping (or the bytes) the tensors point into
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue> values_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// Writes a GGUF v3 file: metadata in the order set, tensor infos, the data section aligned to
/// `general.alignment` (32 unless set). The file is written atomically (core/file_util.h): a failure
/// leaves no file and no partial one.
///
///   lm::GgufWriter w;
///   w.set_string("general.architecture", "llama");
///   w.set_u32("llama.block_count", 2);
///   w.add_tensor("token_embd.weight", {vocab, hidden}, GgmlType::kQ8_0, lm::ggml_quantize(embed, 8, "embed"));
///   w.write("model.gguf");
class GgufWriter {
 public:
  /// Sets `key` (replacing an earlier value in place, keeping its position).
  void set(const std::string& key, GgufValue value);
  void set_string(const std::string& key, const std::string& v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  /// A tensor of `shape` (PyTorch order, outermost first) whose bytes are `data` in ggml type
  /// `type`. Throws Error for a name given twice, more than 4 dimensions, or bytes that are not
  /// the shape's size in the type.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type, std::string data);
  /// The file's bytes (tests; write() streams them).
  std::string bytes() const;
  /// Writes the file atomically; returns its size in bytes.
  uint64_t write(const std::string& path) const;

 private:
  void write_to(std::ostream& out) const;
  struct Tensor {
    GgufTensorInfo info;
    std::string data;
  };
  std::vector<std::pair<std::string, GgufValue>> values_;
  std::vector<Tensor> tensors_;
};

}  // namespace pare::lm
