// Post-training static quantization: rewrites an fp32 graph into a standard ONNX QDQ graph
// (QuantizeLinear -> DequantizeLinear pairs on activations, int8 weights and int32 biases read
// through DequantizeLinear), the form ONNX Runtime, TensorRT and OpenVINO turn into int8 kernels.
// pare itself runs the result by simulating the quantization exactly as ONNX defines it.
//
//   auto r = quantize_static(load_model("cnn.onnx"), calib_x,
//                            PtqOptions().method(CalibMethod::kEntropy).exclude({"Gemm_2"}));
//   save_onnx(r.graph, "cnn.int8.onnx");
//   std::cout << r.report.to_text();
//
// What gets quantized is decided per op by the "quantize.policy" facet that this module attaches
// to every registered op (see QuantPolicy): Conv/Gemm/MatMul with an initializer weight are
// quantized (weights symmetric int8, per output channel by default; activation inputs with a
// calibrated scale; a following Relu/Clip kept fused, so one scale serves the fused output);
// shape-only ops (MaxPool, Flatten, Reshape, ...) pass their input's scale through; every other op
// runs in fp32 on dequantized values.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"
#include "quantize/observer.h"

namespace pare::quantize {

/// How an op takes part in static quantization: the "quantize.policy" facet of each op.
struct QuantPolicy {
  enum class Kind {
    kNone,         ///< runs in fp32 (its inputs may be dequantized values)
    kCompute,      ///< weight + activation inputs quantized, output requantized (Conv, Gemm, MatMul)
    kFusable,      ///< an activation kept fused with the compute op before it (Relu, Clip)
    kPassthrough,  ///< moves or selects values without changing them: the output keeps the
                   ///< input's scale (MaxPool, Flatten, Reshape, Transpose, ...)
  };
  Kind kind = Kind::kNone;
  std::vector<int> activation_inputs;  ///< kCompute: inputs quantized with a calibrated scale
  int weight_input = -1;               ///< kCompute: the weight (quantized only when an initializer)
  int bias_input = -1;                 ///< kCompute: the bias (int32, scale = s_x * s_w), or -1
  /// kCompute: the output-channel axis of a weight of rank `rank` for per-channel scales
  /// (-1: per tensor only).
  std::function<int64_t(const core::Node&, int64_t rank)> weight_axis;
  std::string why_not;  ///< kNone: why the op is not quantized (for --include errors)
};

/// Facet key of QuantPolicy.
constexpr const char* kPolicyFacet = "quantize.policy";

/// Attaches the QuantPolicy of one op (kNone, with the reason, for the ones not listed).
void attach_quantize_policy(core::OpDef& op);
/// The policy of `op_type` in the global registry, whose facet provider attach_quantize_policy
/// becomes on first use (every op, registered before or after, has a policy).
const QuantPolicy& policy_of(const std::string& op_type);

/// Options of quantize_static.
struct PtqOptions {
  /// How activation ranges are calibrated.
  PtqOptions& method(CalibMethod v) { method_ = v; return *this; }
  /// kPercentile: the percentile of |x| kept (default 99.99).
  PtqOptions& percentile(double v) { percentile_ = v; return *this; }
  /// Weights per output channel (default) or per tensor.
  PtqOptions& per_channel(bool v) { per_channel_ = v; return *this; }
  /// Weight precision, 2..8 bits (default 8): symmetric codes in [-(2^(bits-1) - 1), 2^(bits-1) - 1]
  /// stored in int8 initializers, so a 4-bit model is still a standard QDQ graph.
  PtqOptions& weight_bits(int v) { weight_bits_ = v; return *this; }
  /// Activations asymmetric uint8 (default) or symmetric int8.
  PtqOptions& activations(QScheme v) { activations_ = v; return *this; }
  /// Node names or op types kept in fp32.
  PtqOptions& exclude(std::vector<std::string> v) { exclude_ = std::move(v); return *this; }
  /// When not empty, only nodes with these names or op types are quantized; naming an op that
  /// cannot be quantized, or matching nothing, is an InputError.
  PtqOptions& include(std::vector<std::string> v) { include_ = std::move(v); return *this; }
  /// Keep the first / last quantizable node (in topological order) in fp32.
  PtqOptions& keep_first(bool v) { keep_first_ = v; return *this; }
  PtqOptions& keep_last(bool v) { keep_last_ = v; return *this; }
  /// Requantize each compute op's output (default), or leave it as the dequantized product of its
  /// int8 inputs (SmoothQuant's W8A8 and ONNX Runtime's MatMulIntegerToFloat: only the inputs are int8).
  PtqOptions& requantize_outputs(bool v) { requantize_outputs_ = v; return *this; }
  /// Fold BatchNorm into the preceding Conv/Gemm first (default on).
  PtqOptions& fold_bn(bool v) { fold_bn_ = v; return *this; }
  /// Samples per calibration forward.
  PtqOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  /// Names the calibration data in messages ("--calib fashion-mnist").
  PtqOptions& calib_name(std::string v) { calib_name_ = std::move(v); return *this; }
  /// Progress lines (calibration passes, rewrite, report).
  PtqOptions& progress(std::function<void(const std::string&)> v) { progress_ = std::move(v); return *this; }

