#include "lm/gguf.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::lm {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// The fewest bytes a key/value (empty key, u8 value) and a tensor info (empty name, no dims) take:
// counts beyond what the rest of the file could hold are refused before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

// ---------------------------------------------------------------------------------------------
// Dequantization, one function per ggml type: `n` blocks from `src` to `dst`, in the order and
// with the float operations of ggml-quants.c's dequantize_row_* (gguf-py's quants.py does the same
// products in fp32), so the results agree bit for bit. lm/CMakeLists.txt turns off FMA contraction.

using Dequant = void (*)(const uint8_t* src, float* dst, int64_t n);

// IEEE half to float, as NumPy converts it (a NaN keeps its payload).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = h & 0x7c00u;
  uint32_t man = h & 0x03ffu, bits;
  if (exp == 0x7c00u) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | (((exp >> 10) + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    uint32_t e = 0;
    while (!(man & 0x400u)) {
      man <<= 1;
      ++e;
    }
    bits = sign | ((113 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_at(src + 2 * i);
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void dequant_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 18, dst += 32) {
    const float d = half_at(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 20, dst += 32) {
    const float d = half_at(src), m = half_at(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 and Q5_1: the fifth bit of element j is bit j of the 32-bit qh.
template <bool kWithMin>
void dequant_q5(const uint8_t* src, float* dst, int64_t n) {
  constexpr int kBytes = kWithMin ? 24 : 22;
  for (int64_t b = 0; b < n; ++b, src += kBytes, dst += 32) {
    const float d = half_at(src), m = kWithMin ? half_at(src + 2) : 0.0f;
    const uint8_t* p = src + (kWithMin ? 4 : 2);
    uint32_t qh;
    std::memcpy(&qh, p, 4);
    const uint8_t* qs = p + 4;
    for (int j = 0; j < 16; ++j) {
      const int x0 = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
      const int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
      if (kWithMin) {
        dst[j] = static_cast<float>(x0) * d + m;
        dst[j + 16] = static_cast<float>(x1) * d + m;
      } else {
        dst[j] = static_cast<float>(x0 - 16) * d;
        dst[j + 16] = static_cast<float>(x1 - 16) * d;
      }
    }
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 34, dst += 32) {
    const float d = half_at(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// block_q2_K: scales[16] (4-bit scale, 4-bit min), qs[64] (2 bits each), d, dmin.
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 84) {
    const float d = half_at(src + 80), dmin = half_at(src + 82);
    const uint8_t* scales = src;
    const uint8_t* q = src + 16;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// block_q4_K: d, dmin, scales[12], qs[128]; block_q5_K adds qh[32] before qs.
template <bool kFifthBit>
void dequant_q45_k(const uint8_t* src, float* dst, int64_t n) {
  constexpr int kBytes = kFifthBit ? 176 : 144;
  for (int64_t b = 0; b < n; ++b, src += kBytes) {
    const float d = half_at(src), dmin = half_at(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + (kFifthBit ? 48 : 16);
    for (int is = 0; is < 8; is += 2, ql += 32) {
      int sc, m;
      scale_min_k4(is, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int high = kFifthBit && (qh[l] >> is) & 1 ? 16 : 0;
        *dst++ = d1 * static_cast<float>((ql[l] & 0x0F) + high) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int high = kFifthBit && (qh[l] >> (is + 1)) & 1 ? 16 : 0;
        *dst++ = d2 * static_cast<float>((ql[l] >> 4) + high) - m2;
      }
    }
  }
}

// block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d.
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 210) {
    const float d = half_at(src + 208);
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    for (int half = 0; half < 2; ++half, dst += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// block_q8_K: d (fp32), qs[256] (int8), bsums[16] (int16, sums for dot products: unused here).
void dequant_q8_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 292, dst += 256) {
    float d;
    std::memcpy(&d, src, 4);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int j = 0; j < 256; ++j) dst[j] = d * static_cast<float>(qs[j]);
  }
}

void dequant_f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

// ---------------------------------------------------------------------------------------------
// Quantization, the other way: `n` blocks of fp32 from `src` to ggml blocks at `dst`, as
// ggml-quants.c's quantize_row_*_ref does it (gguf-py's quants.py agrees bit for bit for the types it
// quantizes: F16 BF16 Q8_0 Q5_0 Q4_0). Scales are rounded to fp16 as ggml does (nearest even).

using Quant = void (*)(const float* src, uint8_t* dst, int64_t n);

inline void put_half(uint8_t* p, float f) {
  const uint16_t h = c10::Half(f).x;
  std::memcpy(p, &h, 2);
}

void quant_f32(const float* src, uint8_t* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void quant_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) put_half(dst + 2 * i, src[i]);
}

// ggml_compute_fp32_to_bf16: a NaN made quiet (its sign and top payload kept), else nearest even.
void quant_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    const uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 64)
                                                        : static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void quant_q8_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 32, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(dst, d);
    for (int j = 0; j < 32; ++j) dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(src[j] * id)));
  }
}

// The element of a block of 32 with the largest magnitude (the first of equals), with its sign.
float signed_max(const float* src) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(src[j])) {
      amax = std::fabs(src[j]);
      max = src[j];
    }
  return max;
}

