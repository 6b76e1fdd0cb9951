// pare_rt: the edge runtime. Runs the ONNX files pare writes (fp32, QDQ int8 from `pare quantize`,
// dynamic int8, sparse initializers) on oneDNN, without libtorch: an application that embeds a
// compressed model links this library and nothing of the trainer.
//
//   pare::rt::Model m = pare::rt::Model::load("student.int8.onnx");
//   std::vector<float> x(64 * 1 * 28 * 28);
//   auto y = m.run({pare::rt::TensorView::of(x.data(), {64, 1, 28, 28})});   // y[0]: [64, 10] float
//
// Create once, execute many: loading reads and checks the file, refuses nodes it cannot run (naming
// them and why), fuses QuantizeLinear/DequantizeLinear patterns around Conv, Gemm and MatMul into
// int8 oneDNN primitives (per-channel scales, zero points, ReLU/Clip and requantization fused), and
// folds BatchNormalization into Conv. The first run at a given set of input shapes (any batch size)
// builds that shape's primitives and memory plan, reordering each weight once into the layout
// oneDNN picks; every later run at those shapes only executes: no primitive creation, and no
// allocation in pare_rt. Runs of one Model are serialised by a lock: for concurrent inference, load
// a Model per thread (they share nothing).
//
// Errors throw pare::Error (core/error.h): pare::InputError for a bad file or bad inputs, naming the
// file, node or input.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pare::rt {

/// Element types the runtime handles at its inputs and outputs.
enum class DType : int { kFloat32 = 0, kUInt8, kInt8, kInt32, kInt64, kBool };

/// "float32", "uint8", ...
const char* dtype_name(DType t);
/// Bytes per element.
int64_t dtype_size(DType t);

/// A dense, row-major tensor that the caller owns (inputs) or the model owns (outputs).
struct TensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  void* data = nullptr;

  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  static TensorView of(float* p, std::vector<int64_t> dims) { return {DType::kFloat32, std::move(dims), p}; }
  static TensorView of(int64_t* p, std::vector<int64_t> dims) { return {DType::kInt64, std::move(dims), p}; }
};

/// A graph input or output as the file declares it: dims are sizes, or -1 for a symbolic dim
/// (`symbols` names it, "N" for the batch).
struct ValueSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
};

/// Options of Model::load.
struct Options {
  /// Threads per run (0: oneDNN's default, every core OpenMP offers). Model::set_threads changes it.
  Options& threads(int v) { threads_ = v; return *this; }
  /// Lower QDQ patterns to int8 kernels (default). Off: every QuantizeLinear/DequantizeLinear runs as
  /// its own op and compute runs in fp32, the exact simulation (for checking the int8 kernels).
  Options& int8(bool v) { int8_ = v; return *this; }
  /// Intermediate values to return after the graph outputs (for distillation hints, debugging);
  /// they are kept out of fusions.
  Options& extra_outputs(std::vector<std::string> v) { extra_outputs_ = std::move(v); return *this; }
  /// Time every step of every run (Model::profile); costs a synchronisation per step.
  Options& profile(bool v) { profile_ = v; return *this; }

  int threads_ = 0;
  bool int8_ = true, profile_ = false;
  std::vector<std::string> extra_outputs_;
};

/// Where the time of the runs at one input shape went, step by step (Options::profile).
struct StepProfile {
  std::string node;     ///< "Conv 'layer1.0.conv1'", or what a reorder was for
  std::string op;       ///< the op type: Conv, QConv, Reorder, ...
  int64_t calls = 0;
  double ms = 0;        ///< total over the calls
  int64_t macs = 0;     ///< multiply-accumulates per call (Conv, MatMul, Gemm; 0 for the rest)
};

/// How the model was lowered, for `pare run --engine rt --verbose` and tests.
struct LoweringReport {
  int nodes = 0;              ///< in the file
  int int8_ops = 0;           ///< Conv/Gemm/MatMul/Add/pooling run on integers
  int fp32_ops = 0;           ///< compute run in float
  int folded_batch_norms = 0; ///< BatchNormalization folded into a Conv
  int fused_activations = 0;  ///< Relu/Clip/... fused into the op before them
  int constant_nodes = 0;     ///< nodes computed once at load
  std::vector<std::string> notes;  ///< "Conv 'c1': int8 u8 x s8 -> u8, relu fused" and the like
  /// The load-time passes that changed the graph, in the order they ran (rt/passes.cpp has the table).
  std::vector<std::string> passes;
  /// Nodes that did not get their fast form, each with why: a QDQ pattern left in float ("Conv 'c1':
  /// stays float, QDQ simulated: the weight is uint8; ..."), a oneDNN kernel that refused the node
  /// ("Gemm 'fc': reference kernel: ..."). Kernels are chosen per input shape: load plans the
  /// symbolic dims as 1, and a run at new shapes adds what its plan refused.
  std::vector<std::string> fallbacks;

  std::string to_text() const;
};

class Model {
 public:
  /// Loads an ONNX file. Throws InputError naming the file and, for a node pare_rt cannot run, the
  /// node and why.
  static Model load(const std::string& path, const Options& opts = {});
  /// Same from bytes in memory; `origin` names them in messages (and its folder holds external data).
  static Model load_bytes(const std::string& bytes, const std::string& origin, const Options& opts = {});

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::vector<ValueSpec>& inputs() const;
  /// The graph outputs, then Options::extra_outputs.
  const std::vector<ValueSpec>& outputs() const;
  /// The file's metadata_props (pare.normalize, pare.labels, ...).
  const std::vector<std::pair<std::string, std::string>>& metadata() const;
  const LoweringReport& report() const;
  /// True when the graph has a value (input, initializer or node output) of this name.
  bool has_value(const std::string& name) const;

  /// Runs the model on one tensor per input, in inputs() order. Returns one view per output,
  /// pointing into buffers the model owns: valid until the next run. Throws InputError naming the
  /// input when a dtype, rank or dim does not fit the declaration. A run at the shapes of the run
  /// before allocates nothing in pare_rt (oneDNN 2.6's execute() builds its argument map per call).
  const std::vector<TensorView>& run(const std::vector<TensorView>& inputs);

  /// The steps of the plan the last run used, with their times (empty unless Options::profile).
  std::vector<StepProfile> profile() const;

  /// Threads for the next runs (0: the default). Plans are kept per thread count.
  void set_threads(int threads);
  int threads() const;

  /// Bytes held by the planned buffers of every input shape run so far, and by the weights.
  int64_t arena_bytes() const;
  int64_t weight_bytes() const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Op types pare_rt can run (default domain unless "domain:Op"); `why_unsupported` says why another
/// is refused ("" when supported).
std::vector<std::string> supported_ops();
std::string why_unsupported(const std::string& op_type, const std::string& domain = "");

/// The oneDNN version pare_rt runs on ("2.6.3") and the ISA it dispatches to ("avx2", ...).
std::string backend_version();

}  // namespace pare::rt
