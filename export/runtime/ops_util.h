// Helpers shared by pare_rt's op files: axes, broadcasting, type dispatch, parallel loops.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "export/runtime/internal.h"

namespace pare::rt::ops {

/// An ONNX axis in [-rank, rank-1] (or [-rank-1, rank] when `inclusive`) as [0, rank-1].
inline int64_t axis(const InferCtx& c, int64_t a, int64_t rank, const char* what = "axis", bool inclusive = false) {
  const int64_t hi = inclusive ? rank : rank - 1;
  c.check(a >= -rank - (inclusive ? 1 : 0) && a <= hi, what, " must be in [", -rank - (inclusive ? 1 : 0), ", ", hi,
          "], got ", a);
  return a < 0 ? a + rank + (inclusive ? 1 : 0) : a;
}

/// A known 1-D (or 0-D) integer tensor as a vector.
inline std::vector<int64_t> ints_of(const HTensor& t) {
  std::vector<int64_t> r(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) r[static_cast<size_t>(k)] = t.i(k);
  return r;
}

/// Numpy broadcasting of shapes; fails naming the node when they do not broadcast.
inline std::vector<int64_t> broadcast_dims(const InferCtx& c, const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      const int64_t d = s[k];
      if (o == 1) o = d;
      else c.check(d == 1 || d == o, "inputs of shapes ", dims_str(shapes[0]), " and ",
                   dims_str(shapes.size() > 1 ? shapes[1] : shapes[0]), " do not broadcast");
    }
  return out;
}

/// Strides of a tensor of `dims` read at every position of `out` (0 along broadcast dims).
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out) {
  std::vector<int64_t> st(out.size(), 0);
  const auto own = row_major_strides(dims);
  const size_t off = out.size() - dims.size();
  for (size_t k = 0; k < dims.size(); ++k) st[off + k] = dims[k] == 1 ? 0 : own[k];
  return st;
}

/// Calls f(out_index, offsets) for every element of `out`, where offsets[i] is input i's element
/// read there (broadcast strides); parallel over the outer positions.
template <size_t N, class F>
void broadcast_loop(const std::vector<int64_t>& out, const std::vector<int64_t> (&strides)[N], F f) {
  const int64_t total = numel_of(out);
  if (total == 0) return;
  const size_t rank = out.size();
  const int64_t inner = rank ? out[rank - 1] : 1;
  const int64_t outer = total / inner;
  int64_t inner_st[N];
  for (size_t i = 0; i < N; ++i) inner_st[i] = rank ? strides[i][rank - 1] : 0;
#pragma omp parallel for if (total > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base[N] = {};
    int64_t rem = o;
    for (size_t k = rank - 1; k-- > 0;) {
      const int64_t idx = rem % out[k];
      rem /= out[k];
      for (size_t i = 0; i < N; ++i) base[i] += idx * strides[i][k];
    }
    int64_t off[N];
    for (int64_t j = 0; j < inner; ++j) {
      for (size_t i = 0; i < N; ++i) off[i] = base[i] + j * inner_st[i];
      f(o * inner + j, off);
    }
  }
}

/// Calls f(T{}) with T the C++ type of `t` (float, int64_t, int32_t, uint8_t, int8_t; bool as
/// uint8_t).
template <class F>
void dispatch(DType t, F f) {
  switch (t) {
    case DType::kFloat32: f(float{}); break;
    case DType::kInt64: f(int64_t{}); break;
    case DType::kInt32: f(int32_t{}); break;
    case DType::kUInt8: case DType::kBool: f(uint8_t{}); break;
    case DType::kInt8: f(int8_t{}); break;
  }
}

/// Copies `n` elements, parallel for big copies.
inline void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

/// The shape-only ops' infer: output 0 takes input 0's dtype with `dims`.
inline void set_out(InferCtx& c, size_t k, DType t, std::vector<int64_t> dims) {
  c.out[k].present = true;
  c.out[k].dtype = t;
  c.out[k].dims = std::move(dims);
}

}  // namespace pare::rt::ops