  CalibMethod method_ = CalibMethod::kMinMax;
  double percentile_ = 99.99;
  bool per_channel_ = true;
  int weight_bits_ = 8;
  QScheme activations_ = QScheme::kAsymmetricUInt8;
  std::vector<std::string> exclude_, include_;
  bool keep_first_ = false, keep_last_ = false, fold_bn_ = true, requantize_outputs_ = true;
  int64_t batch_size_ = 256;
  std::string calib_name_ = "calibration data";
  std::function<void(const std::string&)> progress_;
};

/// One quantized node in the report.
struct LayerReport {
  std::string node, op;
  std::string weight;                   ///< weight initializer name in the fp32 graph
  bool per_channel = false;
  double weight_scale_min = 0, weight_scale_max = 0;
  double weight_sqnr_db = 0;            ///< fp32 weight vs its int8 reading
  std::string output;                   ///< the requantized output value ("" when kept fp32)
  std::string fused;                    ///< the fused activation's op type, or ""
  double output_scale = 0;
  int64_t output_zero_point = 0;
  double output_sqnr_db = 0;            ///< fp32 model's value vs the quantized model's, on the
                                        ///< calibration data (all errors upstream included)
};

/// One activation quantized by a QDQ pair.
struct ActivationReport {
  std::string value;
  double min = 0, max = 0;              ///< observed fp32 range
  double lo = 0, hi = 0;                ///< calibrated range
  double scale = 0;
  int64_t zero_point = 0;
  std::string alias_of;                 ///< passthrough: the value whose scale it shares
};

/// What quantize_static did, with SQNR against fp32.
struct QuantReport {
  std::string method, weights, activations;
  int64_t calib_samples = 0;
  int folded_batch_norms = 0;
  std::vector<LayerReport> layers;
  std::vector<ActivationReport> activations_quantized;
  std::vector<std::string> skipped;     ///< "Gemm 'fc2': excluded" and the like
  double output_sqnr_db = 0;            ///< graph output 0, fp32 vs quantized, calibration data
  double argmax_agreement = 0;          ///< share of argmaxes along class_axis() that agree
  int64_t argmax_rows = 0;              ///< how many were compared (0: output of rank < 2)
  int64_t fp32_bytes = 0, quantized_bytes = 0;  ///< initializer bytes

