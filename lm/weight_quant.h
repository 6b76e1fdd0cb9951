// Weight-only quantization of a language model's linear layers with calibration text: round to
// nearest (RTN), GPTQ (quantize/gptq.h) or AWQ (quantize/awq.h), int4 or int8, scales per group of
// input columns.
//
//   lm::LmModel m = lm::load_lm("hf:teacher");
//   lm::LmQuantResult r = lm::quantize_weights(m, windows, lm::LmQuantOptions{4, 32, "gptq"});
//   lm::save_gguf(m, "teacher.q4_0.gguf", lm::GgufExportOptions().type(r.type).blocks(r.blocks));
//
// The decoder layers' linear weights (q/k/v, o, gate/up, down; GPT-2's qkv, proj, fc) are
// quantized; the embedding and the head stay as they are (a GGUF export rounds them to its type).
// Weights that read the same input (q, k and v; gate and up) share one Hessian and one GPTQ pass.
// The Hessians come from one pass of the unquantized model over the calibration windows. The grid
// is ggml's Q4_0 (int4) or Q8_0 (int8) taken per group of --group columns, or Q4_K's (q4_k), so at
// group 32 the codes are the format's and `blocks` holds them for save_gguf: llama.cpp gets GPTQ's
// weights as they are.
// AWQ scales a group's input channels and folds the inverse into what makes the input (the norm
// before q/k/v and before the MLP, up before SwiGLU's down, v before o without grouped KV heads):
// the model keeps its function, its norms' weights change, and the scaled weights are rounded,
// clipped per group where that lowers the output error. SmoothQuant folds its scales the same way,
// then quantize_w8a8 makes the weights and the linear layers' inputs int8 (an ONNX QDQ graph).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/gguf.h"
#include "lm/model.h"
#include "quantize/gptq.h"
#include "quantize/ptq.h"

namespace pare::lm {

struct LmQuantOptions {
  int bits = 4;                  ///< 4 or 8
  int64_t group = 32;            ///< input columns per scale
  std::string method = "gptq";   ///< rtn, gptq, awq or awq+gptq (GPTQ rounds AWQ's scaled weights)
  /// Each decoder layer's Hessians from the model whose earlier layers are quantized already (as
  /// GPTQ's paper does; a partial pass of the calibration windows per layer), not all from one pass
  /// of the unquantized model.
  bool sequential = false;
  /// GPTQ: every group's scale fixed from the original weights before GPTQ starts (AutoGPTQ's
  /// static_groups), instead of made from the weights as GPTQ has updated them when it reaches the group.
  bool static_groups = false;
  /// int4 at group 32: ggml's Q4_K grid (6-bit scales and mins per 32 in super-blocks of 256, fixed
  /// from the original weights as ggml's quantizer picks them; asymmetric) for each weight whose
  /// input width is whole super-blocks, Q4_0's for the others; GPTQ's codes are then Q4_K's.
  bool q4_k = false;
  quantize::GptqOptions gptq;
};

/// One quantized weight.
struct LmQuantLayer {
  std::string name;          ///< Hugging Face name
  int64_t rows = 0, cols = 0;
  double weight_error = 0;   ///< ||W - Q||^2 / ||W||^2
  double sqnr_db = 0;        ///< the layer's output SQNR on the calibration inputs
  double awq_alpha = 0;      ///< AWQ: the exponent of its input's scales (0: none, or no fold)
  bool awq_duo = false;      ///< AWQ: the scales divide by the weights' statistic too (duo scaling)
  double seconds = 0;        ///< of its group's rounding (shared by q/k/v, gate/up; AWQ's scale search not included)
};

struct LmQuantResult {
  std::vector<LmQuantLayer> layers;
  int64_t calib_tokens = 0;
  double calib_seconds = 0, quant_seconds = 0;
  LmQuantOptions options;
  /// Group 32: the file's ggml type (Q4_0, Q8_0, Q4_K) and each weight's blocks, rows = output
  /// channels (with q4_k, Q4_0 for the weights whose rows are not whole super-blocks).
  GgmlType type = GgmlType::kF32;
  std::map<std::string, GgmlBlocks> blocks;
};

/// Quantizes `m`'s linear weights in place (the graph then holds the values the codes stand for),
/// calibrated on `windows` (int64 [N, seq] token ids). `progress(done, total, name)` after each
/// group. Throws InputError for bits other than 4 and 8, a method other than rtn and gptq, group 32
/// on a weight whose input width is not a multiple of 32 (naming it), no windows. Other groups may
/// leave a shorter last group (576 columns in groups of 128: 4 and one of 64).
LmQuantResult quantize_weights(LmModel& m, const at::Tensor& windows, const LmQuantOptions& opts,
                               const std::function<void(int, int, const std::string&)>& progress = {});

nlohmann::json to_json(const LmQuantResult& r);
std::string to_text(const LmQuantResult& r);

/// One group of linear weights sharing an input, smoothed.
struct LmSmoothGroup {
  std::vector<std::string> weights;                  ///< Hugging Face names
  double input_max_before = 0, input_max_after = 0;  ///< the largest |x| over the calibration tokens
  double scale_min = 1, scale_max = 1;               ///< of s (1 and 1: no fold, left as it is)
};

struct LmSmoothResult {
  double alpha = 0;
  std::vector<LmSmoothGroup> groups;
  int64_t calib_tokens = 0;
  double seconds = 0;
};

/// SmoothQuant (Xiao et al. 2023): for each group of linear weights sharing an input, per input
/// channel j, s_j = max|x_j|^alpha / max|w_j|^(1 - alpha) (x over the calibration windows, w over
/// the group's rows); the weights' columns are multiplied by s and the inverse folded where AWQ
/// folds (the norm before q/k/v and the MLP, up before SwiGLU's down, v before o without grouped KV
/// heads), so the activations' outliers move into the weights and the model keeps its function.
/// Inputs without a fold (GPT-2's c_proj after GELU, o with grouped KV heads) stay as they are.
/// Throws InputError for alpha outside [0, 1] and no windows.
LmSmoothResult smooth_activations(LmModel& m, const at::Tensor& windows, double alpha);

/// W8A8 static quantization of the decoder layers' linear layers (quantize/ptq.h on m's graph,
/// calibrated on `windows`): int8 weights, each linear's input quantized with a calibrated scale,
/// its output the dequantized product (not requantized); the embedding, the head, the norms and
/// attention stay fp32. The graph carries onnx_metadata(m), so `pare eval` reads the ONNX file
/// back as a language model. Throws InputError for include/exclude/keep options (the layers are
/// chosen here) and what quantize_static throws.
quantize::PtqResult quantize_w8a8(const LmModel& m, const at::Tensor& windows, quantize::PtqOptions opts);

nlohmann::json to_json(const LmSmoothResult& r);
std::string to_text(const LmSmoothResult& r);

}  // namespace pare::lm
