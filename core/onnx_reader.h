// Reads and validates ONNX model files without libtorch: the one protobuf reader under both
// core::load_onnx (which makes torch tensors of the weights) and pare_rt, the edge runtime (which
// makes oneDNN memory of them). Everything a hostile file could lie about is checked here, before
// anything is allocated from it: truncated or malformed protobuf, negative or overflowing dims,
// data sizes against shapes, external data that escapes the model's folder or is short, sparse
// initializers whose indices fall outside their shape, opsets and domains pare does not implement,
// ranks and dimensions past kMaxRank and kMaxDim.
//
//   reader::Model m = reader::read_model("student.onnx");
//   for (auto& [name, t] : m.initializers) use(t.data, t.dims, t.elem_type);
//
// Tensors are read whole into 64-byte aligned blocks (raw_data and the typed fields), or mapped
// from external data files (copy on write, so a trainer may change them in place). Sparse
// initializers (COO) are made dense. Attributes of kind GRAPH (control flow) are refused.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace pare::reader {

/// What a model may declare. Opsets of the default domain outside [kMinOpset, kMaxOpset] are
/// refused (the newest is what pare's op harness checks against ONNX Runtime; a model from a
/// newer ONNX may mean other semantics by the same op names), except opsets 1 to kMinOpset - 1
/// for models whose ops all mean there what they mean in pare (onnx_reader.cpp,
/// check_old_opset), and so are imports of domains other
/// than the default, ai.onnx.ml, com.microsoft (MatMulNBits) and pare's own (pare: FakeQuantize;
/// pare.*: extensions). Tensors and
/// declared shapes have at most kMaxRank dimensions, each at most kMaxDim.
constexpr int64_t kMinOpset = 6, kMaxOpset = 23;
constexpr size_t kMaxRank = 32;
constexpr int64_t kMaxDim = int64_t{1} << 40;
/// The domains a model may import, for messages.
const char* known_domains();

/// ONNX TensorProto.DataType numbers this reader decodes.
enum ElemType : int {
  kFloat = 1, kUInt8 = 2, kInt8 = 3, kInt16 = 5, kInt32 = 6, kInt64 = 7, kBool = 9, kFloat16 = 10,
  kDouble = 11, kBFloat16 = 16,
};

/// Bytes per element of an ONNX data type, 0 for types this reader does not decode.
int64_t elem_size(int elem_type);
/// "float32", "uint8", ... ("type N" for others).
std::string elem_type_name(int elem_type);
/// The decodable types, for messages.
const char* supported_types();

/// A dense tensor read from the file. `storage` owns `data` (a heap block or a file mapping).
struct Tensor {
  int elem_type = kFloat;
  std::vector<int64_t> dims;
  std::shared_ptr<void> storage;
  void* data = nullptr;  ///< nullptr when nbytes == 0
  int64_t nbytes = 0;

  int64_t numel() const;
};

/// An attribute value, in ONNX's AttributeProto kinds (the order of core::AttrValue).
using AttrValue = std::variant<int64_t, float, std::string, Tensor, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>>;

struct Node {
  std::string op_type, name;
  std::string domain;  ///< "" for the default domain ("ai.onnx" is read as "")
  std::vector<std::string> inputs, outputs;
  std::vector<std::pair<std::string, AttrValue>> attrs;  ///< file order, names unique
  int index = 0;                                          ///< position in the file's node list

  /// "Gemm 'fc1'", or "Gemm #3" for a node without a name.
  std::string label() const;
};

/// One dimension: a size (value >= 0), or a symbol ("N"; "" for an unnamed unknown dim).
struct Dim {
  int64_t value = -1;
  std::string symbol;
};

/// A graph input, output or value_info entry.
struct ValueInfo {
  std::string name;
  bool is_tensor = true;  ///< false for sequence, map and optional types
  int elem_type = 0;
  bool has_shape = false;
  std::vector<Dim> dims;
};

struct Model {
  std::string origin;  ///< the file (or source) named in messages
  std::string graph_name, doc;
  int64_t opset = 0;                        ///< the default domain's version
  std::map<std::string, int64_t> opsets;    ///< every imported domain ("" for the default)
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string producer_name, producer_version;
  std::vector<ValueInfo> inputs;  ///< graph inputs that are not initializers
  std::vector<ValueInfo> outputs, value_info;
  std::vector<Node> nodes;
  std::vector<std::pair<std::string, Tensor>> initializers;  ///< file order, names unique
  std::vector<std::string> sparse_initializers;  ///< names of those stored as sparse_initializer
};

/// Reads the model at `path`, external data resolved relative to its folder. Throws InputError
/// naming `path` and what is wrong.
Model read_model(const std::string& path);
/// Same, from bytes already in memory; `origin` names the source in messages and its folder holds
/// external data.
Model parse_model(const std::string& bytes, const std::string& origin);
/// One serialized TensorProto (a .pb file of ONNX's test data sets, as ONNX Runtime's
/// onnx_test_runner reads them); `origin` names it in messages, its folder holds external data.
/// Throws InputError naming `origin` when the bytes are not a TensorProto of a decodable type.
Tensor parse_tensor(const std::string& bytes, const std::string& origin);

}  // namespace pare::reader
