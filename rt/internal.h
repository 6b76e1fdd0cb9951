// pare_rt's insides: its small graph, the op table, and the plan that runs a graph at one set of
// input shapes. Not installed.
//
// Load:   reader::Model -> Graph (graph.cpp) -> passes: QDQ patterns to int8 nodes, BatchNorm into
//         Conv, activations into the op before them, constants folded, dead nodes dropped.
// Plan:   per input shapes and thread count (plan.cpp): every node's output shape and dtype (values
//         known from shapes alone, as exporters' shape subgraphs compute them, are folded), then each
//         node builds its steps (a oneDNN primitive, or a reference kernel on plain tensors), then
//         one arena is laid out so values whose lives do not overlap share bytes.
// Run:    bind the inputs, execute the steps.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/onnx_reader.h"
#include "rt/rt.h"

namespace pare::rt {

// ---------------------------------------------------------------------------------------------
// Tensors

/// A host tensor that owns its bytes (constants, values folded at plan time), row-major.
struct HTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::shared_ptr<void> storage;
  void* data = nullptr;

  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  template <class T> T* ptr() const { return static_cast<T*>(data); }
  /// A new zero-filled tensor.
  static HTensor zeros(DType t, std::vector<int64_t> dims);
  /// Element i as double / int64 (any dtype).
  double f(int64_t i) const;
  int64_t i(int64_t i) const;
};

/// A tensor as a kernel sees it: plain row-major bytes.
struct View {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  void* data = nullptr;
  int64_t numel() const;
  template <class T> T* ptr() const { return static_cast<T*>(data); }
};

int64_t numel_of(const std::vector<int64_t>& dims);
/// The DType of an ONNX data type number pare_rt computes in, or nullopt.
std::optional<DType> dtype_from_onnx(int64_t onnx_type);
std::string dims_str(const std::vector<int64_t>& dims);
/// dnnl data type of a DType (f32, u8, s8, s32; others have none and throw InternalError).
dnnl::memory::data_type dnnl_type(DType t);
bool has_dnnl_type(DType t);
/// Row-major strides of dims.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);
/// A plain (row-major) memory desc; a 0-d tensor is described as [1].
dnnl::memory::desc plain_md(DType t, const std::vector<int64_t>& dims);
/// True when `md` lays its elements out row-major with no padding (dims of size 1 ignored).
bool is_plain(const dnnl::memory::desc& md);

// ---------------------------------------------------------------------------------------------
// Graph

/// A node's attributes, as read from the file, with typed getters that throw InputError naming the
/// node when an attribute has another kind.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::vector<std::pair<std::string, reader::AttrValue>> list, std::string node)
      : list_(std::move(list)), node_(std::move(node)) {}
  bool has(const std::string& k) const { return find(k) != nullptr; }
  int64_t i(const std::string& k, int64_t def) const;
  float f(const std::string& k, float def) const;
  std::string s(const std::string& k, const std::string& def) const;
  std::vector<int64_t> ints(const std::string& k, const std::vector<int64_t>& def = {}) const;
  std::vector<float> floats(const std::string& k, const std::vector<float>& def = {}) const;
  const reader::Tensor* tensor(const std::string& k) const;
  std::vector<std::string> names() const;
  void set_int(const std::string& k, int64_t v);

 private:
  const reader::AttrValue* find(const std::string& k) const;
  std::vector<std::pair<std::string, reader::AttrValue>> list_;
  std::string node_;
};

/// An elementwise op fused after a compute op (a oneDNN eltwise post-op).
struct PostOp {
  dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
  float alpha = 0, beta = 0;
  std::string from;  ///< the fused node, for the report
};

