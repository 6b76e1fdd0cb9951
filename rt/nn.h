// Geometry shared by pare_rt's float and int8 compute ops: Conv/pooling windows (auto_pad,
// ceil_mode resolved into explicit pads) and MatMul's broadcast shapes.
#pragma once

#include <cstdint>
#include <vector>

#include "rt/internal.h"

namespace pare::rt {

/// A Conv or pooling window with auto_pad and ceil_mode resolved: pads_end gives exactly `out`.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads_begin, pads_end, out;
};

/// The window of node `c.node` on input dims `x` ([N, C, spatial...]). Fails naming the node.
Window window_of(const InferCtx& c, const std::vector<int64_t>& x, const std::vector<int64_t>& kernel, bool pool);
/// Same at build time (the node was inferred on these dims already).
Window window_at(const Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& kernel, bool pool);
/// Conv output dims for input `x` and weight `w` ([M, C/group, k...]); fills `win` when given.
std::vector<int64_t> conv_out_dims(const InferCtx& c, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                   Window* win);
/// Conv weights as oneDNN sees them ([G, M/G, C/G, k...] when grouped), `any` or row-major.
dnnl::memory::desc conv_weights_md(const std::vector<int64_t>& w, int64_t group, dnnl::memory::data_type dt, bool any);

/// Multiply-accumulates of a convolution with weight dims `w` ([M, C/group, k...]) producing `y`.
inline int64_t conv_macs(const std::vector<int64_t>& w, const std::vector<int64_t>& y) {
  int64_t per = 1;
  for (size_t k = 1; k < w.size(); ++k) per *= w[k];
  return numel_of(y) * per;
}

/// MatMul operands promoted to one rank >= 2 (1-D A gains a leading 1, 1-D B a trailing 1, batch
/// dims padded with 1s) and the output of that rank.
struct MatmulDims {
  std::vector<int64_t> a, b, y;
};
MatmulDims matmul_dims(std::vector<int64_t> a, std::vector<int64_t> b);
/// ONNX MatMul output dims; fails naming the node when A and B do not multiply.
std::vector<int64_t> matmul_out_dims(const InferCtx& c, const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace pare::rt
