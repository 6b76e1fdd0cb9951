// Helpers shared by pare_rt's op files: axes, broadcasting, type dispatch, parallel loops.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "rt/internal.h"

namespace pare::rt::ops {

/// An ONNX axis in [-rank, rank-1] as [0, rank-1]; fails naming the node otherwise.
inline int64_t axis(const InferCtx& c, int64_t a, int64_t rank, const char* what = "axis") {
  c.check(a >= -rank && a <= rank - 1, what, " must be in [", -rank, ", ", rank - 1, "], got ", a);
  return a < 0 ? a + rank : a;
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
    for (size_t k = rank > 0 ? rank - 1 : 0; k-- > 0;) {  // rank 0: one element, no index
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

/// Calls f(begin, end) on consecutive ranges of [0, n), one per OpenMP thread when n exceeds
/// `threshold` (else once). Put the loop itself in f with its parameters in locals and __restrict
/// pointers: loops whose scale or bounds are read through a captured reference do not vectorize
/// (a byte store may alias them).
template <class F>
void parallel_ranges(int64_t n, int64_t threshold, F f) {
  if (n <= threshold) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt, begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) f(begin, end);
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

/// An op table entry: `in_min`..`in_max` inputs (-1: any number), up to `out_max` outputs.
inline OpImpl make_op(std::string op, int in_min, int in_max, std::function<void(InferCtx&)> infer,
                      std::function<void(RefCtx&)> ref, std::function<bool(BuildCtx&)> build = nullptr,
                      int out_max = 1, std::string domain = "") {
  OpImpl o;
  o.op = std::move(op);
  o.domain = std::move(domain);
  o.in_min = in_min;
  o.in_max = in_max;
  o.out_max = out_max;
  o.infer = std::move(infer);
  o.ref = std::move(ref);
  o.build = std::move(build);
  return o;
}

/// The shape-only ops' infer: output 0 takes input 0's dtype with `dims`.
inline void set_out(InferCtx& c, size_t k, DType t, std::vector<int64_t> dims) {
  c.out[k].present = true;
  c.out[k].dtype = t;
  c.out[k].dims = std::move(dims);
}

}  // namespace pare::rt::ops