/// Parameters of an int8 node made from a QDQ pattern.
struct QuantInfo {
  float x_scale = 1;        ///< activation input (input 0)
  int32_t x_zero = 0;
  float b_scale = 1;        ///< QAdd: input 1
  int32_t b_zero = 0;
  std::vector<float> w_scale;  ///< per output channel (or one)
  bool requantize = false;  ///< output is u8/s8 with y_scale / y_zero; else float32
  float y_scale = 1;
  int32_t y_zero = 0;
  DType y_type = DType::kFloat32;
  /// Bias in the accumulator domain (b / (x_scale * w_scale[c])): int32 when exact, else float.
  std::optional<HTensor> bias;
  /// QConv with a residual Add fused (input 2): the conv's own output is still rounded to its grid
  /// (mid_*: the QuantizeLinear the add dequantized it from), then the residual's real value
  /// sum_scale * (q - sum_zero) is added before the add's post-ops and requantization; `inplace`
  /// when the conv may write over the residual (no later reader).
  bool sum = false;
  float sum_scale = 1;
  int32_t sum_zero = 0;
  float mid_scale = 1;
  int32_t mid_zero = 0;
  DType mid_type = DType::kUInt8;
  bool inplace = false;
};

struct Node {
  std::string op, domain, name;
  int index = 0;                ///< position in the file
  std::vector<int> in, out;     ///< value ids; -1 for an omitted optional input or output
  Attrs attrs;
  std::vector<PostOp> post;     ///< fused elementwise ops, applied in order
  QuantInfo q;                  ///< the int8 nodes' parameters
  bool dead = false;

  std::string label() const;    ///< "Conv 'conv1'"
  bool has_in(size_t i) const { return i < in.size() && in[i] >= 0; }
};

struct Value {
  std::string name;
  std::optional<HTensor> constant;  ///< an initializer or a value computed at load
  int producer = -1;
  bool exposed = false;  ///< a graph output or an extra output: kept as its own value
};

struct Graph {
  std::string origin;
  int64_t opset = 0;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs, outputs;  ///< value ids (outputs: graph outputs then extra ones)
  std::vector<ValueSpec> input_specs, output_specs;
  std::unordered_map<std::string, int> by_name;

  int value(const std::string& name);  ///< id of `name`, created when new
  const HTensor* constant(int v) const { return v >= 0 && values[v].constant ? &*values[v].constant : nullptr; }
  std::vector<int> consumers(int v) const;  ///< live nodes reading v
  Node* producer(int v);                    ///< the live node producing v, or nullptr
};

/// Builds the graph of a model (constants read, Constant nodes folded, nodes checked against the
/// op table) and applies the load-time passes (passes.h). Throws InputError naming the file and node.
Graph build_graph(const reader::Model& m, const Options& opts, LoweringReport& report);

// ---------------------------------------------------------------------------------------------
// Ops

/// What a node's output is at plan time: dtype and dims, and its value when it is known without
/// running the model (constants, shapes).
struct VInfo {
  bool present = false;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  const HTensor* known = nullptr;
};

/// Shape inference of one node at plan time.
struct InferCtx {
  const Node& node;
  std::vector<VInfo> in;
  std::vector<VInfo> out;
  /// Set by infer when an output's value follows from shapes alone (Shape, Size): it is folded.
  std::vector<std::optional<HTensor>> computed;

  const Attrs& attrs() const { return node.attrs; }
  /// InputError "Conv 'c1': <message>".
  template <class... A> [[noreturn]] void fail(const A&... a) const {
    throw InputError(node.label() + ": " + detail::concat(a...));
  }
  template <class... A> void check(bool cond, const A&... a) const {
    if (!cond) fail(a...);
  }
  const HTensor& known(size_t i) const;  ///< input i's value; fails when not known at plan time
};

/// A reference kernel: plain row-major inputs and outputs (outputs sized by infer).
struct RefCtx {
  const Node& node;
  std::vector<View> in, out;
  const Attrs& attrs() const { return node.attrs; }
};

struct BuildCtx;

/// One op pare_rt runs. `check` runs at load (static attributes); `infer` at plan time; `ref` runs
/// on plain tensors (and folds constants); `build`, when set, lowers to oneDNN, or refuses the node
/// with `return b.refuse("why")` to fall back to `ref` (the reason reaches LoweringReport::fallbacks).
struct OpImpl {
  std::string op, domain;
  int in_min = 1, in_max = 1, out_min = 1, out_max = 1;
  std::function<std::string(Node&, const Graph&)> check;  ///< may normalise the node's attributes
  std::function<void(InferCtx&)> infer;
  std::function<void(RefCtx&)> ref;
  std::function<bool(BuildCtx&)> build;
};