  /// The report as JSON text, pretty-printed with `indent` spaces (-1: one line).
  std::string to_json(int indent = 2) const;
  /// A table for the terminal.
  std::string to_text() const;
};

struct PtqResult {
  core::Graph graph;
  QuantReport report;
};

/// The axis of a model output of rank `rank` (>= 2) that holds the classes, along which the
/// report compares argmaxes: the last one for [N, C] logits and [N, S, V] token logits, axis 1
/// for channels-first maps of rank 4 and more ([N, C, H, W] segmentation).
inline int64_t class_axis(int64_t rank) { return rank <= 3 ? rank - 1 : 1; }

/// True when `n`'s name or op type is an entry of `list` (the form of the options' include and
/// exclude lists).
bool matches(const core::Node& n, const std::vector<std::string>& list);
/// Throws InputError about option `option` ("exclude") when an entry of `list` names no node and
/// no op type of `g`.
void check_names(const core::Graph& g, const std::vector<std::string>& list, const std::string& option);

/// Throws InputError naming `origin` when `g` already holds QuantizeLinear/DequantizeLinear
/// nodes or int8/uint8 initializers.
void check_not_quantized(const core::Graph& g, const std::string& origin);

/// Throws InputError naming the model input and opts.calib_name_ when `x` [N, ...] does not fit
/// the model's single input (rank, fixed dims, float vs integer).
void check_calibration_data(const core::Graph& g, const at::Tensor& x, const std::string& calib_name);

/// Throws InputError naming the option when a PtqOptions value is out of range.
void check_options(const PtqOptions& opts);
/// What quantize_static and prepare_qat require of their input: check_not_quantized, opset >= 13,
/// check_calibration_data and check_options. Throws InputError.
void check_static_inputs(const core::Graph& fp32, const at::Tensor& calib_x, const PtqOptions& opts);

/// Where quantization goes in a prepared graph, decided once from the ops' policies and the
/// options. Static PTQ rewrites it into QDQ pairs; QAT (quantize/qat.h) into FakeQuantize nodes
/// that it later converts to the very same QDQ graph.
struct QuantPlan {
  /// One quantized compute node.
  struct Layer {
    size_t node = 0;          ///< index in the prepared graph
    std::string weight;       ///< its weight initializer
    int64_t axis = -1;        ///< the weight's per-channel axis, -1 per tensor
    std::string bias;         ///< bias initializer stored as int32 (scale s_x * s_w), or ""
    std::string input_root;   ///< the activation whose scale the bias uses
    std::string output;       ///< the requantized output value, "" when it stays fp32
    std::string fused;        ///< the fused activation's op type, or ""
  };
  std::vector<Layer> layers;
  /// Values that get a QuantizeLinear/DequantizeLinear pair, in insertion order.
  std::vector<std::string> activations;
  /// value -> the value whose parameters it shares (itself, or a passthrough op's input).
  std::map<std::string, std::string> root;
  std::vector<std::string> skipped;  ///< "Gemm 'fc2': excluded" and the like
  int folded_batch_norms = 0;

  /// The values calibrated: activations that are their own root, in order.
  std::vector<std::string> roots() const;
};

/// Prepares `g` in place (topologically sorted, BatchNorm folded unless opts say not, tied
/// weights made constants) and plans its quantization. Throws InputError for a bad include or
/// exclude entry.
QuantPlan plan_quantization(core::Graph& g, const PtqOptions& opts);

/// Activation ranges and the parameters derived from them, per root value of a plan.
struct Calibration {
  std::map<std::string, Observer> observers;
  std::map<std::string, QuantParams> params;
};
/// Runs `g` (prepared, as planned) over `calib_x` and calibrates every root of `plan`.
Calibration calibrate(const core::Graph& g, const QuantPlan& plan, const at::Tensor& calib_x,
                      const PtqOptions& opts);

/// A weight as quantized: (initializer name, per-channel axis or -1).
using WeightKey = std::pair<std::string, int64_t>;
/// Symmetric weight parameters of every planned layer (a tied weight once), the scale widened
/// where an int32 bias would overflow with it.
std::map<WeightKey, QuantParams> weight_quant_params(const core::Graph& g, const QuantPlan& plan,
                                                     const Calibration& cal, const PtqOptions& opts);

/// Rewrites `g` (prepared, as planned) into the QDQ graph with the given activation and weight
/// parameters (weights are clamped to each parameter's [qmin, qmax]) and reports it, with SQNR
/// against `g` measured on `calib_x`.
PtqResult write_qdq(const core::Graph& g, const QuantPlan& plan, const Calibration& cal,
                    const std::map<WeightKey, QuantParams>& weights, const at::Tensor& calib_x,
                    const PtqOptions& opts);

/// Quantizes `fp32` statically with activation ranges calibrated on `calib_x` (the model's single
/// input, [N, ...]): plan_quantization, calibrate, weight_quant_params, write_qdq. Throws
/// InputError for an already quantized model, calibration data that does not fit, an opset below
/// 13 (per-axis QuantizeLinear), or a bad include/exclude entry.
PtqResult quantize_static(const core::Graph& fp32, const at::Tensor& calib_x, const PtqOptions& opts);

}  // namespace pare::quantize
