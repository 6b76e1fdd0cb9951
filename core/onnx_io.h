// ONNX in and out through the real ONNX protobuf schema (libonnx).
//
//   Graph g = load_model("teacher.onnx");                  // or a zoo spec: load_model("cnn", seed)
//   save_onnx(g, "out/student.onnx");                      // checked by onnx::checker, atomic
//   save_onnx(big, "out/big.onnx", OnnxSaveOptions().external_data(true));  // + big.onnx.data
//   save_onnx(pruned, "out/p.onnx", OnnxSaveOptions().sparse({"fc1.weight"}));  // COO sparse_initializer
//
// Supported: initializers and TENSOR attributes of f32 f16 bf16 f64 int8 uint8 int16 int32 int64
// bool (raw_data, the typed *_data fields, or external data files), sparse initializers (made
// dense); attributes INT FLOAT STRING TENSOR INTS FLOATS STRINGS; symbolic dims (dim_param). Not
// supported (InputError): control flow (GRAPH attributes), string tensors. The file is read and
// checked by core/onnx_reader.h, which the edge runtime shares.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::core {

struct OnnxSaveOptions {
  /// Write initializers to "<model file name>.data" beside the model: forced when the tensors
  /// would exceed protobuf's 2 GB limit, optional otherwise.
  OnnxSaveOptions& external_data(bool v) { external_data_ = v; return *this; }
  /// Tensors smaller than this stay inside the model when external data is used.
  OnnxSaveOptions& external_threshold(int64_t bytes) { external_threshold_ = bytes; return *this; }
  /// Run onnx::checker::check_model on the result before writing it.
  OnnxSaveOptions& check(bool v) { check_ = v; return *this; }
  /// Initializers to write as ONNX sparse_initializer in COO form: the values tensor [NNZ] (which
  /// carries the name) holds every element whose bits are not all zero, in order; the indices
  /// tensor [NNZ] holds their int64 linear (row-major) positions, ascending; `dims` is the dense
  /// shape. Reading the file gives back the same tensor to the bit (a -0.0 is kept as a value).
  /// Sparse initializers always stay inside the model file, also with external data. ONNX wants
  /// them of rank >= 1 with positive dims: naming anything else throws InputError.
  OnnxSaveOptions& sparse(std::set<std::string> names) { sparse_ = std::move(names); return *this; }

  bool external_data_ = false;
  int64_t external_threshold_ = 1024;
  bool check_ = true;
  std::set<std::string> sparse_;
};

/// What a file holds besides its graph; filled by the load_onnx overload that takes it.
struct OnnxFileInfo {
  int64_t file_bytes = 0;  ///< size of the model file itself (external data files not counted)
  std::vector<std::string> sparse_initializers;  ///< initializers stored as sparse_initializer, file order
};

/// The bytes one initializer adds to a model file (protobuf framing included), written dense as an
/// `initializer` and as a COO `sparse_initializer`, and how many values the sparse form keeps.
struct SparseCost {
  int64_t elements = 0, nonzeros = 0;
  int64_t dense_bytes = 0, sparse_bytes = 0;
};

/// The cost of writing `t` under `name` either way (OnnxSaveOptions::sparse). Zeros are elements
/// whose bits are all zero, as the writer drops them. Throws InputError for a scalar, an empty
/// tensor or a type ONNX lacks.
SparseCost sparse_cost(const std::string& name, const at::Tensor& t);

/// Options for load_onnx / parse_onnx.
struct OnnxLoadOptions {
  /// Run Graph::verify() on the result (unknown ops, arity, attribute kinds). Turn off only for
  /// tools that inspect graphs pare cannot run.
  OnnxLoadOptions& verify(bool v) { verify_ = v; return *this; }

  bool verify_ = true;
};

/// A serialized ONNX TensorProto (.pb, as in ONNX's test data sets) as a CPU tensor. Throws
/// InputError naming the file when it is not one, or of a type pare does not decode.
at::Tensor load_tensor_pb(const std::string& path);

/// Reads an ONNX model (with external data files resolved relative to the model's folder).
/// Graph inputs that are also initializers are dropped from Graph::inputs.
/// Throws InputError naming the file for truncated or malformed protobuf, unsupported dtypes or
/// attributes, missing or short external data; the graph is verified (unknown ops are named).
Graph load_onnx(const std::string& path);
Graph load_onnx(const std::string& path, const OnnxLoadOptions& opts);
/// Same, and fills `info` (file size, which initializers the file stores sparse) when not null.
Graph load_onnx(const std::string& path, const OnnxLoadOptions& opts, OnnxFileInfo* info);
/// Same, from bytes already in memory; `origin` names the source in messages, and external data
/// is looked up relative to its folder.
Graph parse_onnx(const std::string& bytes, const std::string& origin);
Graph parse_onnx(const std::string& bytes, const std::string& origin, const OnnxLoadOptions& opts);

/// Writes `g` as an ONNX model (IR version 8, opset g.opset) atomically, model and external data
/// both. The checker runs before anything is written: a rejected model leaves no file and throws
/// Error naming `path`. Throws InputError for initializers of a type ONNX lacks and for
/// OnnxSaveOptions::sparse names that cannot be sparse initializers.
void save_onnx(const Graph& g, const std::string& path, const OnnxSaveOptions& opts = {});
/// Serializes `g` with every initializer inline as raw_data; used by save_onnx and tests.
/// Throws Error when the checker rejects the model or it exceeds protobuf's 2 GB limit.
std::string serialize_onnx(const Graph& g, bool check = true);
/// Same with save options: the checker per `opts.check_`, the initializers named by
/// `opts.sparse_` as sparse_initializer (external data options do not apply: all stays inline).
std::string serialize_onnx(const Graph& g, const OnnxSaveOptions& opts);

/// A model from a zoo spec ("mlp:784-300-100-10", "cnn", ...; weights seeded with `seed`), a
/// source registered with register_model_source ("hf:DIR", "gguf:FILE" once lm/ registered them),
/// or an ONNX file. Throws InputError when it is none of these, listing the zoo models.
Graph load_model(const std::string& path_or_spec, uint64_t seed = 0);

/// Loads models of a kind that a module above core knows (lm/'s language models): a spec
/// "PREFIX:REST" goes to `load(REST, seed)`, and so does a path for which `claims(path)` is true
/// (a folder holding config.json is a Hugging Face checkpoint). Registering a prefix twice keeps
/// the first. lm::register_model_sources() registers "hf" and "gguf".
using ModelLoader = std::function<Graph(const std::string& rest, uint64_t seed)>;
void register_model_source(const std::string& prefix, ModelLoader load,
                           std::function<bool(const std::string& path)> claims = nullptr);

}  // namespace pare::core