/// The op table (ops registered once, in ops_*.cpp).
class OpTable {
 public:
  static const OpTable& get();
  const OpImpl* find(const std::string& op, const std::string& domain) const;
  std::vector<std::string> names() const;
  void add(OpImpl impl);

 private:
  std::map<std::pair<std::string, std::string>, OpImpl> ops_;
};

void register_tensor_ops(OpTable& t);   // ops_tensor.cpp: shapes, gather, casts, reductions, ...
void register_math_ops(OpTable& t);     // ops_math.cpp: elementwise, normalisation, softmax
void register_nn_ops(OpTable& t);       // ops_nn.cpp: Conv, Gemm, MatMul, pooling (oneDNN)
void register_quant_ops(OpTable& t);    // ops_quant.cpp: QDQ, the int8 nodes, dynamic quantization

/// Replaces com.microsoft MatMulNBits (constant 4-bit weights) by a float MatMul (+ Add for its
/// bias) with the weights decoded once (ops_quant.cpp); true when it replaced any. A pass of the
/// table in passes.cpp.
bool decode_matmul_nbits(Graph& g);

/// The oneDNN eltwise algorithm of an activation op with its alpha/beta, or nullopt.
std::optional<PostOp> activation_post_op(const Node& n, const Graph& g);

// ---------------------------------------------------------------------------------------------
// Plans

/// A value in a plan: a graph value or a temporary (a reorder's output).
struct PValue {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  dnnl::memory::desc md;
  const HTensor* known = nullptr;  ///< no buffer: constant or folded
  int alias = -1;      ///< shares the bytes of this value (a view: Reshape, Flatten, ...)
  int input = -1;      ///< bound to graph input k at each run
  int64_t offset = -1; ///< in the arena
  bool plain() const;
};

/// Everything one run at one set of input shapes needs. Built once, run many times.
struct Plan {
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, int> args;  ///< oneDNN arg -> plan value
    std::function<void(struct RunCtx&)> fn;
    std::vector<int> uses;              ///< plan values read or written (for buffer lifetimes)
    std::string what;                   ///< the node, for errors and profiles
    std::string op;                     ///< the node's op type
    int64_t macs = 0;                   ///< multiply-accumulates (Conv, MatMul), for profiles
    std::unordered_map<int, dnnl::memory> mems;  ///< made once the arena is laid out
    std::vector<dnnl_exec_arg_t> c_args;          ///< the same, as the C API takes them (no map per run)
    double ms = 0;                      ///< time spent, when profiling
    int64_t calls = 0;
  };
  std::deque<PValue> values;  ///< a deque: references stay valid while steps add temporaries
  std::vector<Step> steps;
  std::vector<int> outputs;            ///< plan values holding the outputs (plain)
  std::vector<std::shared_ptr<HTensor>> owned;  ///< values folded at plan time, reordered weights
  std::vector<std::pair<int, int>> reorders;  ///< (value, its reordered copy) made so far
  std::shared_ptr<void> arena;
  int64_t arena_bytes = 0;
  std::vector<void*> ptrs;   ///< per value: its bytes (nullptr for those bound to an input)
  std::vector<void*> run_ptrs;  ///< ptrs with the inputs' bytes of the current run
  int threads = 0;                               ///< the OpenMP thread count it was built for
  std::vector<std::vector<int64_t>> input_dims;  ///< the input shapes it runs
  std::vector<TensorView> out_views;             ///< what Model::run returns
  std::vector<int> root_input;  ///< per value: the graph input whose bytes it is, or -1
  std::vector<std::pair<int, dnnl::memory*>> external_mems;  ///< memories over graph inputs
  std::vector<std::string> fallbacks;  ///< "Gemm 'fc': reference kernel: why" per refused node
};

/// What a step sees while running.
struct RunCtx {
  const std::vector<void*>& ptr;  ///< per plan value
  View view(const Plan& p, int v) const;
};

/// Weights reordered into the layouts primitives asked for, shared by every plan of a model.
class WeightCache {
 public:
  /// `t`, its bytes read as `src`, in layout `md` (a reorder run once and kept).
  const HTensor& get(const HTensor& t, const dnnl::memory::desc& src, const dnnl::memory::desc& md,
                     const dnnl::engine& eng, dnnl::stream& s);
  int64_t bytes() const { return bytes_; }