// The element of largest magnitude sets the scale: it becomes -8.
void quant_q4_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 32, dst += 18) {
    const float d = signed_max(src) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(dst, d);
    for (int j = 0; j < 16; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<int8_t>(src[j] * id + 8.5f)));
      const int x1 = std::min(15, static_cast<int>(static_cast<int8_t>(src[j + 16] * id + 8.5f)));
      dst[2 + j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

// Q5_0: as Q4_0 with 16 levels either side (the largest magnitude becomes -16); the fifth bit of
// element j is bit j of qh.
void quant_q5_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 32, dst += 22) {
    const float d = signed_max(src) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(dst, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int x0 = std::min(31, static_cast<int>(static_cast<int8_t>(src[j] * id + 16.5f)));
      const int x1 = std::min(31, static_cast<int>(static_cast<int8_t>(src[j + 16] * id + 16.5f)));
      dst[6 + j] = static_cast<uint8_t>((x0 & 0x0F) | ((x1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((x0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((x1 & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(dst + 2, &qh, 4);
  }
}

// ggml's nearest_int: round to nearest even through the float's mantissa (|x| < 2^22).
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// make_qkx2_quants for 32 values and 4 bits: a scale and a min (returned negated in `the_min`)
// searched over 21 candidate ranges for the least weighted squared error; levels in `L`.
float make_qkx2_quants_4bit(const float* x, const float* w, uint8_t* L, float* the_min) {
  constexpr int n = 32, nmax = 15, nstep = 20;
  constexpr float rmin = -1.f, rdelta = 0.1f;
  uint8_t Laux[n];
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, n);
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
    const float diff = scale * L[i] + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * Laux[i] + this_min - x[i];
      cur_error += w[i] * (diff * diff);
    }
    if (cur_error < best_error) {
      std::memcpy(L, Laux, n);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// block_q4_K: d, dmin (fp16), scales[12] (eight 6-bit scales and mins), qs[128]; quantize_row_q4_K_ref.
void quant_q4_k(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n; ++b, src += 256, dst += 144) {
    uint8_t L[256], sc[12] = {};
    float mins[8], scales[8], weights[32], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += src[32 * j + l] * src[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(src[32 * j + l]);
      scales[j] = make_qkx2_quants_4bit(src + 32 * j, weights, L + 32 * j, &mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
      const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        sc[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    put_half(dst, max_scale / 63.f);
    put_half(dst + 2, max_min / 63.f);
    std::memcpy(dst + 4, sc, 12);
    const float d_all = half_at(dst), dmin_all = half_at(dst + 2);
    for (int j = 0; j < 8; ++j) {
      int s, m;
      scale_min_k4(j, sc, &s, &m);
      const float d = d_all * s;
      if (d == 0.0f) continue;
      const float dm = dmin_all * m;
      for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(15, nearest_int((src[32 * j + i] + dm) / d))));
    }
    uint8_t* q = dst + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// ggml's types (ggml.h, gguf-py's GGML_QUANT_SIZES): elements per block, bytes per block, the
// dequantizer and the quantizer where pare has them.
struct TypeTraits {
  uint32_t id;
  const char* name;
  int64_t block;
  int64_t bytes;
  Dequant dequant;
  Quant quant = nullptr;
};

constexpr TypeTraits kTypes[] = {
    {0, "F32", 1, 4, dequant_f32, quant_f32}, {1, "F16", 1, 2, dequant_f16, quant_f16},
    {2, "Q4_0", 32, 18, dequant_q4_0, quant_q4_0},       {3, "Q4_1", 32, 20, dequant_q4_1},
    {6, "Q5_0", 32, 22, dequant_q5<false>, quant_q5_0},  {7, "Q5_1", 32, 24, dequant_q5<true>},
    {8, "Q8_0", 32, 34, dequant_q8_0, quant_q8_0},       {9, "Q8_1", 32, 40, nullptr},
    {10, "Q2_K", 256, 84, dequant_q2_k},     {11, "Q3_K", 256, 110, nullptr},
    {12, "Q4_K", 256, 144, dequant_q45_k<false>, quant_q4_k}, {13, "Q5_K", 256, 176, dequant_q45_k<true>},
    {14, "Q6_K", 256, 210, dequant_q6_k},    {15, "Q8_K", 256, 292, dequant_q8_k},
    {16, "IQ2_XXS", 256, 66, nullptr},       {17, "IQ2_XS", 256, 74, nullptr},
    {18, "IQ3_XXS", 256, 98, nullptr},       {19, "IQ1_S", 256, 50, nullptr},
    {20, "IQ4_NL", 32, 18, nullptr},         {21, "IQ3_S", 256, 110, nullptr},
    {22, "IQ2_S", 256, 82, nullptr},         {23, "IQ4_XS", 256, 136, nullptr},
    {24, "I8", 1, 1, nullptr},               {25, "I16", 1, 2, nullptr},
    {26, "I32", 1, 4, nullptr},              {27, "I64", 1, 8, nullptr},
    {28, "F64", 1, 8, nullptr},              {29, "IQ1_M", 256, 56, nullptr},
    {30, "BF16", 1, 2, dequant_bf16, quant_bf16},        {34, "TQ1_0", 256, 54, nullptr},
    {35, "TQ2_0", 256, 66, nullptr},         {39, "MXFP4", 32, 17, nullptr},
    {40, "NVFP4", 64, 36, nullptr},          {41, "Q1_0", 128, 18, nullptr},
};

const TypeTraits* find_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string supported_types() {
  std::string out;
  for (const auto& t : kTypes)
    if (t.dequant) out += std::string(out.empty() ? "" : " ") + t.name;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reading the header: a cursor that checks every read against the end of the file.

// Bytes per scalar value type; 0 for string and array.
uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

class Cursor {
 public:
  Cursor(const char* data, uint64_t size, const std::string& path) : data_(data), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  // Throws naming `what` unless `n` more bytes are there.
  const char* take(uint64_t n, const std::string& what) {
    PARE_CHECK(n <= left(), "GGUF file '", path_, "' is truncated: ", what, " needs ", n, " bytes at offset ", pos_,
               " but the file has ", left(), " left");
    const char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read(const std::string& what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + "'s length");
    PARE_CHECK(n <= left(), "GGUF file '", path_, "': ", what, " claims ", n, " bytes but only ", left(),
               " are left in the file");
    return std::string(take(n, what), n);
  }

 private:
  const char* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

GgufValueType read_value_type(Cursor& c, const std::string& path, const std::string& what) {
  const uint32_t t = c.read<uint32_t>(what);
  PARE_CHECK(t <= static_cast<uint32_t>(GgufValueType::kF64), "GGUF file '", path, "': ", what, " is ", t,
             ", which is not a GGUF value type (0-12)");
  return static_cast<GgufValueType>(t);
}

GgufValue read_value(Cursor& c, const std::string& path, const std::string& key) {
  const std::string what = "key '" + key + "'";
  GgufValue v;
  v.type = read_value_type(c, path, what + "'s type");
  if (v.type == GgufValueType::kString) {
    v.strings.push_back(c.read_string(what + "'s value"));
    return v;
  }
  if (v.type != GgufValueType::kArray) {
    v.bytes.assign(c.take(scalar_bytes(v.type), what + "'s value"), scalar_bytes(v.type));
    return v;
  }
  v.elem_type = read_value_type(c, path, what + "'s element type");
  PARE_CHECK(v.elem_type != GgufValueType::kArray, "GGUF file '", path, "': ", what,
             " is an array of arrays, which pare does not read (nor does llama.cpp)");
  v.count = c.read<uint64_t>(what + "'s array length");
  const uint64_t elem = v.elem_type == GgufValueType::kString ? 8 : scalar_bytes(v.elem_type);
  PARE_CHECK(v.count <= c.left() / elem, "GGUF file '", path, "': ", what, " claims an array of ", v.count, " ",
             gguf_value_type_name(v.elem_type), " values, more than the ", c.left(), " bytes left in the file hold");
  if (v.elem_type != GgufValueType::kString) {
    v.bytes.assign(c.take(v.count * elem, what + "'s values"), v.count * elem);
    return v;
  }
  v.strings.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.read_string(what + "[" + std::to_string(i) + "]"));
  return v;
}

// One tensor info; checks what needs no other tensor: dims, type, block multiple, byte size.
GgufTensorInfo read_tensor_info(Cursor& c, const std::string& path, uint64_t index) {
  GgufTensorInfo info;
  info.name = c.read_string("the name of tensor " + std::to_string(index));
  const std::string what = "tensor '" + info.name + "'";
  const uint32_t n_dims = c.read<uint32_t>(what + "'s number of dimensions");
  PARE_CHECK(n_dims <= kGgmlMaxDims, "GGUF file '", path, "': ", what, " has ", n_dims,
             " dimensions; ggml allows at most ", kGgmlMaxDims);
  // The product counts a zero dimension as 1: a tensor's strides (the product of the dimensions
  // after each) must fit int64 even when another dimension is 0.
  std::vector<uint64_t> ne(n_dims);
  uint64_t numel = 1, span = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    ne[i] = c.read<uint64_t>(what + "'s dimension " + std::to_string(i));
    PARE_CHECK(!__builtin_mul_overflow(span, std::max<uint64_t>(ne[i], 1), &span) &&
                   span <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "GGUF file '", path, "': ", what, " has dimensions whose product overflows 64 bits");
    numel *= ne[i];
  }
  info.type = c.read<uint32_t>(what + "'s type");
  const TypeTraits* type = find_type(info.type);
  PARE_CHECK(type, "GGUF file '", path, "': ", what, " has ggml type ", info.type,
             ", which ggml does not define (pare reads ", supported_types(), ")");
  PARE_CHECK(n_dims == 0 || ne[0] % static_cast<uint64_t>(type->block) == 0, "GGUF file '", path, "': ", what,
             " has ", ne[0], " elements per row, not a multiple of ", type->name, "'s block of ", type->block);
  info.offset = c.read<uint64_t>(what + "'s offset");
  info.nbytes = numel / static_cast<uint64_t>(type->block) * static_cast<uint64_t>(type->bytes);
  PARE_CHECK(info.nbytes / static_cast<uint64_t>(type->bytes) == numel / static_cast<uint64_t>(type->block),
             "GGUF file '", path, "': ", what, "'s size in bytes overflows 64 bits");
  for (uint32_t i = n_dims; i-- > 0;) info.shape.push_back(static_cast<int64_t>(ne[i]));
  return info;
}

bool is_integer(GgufValueType t) {
  return t != GgufValueType::kF32 && t != GgufValueType::kF64 && t != GgufValueType::kBool &&
         t != GgufValueType::kString && t != GgufValueType::kArray;
}
bool is_float(GgufValueType t) { return t == GgufValueType::kF32 || t == GgufValueType::kF64; }

template <class T>
T load(const std::string& bytes, uint64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

// Element i of an integer value (type `t`); false when a uint64 exceeds int64's range.
bool integer_at(const std::string& bytes, GgufValueType t, uint64_t i, int64_t* out) {
  switch (t) {
    case GgufValueType::kU8: *out = load<uint8_t>(bytes, i); return true;
    case GgufValueType::kI8: *out = load<int8_t>(bytes, i); return true;
    case GgufValueType::kU16: *out = load<uint16_t>(bytes, i); return true;
    case GgufValueType::kI16: *out = load<int16_t>(bytes, i); return true;
    case GgufValueType::kU32: *out = load<uint32_t>(bytes, i); return true;
    case GgufValueType::kI32: *out = load<int32_t>(bytes, i); return true;
    case GgufValueType::kI64: *out = load<int64_t>(bytes, i); return true;
    case GgufValueType::kU64: {
      const uint64_t u = load<uint64_t>(bytes, i);
      *out = static_cast<int64_t>(u);
      return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    }
    default: return false;
  }
}

double float_at(const std::string& bytes, GgufValueType t, uint64_t i) {
  return t == GgufValueType::kF32 ? static_cast<double>(load<float>(bytes, i)) : load<double>(bytes, i);
}

// "a uint32", "an array of string"
std::string describe(const GgufValue& v) {
  if (v.is_array()) return std::string("an array of ") + gguf_value_type_name(v.elem_type);
  const char* name = gguf_value_type_name(v.type);
  return std::string(name[0] == 'i' ? "an " : "a ") + name;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                       "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

std::string ggml_type_name(uint32_t type) {
  const TypeTraits* t = find_type(type);
  return t ? t->name : "type " + std::to_string(type);
}

bool ggml_type_dequantizable(uint32_t type) {
  const TypeTraits* t = find_type(type);
  return t && t->dequant;
}

std::string ggml_pack(const at::Tensor& codes_in, const at::Tensor& scales_in, uint32_t type) {
  const bool q4 = type == static_cast<uint32_t>(GgmlType::kQ4_0);
  PARE_CHECK(q4 || type == static_cast<uint32_t>(GgmlType::kQ8_0), "ggml_pack writes Q4_0 and Q8_0, not ",
             ggml_type_name(type));
  const at::Tensor codes = codes_in.to(at::kInt).contiguous(), scales = scales_in.to(at::kFloat).contiguous();
  const int64_t rows = codes.size(0), cols = codes.size(1), blocks = rows * cols / 32;
  PARE_CHECK(cols % 32 == 0 && scales.numel() == blocks, "ggml_pack: codes ", c10::str(codes.sizes()),
             " and scales ", c10::str(scales.sizes()), " do not make blocks of 32");
  const int64_t bytes = q4 ? 18 : 34;
  std::string out(static_cast<size_t>(blocks * bytes), '\0');
  const int32_t* c = codes.data_ptr<int32_t>();
  const float* d = scales.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b, c += 32) {
    auto* dst = reinterpret_cast<uint8_t*>(out.data()) + b * bytes;
    PARE_CHECK(static_cast<float>(c10::Half(d[b])) == d[b], "ggml_pack: scale ", d[b], " is not exact in fp16");
    put_half(dst, d[b]);
    for (int j = 0; j < (q4 ? 16 : 32); ++j) {
      PARE_CHECK(q4 ? c[j] >= 0 && c[j] <= 15 && c[j + 16] >= 0 && c[j + 16] <= 15 : c[j] >= -127 && c[j] <= 127,
                 "ggml_pack: a code out of ", ggml_type_name(type), "'s range");
      dst[2 + j] = q4 ? static_cast<uint8_t>(c[j] | (c[j + 16] << 4)) : static_cast<uint8_t>(static_cast<int8_t>(c[j]));
    }
  }
  return out;
}

quantize::Grid q4_k_grid(const std::string& blocks, int64_t rows, int64_t cols) {
  PARE_CHECK(rows >= 0 && cols % 256 == 0 && static_cast<int64_t>(blocks.size()) == rows * cols / 256 * 144,
             "Q4_K's grid: ", blocks.size(), " bytes are not [", rows, ", ", cols, "] in super-blocks of 256");
  quantize::Grid g;
  g.group = 32, g.qmin = 0, g.qmax = 15;
  g.scale = at::empty({rows, cols / 32}, at::kFloat);
  g.offset = at::empty_like(g.scale);
  g.zero = at::zeros_like(g.scale);
  float *scale = g.scale.data_ptr<float>(), *offset = g.offset.data_ptr<float>();
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    const auto* src = reinterpret_cast<const uint8_t*>(blocks.data()) + b * 144;
    const float d = half_at(src), dmin = half_at(src + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min_k4(j, src + 4, &sc, &m);
      scale[b * 8 + j] = d * static_cast<float>(sc);
      offset[b * 8 + j] = -(dmin * static_cast<float>(m));
    }
  }
  return g;
}

std::string ggml_pack_q4_k(const at::Tensor& codes_in, std::string blocks) {
  const at::Tensor codes = codes_in.to(at::kInt).contiguous();
  PARE_CHECK(codes.dim() == 2 && codes.size(1) % 256 == 0 &&
                 static_cast<int64_t>(blocks.size()) == codes.numel() / 256 * 144,
             "ggml_pack_q4_k: codes ", c10::str(codes.sizes()), " for ", blocks.size(), " bytes of Q4_K");
  const int32_t* c = codes.data_ptr<int32_t>();
  for (int64_t b = 0; b < codes.numel() / 256; ++b, c += 256) {
    uint8_t* q = reinterpret_cast<uint8_t*>(blocks.data()) + b * 144 + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) {
        PARE_CHECK(c[j + l] >= 0 && c[j + l] <= 15 && c[j + l + 32] >= 0 && c[j + l + 32] <= 15,
                   "ggml_pack_q4_k: a code out of Q4_K's range");
        q[l] = static_cast<uint8_t>(c[j + l] | (c[j + l + 32] << 4));
      }
  }
  return blocks;
}

at::Tensor ggml_dequantize(const std::string& bytes, uint32_t type, const std::vector<int64_t>& shape) {
  const TypeTraits* t = find_type(type);
  PARE_CHECK(t && t->dequant, "pare does not dequantize ggml type ", ggml_type_name(type));
  at::Tensor out = at::empty(shape, at::kFloat);
  PARE_CHECK(out.numel() % t->block == 0 &&
                 static_cast<int64_t>(bytes.size()) == out.numel() / t->block * t->bytes,
             bytes.size(), " bytes are not ", c10::str(out.sizes()), " in ", t->name);
  t->dequant(reinterpret_cast<const uint8_t*>(bytes.data()), out.data_ptr<float>(), out.numel() / t->block);
  return out;
}

bool ggml_type_quantizable(uint32_t type) {
  const TypeTraits* t = find_type(type);
  return t && t->quant;
}

int64_t ggml_block_size(uint32_t type) {
  const TypeTraits* t = find_type(type);
  return t ? t->block : 0;
}

int64_t ggml_block_bytes(uint32_t type) {
  const TypeTraits* t = find_type(type);
  return t ? t->bytes : 0;
}

std::string ggml_quantize(const at::Tensor& values, uint32_t type, const std::string& what) {
  const TypeTraits* t = find_type(type);
  PARE_CHECK(t && t->quant, what, ": pare does not write ggml type ", ggml_type_name(type), " (it writes F32 F16 BF16 "
             "Q8_0 Q4_0 Q4_K)");
  const at::Tensor x = values.to(at::kFloat).contiguous();
  const int64_t row = x.dim() == 0 ? 1 : x.size(-1);
  PARE_CHECK(row % t->block == 0, what, ": rows of ", row, " values are not a multiple of ", t->name, "'s block of ",
             t->block);
  const int64_t blocks = x.numel() / t->block;
  std::string out(static_cast<size_t>(blocks * t->bytes), '\0');
  const float* src = x.data_ptr<float>();
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  at::parallel_for(0, blocks, std::max<int64_t>(1, 16384 / t->block), [&](int64_t b0, int64_t b1) {
    t->quant(src + b0 * t->block, dst + b0 * t->bytes, b1 - b0);
  });
  return out;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) {
  path_ = path;
  std::shared_ptr<MappedFile> map = MappedFile::open(path);  // copy on write: tensors may change in place
  size_ = static_cast<uint64_t>(map->size());
  PARE_CHECK(size_ >= kHeaderBytes, "GGUF file '", path, "' is truncated: ", size_,
             " bytes, shorter than a GGUF header (", kHeaderBytes, ")");
  data_ = reinterpret_cast<const char*>(map->data());
  storage_ = std::move(map);
  parse();
}

GgufFile GgufFile::from_bytes(std::string bytes, const std::string& what) {
  GgufFile f;
  f.path_ = what;
  auto owned = std::make_shared<std::string>(std::move(bytes));
  f.data_ = owned->data();
  f.size_ = owned->size();
  f.storage_ = std::move(owned);
  f.parse();
  return f;
}

void GgufFile::parse() {
  Cursor c(data_, size_, path_);
  const uint32_t magic = c.read<uint32_t>("the magic");
  PARE_CHECK(magic == kMagic, "GGUF file '", path_, "' does not start with the magic \"GGUF\"");
  version_ = c.read<uint32_t>("the version");
  PARE_CHECK(version_ != 0x03000000u && version_ != 0x02000000u, "GGUF file '", path_,
             "' is big-endian, which pare does not read");
  PARE_CHECK(version_ == 2 || version_ == 3, "GGUF file '", path_, "' has version ", version_,
             "; pare reads versions 2 and 3");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the key/value count");
  PARE_CHECK(n_kv <= c.left() / kMinKvBytes, "GGUF file '", path_, "' claims ", n_kv,
             " key/values, more than its ", c.left(), " bytes can hold");
  PARE_CHECK(n_tensors <= c.left() / kMinTensorInfoBytes, "GGUF file '", path_, "' claims ", n_tensors,
             " tensors, more than its ", c.left(), " bytes can hold");

  keys_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("key " + std::to_string(i));
    GgufValue v = read_value(c, path_, key);
    PARE_CHECK(values_.emplace(key, std::move(v)).second, "GGUF file '", path_, "' has key '", key, "' twice");
    keys_.push_back(std::move(key));
  }
  if (has("general.alignment")) {
    const GgufValue& a = value("general.alignment");
    PARE_CHECK(a.type == GgufValueType::kU32, "GGUF file '", path_, "': key 'general.alignment' must be a uint32, not ",
               gguf_value_type_name(a.type));
    alignment_ = get_u32("general.alignment");
    PARE_CHECK(alignment_ != 0 && (alignment_ & (alignment_ - 1)) == 0, "GGUF file '", path_,
               "': key 'general.alignment' must be a power of two, not ", alignment_);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info = read_tensor_info(c, path_, i);
    PARE_CHECK(tensor_index_.emplace(info.name, tensors_.size()).second, "GGUF file '", path_, "' has tensor '",
               info.name, "' twice");
    tensors_.push_back(std::move(info));
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_offset_ < size_ ? size_ - data_offset_ : 0;
  for (const auto& t : tensors_) {
    PARE_CHECK(t.offset % alignment_ == 0, "GGUF file '", path_, "': tensor '", t.name, "' has offset ", t.offset,
               ", not a multiple of the alignment ", alignment_);
    PARE_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, "GGUF file '", path_, "': tensor '", t.name,
               "' (", t.nbytes, " bytes at data offset ", t.offset,
               ") ends past the end of the file (the data section holds ", data_size, " bytes)");
  }
}

const GgufValue& GgufFile::value(const std::string& key) const {
  auto it = values_.find(key);
  PARE_CHECK(it != values_.end(), "GGUF file '", path_, "' has no key '", key, "'");
  return it->second;
}

namespace {

// The value of `key` if it has a type `accept` admits; else an InputError naming `expected`.
template <class Accept>
const GgufValue& typed(const GgufFile& f, const std::string& key, bool array, Accept accept, const char* expected) {
  const GgufValue& v = f.value(key);
  const bool ok = v.is_array() == array && accept(array ? v.elem_type : v.type);
  PARE_CHECK(ok, "GGUF file '", f.path(), "': key '", key, "' is ", describe(v), ", not ", expected);
  return v;
}

int64_t checked_integer(const GgufFile& f, const std::string& key, const GgufValue& v, uint64_t i) {
  int64_t out;
  PARE_CHECK(integer_at(v.bytes, v.is_array() ? v.elem_type : v.type, i, &out), "GGUF file '", f.path(), "': key '",
             key, "' holds ", load<uint64_t>(v.bytes, i), ", more than pare's 64-bit signed integers hold");
  return out;
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  return typed(*this, key, false, [](GgufValueType t) { return t == GgufValueType::kString; }, "a string").strings[0];
}

int64_t GgufFile::get_int(const std::string& key) const {
  return checked_integer(*this, key, typed(*this, key, false, is_integer, "an integer"), 0);
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }

uint32_t GgufFile::get_u32(const std::string& key) const {
  const int64_t v = get_int(key);
  PARE_CHECK(v >= 0 && v <= std::numeric_limits<uint32_t>::max(), "GGUF file '", path_, "': key '", key, "' holds ",
             v, ", outside the range of a uint32");
  return static_cast<uint32_t>(v);
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = typed(*this, key, false, is_float, "a float32 or float64");
  return float_at(v.bytes, v.type, 0);
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(const std::string& key) const {
  return typed(*this, key, false, [](GgufValueType t) { return t == GgufValueType::kBool; }, "a bool").bytes[0] != 0;
}

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  return typed(*this, key, true, [](GgufValueType t) { return t == GgufValueType::kString; }, "an array of string")
      .strings;
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v = typed(*this, key, true, is_integer, "an array of integers");
  std::vector<int64_t> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = checked_integer(*this, key, v, i);
  return out;
}

std::vector<double> GgufFile::get_floats(const std::string& key) const {
  const GgufValue& v = typed(*this, key, true, is_float, "an array of float32 or float64");
  std::vector<double> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = float_at(v.bytes, v.elem_type, i);
  return out;
}

std::vector<bool> GgufFile::get_bools(const std::string& key) const {
  const GgufValue& v = typed(*this, key, true, [](GgufValueType t) { return t == GgufValueType::kBool; },
                             "an array of bool");
  std::vector<bool> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = v.bytes[i] != 0;
  return out;
}

const GgufTensorInfo& GgufFile::tensor_info(const std::string& name) const {
  auto it = tensor_index_.find(name);
  PARE_CHECK(it != tensor_index_.end(), "GGUF file '", path_, "' has no tensor '", name, "'");
  return tensors_[it->second];
}

at::Tensor GgufFile::view_bytes(const GgufTensorInfo& info) const {
  void* p = const_cast<char*>(data_ + data_offset_ + info.offset);
  std::shared_ptr<const void> keep = storage_;
  return at::from_blob(p, {static_cast<int64_t>(info.nbytes)}, [keep](void*) {}, at::TensorOptions(at::kByte));
}

at::Tensor GgufFile::raw(const std::string& name) const { return view_bytes(tensor_info(name)); }

at::Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo& info = tensor_info(name);
  const TypeTraits* type = find_type(info.type);
  PARE_ASSERT(type);
  PARE_CHECK(type->dequant, "GGUF file '", path_, "': tensor '", name, "' has type ", type->name,
             ", which pare does not dequantize (it reads ", supported_types(), ")");
  const uint8_t* src = reinterpret_cast<const uint8_t*>(data_ + data_offset_ + info.offset);
  if (info.type == static_cast<uint32_t>(GgmlType::kF32) && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0)
    return view_bytes(info).view(at::kFloat).view(info.shape);
  at::Tensor out = at::empty(info.shape, at::kFloat);
  float* dst = out.data_ptr<float>();
  const int64_t blocks = info.numel() / type->block;
  // Each thread takes whole blocks; about 64 KiB of output per task.
  at::parallel_for(0, blocks, std::max<int64_t>(1, 16384 / type->block), [&](int64_t b0, int64_t b1) {
    type->dequant(src + b0 * type->bytes, dst + b0 * type->block, b1 - b0);
  });
  return out;
}

}  // namespace pare::lm
