// core::Graph: the one model representation that travels from import through training, pruning,
// quantization and export. It is ONNX-shaped: nodes with an op type, named inputs and outputs and
// attributes; initializers (weights, constants) as at::Tensor; graph inputs/outputs with shapes
// whose dims may be symbolic ("N" for the batch).
//
//   Graph g;
//   g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 784}});
//   g.initializers["w"] = at::randn({10, 784});
//   g.add_node("Gemm", {"x", "w"}, {"y"}, {{"transB", int64_t{1}}});
//   g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 10}});
//   g.verify();
//
// A name of "" in a node's inputs marks an omitted optional input, as in ONNX.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard, which ATen.h no longer brings in 2.x

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace pare::core {

/// One dimension of a shape: a fixed size, or a named symbol such as the batch "N".
struct Dim {
  int64_t value = -1;   ///< size when fixed; -1 when symbolic
  std::string symbol;   ///< name when symbolic ("" for an unnamed unknown dim)
  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from a size on purpose
  static Dim sym(std::string name) {
    Dim d;
    d.symbol = std::move(name);
    return d;
  }
  bool is_fixed() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string str() const { return is_fixed() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};

using Shape = std::vector<Dim>;

/// "[N,1,28,28]"
std::string shape_str(const Shape& s);

/// A graph input, output or intermediate value with its element type and shape.
struct ValueInfo {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  Shape shape;
  bool has_shape = true;  ///< false when the rank is unknown
};

/// An attribute value, matching ONNX's AttributeProto kinds (FLOAT is float32 as in ONNX).
using AttrValue = std::variant<int64_t, float, std::string, at::Tensor, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>>;

/// The kinds of AttrValue in variant order (used by attribute specs and the ONNX writer).
enum class AttrKind { kInt = 0, kFloat, kString, kTensor, kInts, kFloats, kStrings };
const char* attr_kind_name(AttrKind k);
inline AttrKind attr_kind(const AttrValue& v) { return static_cast<AttrKind>(v.index()); }

/// One operator application.
struct Node {
  std::string op_type;
  std::string name;
  std::vector<std::string> inputs;   ///< "" marks an omitted optional input
  std::vector<std::string> outputs;  ///< "" marks an omitted optional output
  std::map<std::string, AttrValue> attrs;
  std::string domain;                ///< "" for the default ONNX domain

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  /// Typed getters: return `def` when absent, throw InputError naming the node when the
  /// attribute exists with another kind.
  int64_t attr_int(const std::string& key, int64_t def) const;
  float attr_float(const std::string& key, float def) const;
  std::string attr_string(const std::string& key, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& key, const std::vector<int64_t>& def = {}) const;
  std::vector<float> attr_floats(const std::string& key, const std::vector<float>& def = {}) const;
  /// Throws InputError naming the node when absent.
  at::Tensor attr_tensor(const std::string& key) const;
  /// True when input `i` is present (within range and not "").
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  /// "Conv 'conv1'" for messages.
  std::string describe() const;
};

/// The ONNX-shaped model graph.
class Graph {
 public:
  std::string name = "pare";
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<Node> nodes;
  std::map<std::string, at::Tensor> initializers;
  std::vector<ValueInfo> value_info;          ///< known shapes of intermediate values
  int64_t opset = 17;                          ///< default-domain opset version
  std::map<std::string, std::string> metadata;  ///< model metadata_props
  std::string doc;

  /// Appends a node; when `name` is empty a unique one ("Gemm_3") is made. Returns it.
  Node& add_node(const std::string& op_type, std::vector<std::string> inputs,
                 std::vector<std::string> outputs, std::map<std::string, AttrValue> attrs = {},
                 std::string name = "");

  /// Orders nodes so each comes after the producers of its inputs (stable for already sorted
  /// graphs). Throws InputError naming a node on a cycle.
  void topo_sort();

  /// Checks the graph is well formed: every value defined once, every node input defined before
  /// use, every op known to the registry with its arity and attribute kinds, every output
  /// produced. Throws InputError naming the first offending node or value.
  void verify() const;

  /// Index of the node that produces `value`, or -1 (graph input, initializer or unknown).
  int producer(const std::string& value) const;
  /// Indices of the nodes that read `value`.
  std::vector<int> consumers(const std::string& value) const;
  bool is_initializer(const std::string& value) const { return initializers.count(value) != 0; }
  const ValueInfo* find_input(const std::string& name) const;

  /// A value name not yet used in the graph, starting from `base`.
  std::string unique_name(const std::string& base) const;

  /// Number of elements across all floating-point initializers / their bytes (all initializers),
  /// each storage counted once (a tied initializer is not counted again).
  int64_t parameter_count() const;
  int64_t initializer_bytes() const;

  /// Initializers that are views of another's storage, as a language model's tied head: its
  /// "embed.weight.T" is the transpose of "embed.weight". Maps each such view to the initializer
  /// it reads: the one of its storage that is contiguous and covers the whole storage (with none,
  /// the group is not tied). Module trains the two as one parameter.
  std::map<std::string, std::string> tied_initializers() const;
};

/// True when `v` is one of the graph's outputs.
bool is_graph_output(const Graph& g, const std::string& v);

/// Exporters write tied weights as Identity(initializer) (torch.onnx does for the cloned layers of
/// an nn.TransformerEncoder): rewires the Identity's readers to the initializer itself, so the
/// weight is a constant that passes can see, and drops the Identity. Returns how many.
int bypass_constant_identities(Graph& g);

/// Removes initializers that no node reads and that are not graph outputs. Returns how many.
int remove_unused_initializers(Graph& g);

/// Shapes of every value when the graph runs on inputs of the given concrete shapes, found by
/// running each op's forward on placeholder values (zeros, or the initializers): the same code
/// that runs the model decides its shapes, including the shape-computation subgraphs exporters
/// write for a dynamic batch. Symbolic input dims are bound to `probe_dim`.
/// Returns value name -> concrete sizes, for every value including initializers.
std::map<std::string, std::vector<int64_t>> probe_shapes(const Graph& g, int64_t probe_dim = 1);

/// probe_shapes with each value's element type too.
struct ProbedValue {
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
};
std::map<std::string, ProbedValue> probe_values(const Graph& g, int64_t probe_dim = 1);

/// Fills g.value_info and the graph outputs' shapes: dims that change between two probes with
/// different batch sizes are marked with the batch symbol of the first input ("N" by default).
void infer_shapes(Graph& g);

}  // namespace pare::core