 private:
  std::map<std::pair<const void*, std::string>, std::shared_ptr<HTensor>> cache_;
  int64_t bytes_ = 0;
};

/// Builds a node's steps.
struct BuildCtx {
  const Graph& graph;
  const Node& node;
  Plan& plan;
  const dnnl::engine& eng;
  dnnl::stream& stream;
  WeightCache& weights;
  std::vector<int> in;   ///< plan values of the inputs (-1 omitted)
  std::vector<int> out;  ///< plan values of the outputs, dtype and dims set; md to be set

  const PValue& v(int id) const { return plan.values[static_cast<size_t>(id)]; }
  PValue& v(int id) { return plan.values[static_cast<size_t>(id)]; }
  /// Input i in layout `md`: the value itself when it already is, else a reordered temporary.
  int as(int id, const dnnl::memory::desc& md);
  /// Input value id in plain layout.
  int plain(int id) { return as(id, plain_md(v(id).dtype, v(id).dims)); }
  /// A constant in layout `md`, its bytes read as `src` describes them (default: row-major with
  /// md's dims); reordered once and cached across plans.
  int weight(const HTensor& t, const dnnl::memory::desc& md);
  int weight(const HTensor& t, const dnnl::memory::desc& src, const dnnl::memory::desc& md);
  /// A new temporary value.
  int temp(DType t, std::vector<int64_t> dims, const dnnl::memory::desc& md);
  /// A plan-owned constant value.
  int constant(HTensor t);
  /// A oneDNN primitive step; `macs` its multiply-accumulates (for profiles).
  void prim(dnnl::primitive p, std::unordered_map<int, int> args, std::string what, int64_t macs = 0);
  /// A step of our own that reads and writes the plan values in `uses`.
  void fn(std::function<void(RunCtx&)> f, std::vector<int> uses);
  /// True when graph value `v` is the activation input of an int8 convolution (which reads NHWC).
  bool feeds_int8_conv(int v) const {
    for (int k : graph.consumers(v))
      if (graph.nodes[static_cast<size_t>(k)].op == "QConv" && graph.nodes[static_cast<size_t>(k)].in[0] == v) return true;
    return false;
  }
  /// The value whose bytes `id` uses (itself unless it is a view).
  int root(int id) const {
    while (v(id).alias >= 0) id = v(id).alias;
    return id;
  }
  /// Output i as a view of input value `src` (same bytes, new dims): plain layouts only.
  void alias(size_t i, int src);
  template <class... A> [[noreturn]] void fail(const A&... a) const {
    throw InputError(node.label() + ": " + detail::concat(a...));
  }
  /// Declines the node, saying why (the attribute, dtype or shape the kernel does not take): the
  /// reference kernel runs it instead. Returns false, for `return b.refuse(...)` in a builder.
  template <class... A> bool refuse(const A&... a) {
    refusal = detail::concat(a...);
    return false;
  }
  std::string refusal;  ///< set by refuse()
};

/// Runs a node's reference kernel on known inputs (constant folding).
std::vector<HTensor> eval_node(const OpImpl& impl, const Node& n, const std::vector<const HTensor*>& in);

/// Throws InputError naming `what` when a tensor of these dims needs more bytes than the machine has
/// (or the count overflows).
void check_size(DType t, const std::vector<int64_t>& dims, const std::string& what);

/// Builds the plan of `g` for the given input dims (under the calling thread's OpenMP thread count,
/// which oneDNN's kernels are tuned for).
std::unique_ptr<Plan> build_plan(const Graph& g, const std::vector<std::vector<int64_t>>& input_dims,
                                 const dnnl::engine& eng, dnnl::stream& s, WeightCache& weights);

/// Runs a plan on the inputs; with `profile`, times every step (Plan::Step::ms, calls).
void run_plan(Plan& p, const std::vector<TensorView>& inputs, dnnl::stream& s, bool profile = false);

/// One global CPU engine.
const dnnl::engine& cpu_engine();
/// Opens oneDNN (dnnl_loader.cpp says how and why) on the first call; every path into oneDNN starts
/// here or at cpu_engine(). Throws Error naming the library when it cannot be loaded.
void load_dnnl();

}  // namespace pare::rt
