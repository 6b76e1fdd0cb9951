// The CPU's peak int8 and fp32 rates (core/cpu_peak.h).
#include "core/cpu_peak.h"

#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "core/error.h"

namespace pare::core {

namespace {

// What one core of this CPU can do, measured with the instructions int8 and float kernels
// are made of (independent accumulators, no memory traffic).

// The AVX2 int8 step of oneDNN's and ONNX Runtime's kernels (vpmaddubsw u8 x s8 pairs to s16,
// vpmaddwd pairs to s32, vpaddd into the accumulator), 8 independent accumulators, registers only.
// Written in assembly: compiled from intrinsics the same loop measured 60-79 GMAC/s here depending
// on register allocation, below what oneDNN's convolutions reach; this measures 86 GMAC/s on one
// core of the Zen 3 dev machines (about 30 multiply-accumulates per cycle).
double int8_avx2_gmacs(int64_t iters) {
#if defined(__x86_64__)
  const int64_t n = iters;
  const auto t0 = std::chrono::steady_clock::now();
  asm volatile(
      "vpcmpeqw %%ymm13, %%ymm13, %%ymm13\n\t"
      "vpsrlw $15, %%ymm13, %%ymm13\n\t"  // int16 ones
      "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvpxor %%ymm1, %%ymm1, %%ymm1\n\tvpxor %%ymm2, %%ymm2, %%ymm2\n\t"
      "vpxor %%ymm3, %%ymm3, %%ymm3\n\tvpxor %%ymm4, %%ymm4, %%ymm4\n\tvpxor %%ymm5, %%ymm5, %%ymm5\n\t"
      "vpxor %%ymm6, %%ymm6, %%ymm6\n\tvpxor %%ymm7, %%ymm7, %%ymm7\n\t"
      "vpabsb %%ymm13, %%ymm8\n\tvpabsb %%ymm13, %%ymm9\n\tvpabsb %%ymm13, %%ymm10\n\t"
      "vpabsb %%ymm13, %%ymm11\n\tvpabsb %%ymm13, %%ymm12\n\t"
      "1:\n\t"
      "vpmaddubsw %%ymm8, %%ymm12, %%ymm14\n\tvpmaddwd %%ymm13, %%ymm14, %%ymm14\n\tvpaddd %%ymm14, %%ymm0, %%ymm0\n\t"
      "vpmaddubsw %%ymm9, %%ymm12, %%ymm15\n\tvpmaddwd %%ymm13, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %%ymm1, %%ymm1\n\t"
      "vpmaddubsw %%ymm10, %%ymm12, %%ymm14\n\tvpmaddwd %%ymm13, %%ymm14, %%ymm14\n\tvpaddd %%ymm14, %%ymm2, %%ymm2\n\t"
      "vpmaddubsw %%ymm11, %%ymm12, %%ymm15\n\tvpmaddwd %%ymm13, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %%ymm3, %%ymm3\n\t"
      "vpmaddubsw %%ymm8, %%ymm13, %%ymm14\n\tvpmaddwd %%ymm13, %%ymm14, %%ymm14\n\tvpaddd %%ymm14, %%ymm4, %%ymm4\n\t"
      "vpmaddubsw %%ymm9, %%ymm13, %%ymm15\n\tvpmaddwd %%ymm13, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %%ymm5, %%ymm5\n\t"
      "vpmaddubsw %%ymm10, %%ymm13, %%ymm14\n\tvpmaddwd %%ymm13, %%ymm14, %%ymm14\n\tvpaddd %%ymm14, %%ymm6, %%ymm6\n\t"
      "vpmaddubsw %%ymm11, %%ymm13, %%ymm15\n\tvpmaddwd %%ymm13, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %%ymm7, %%ymm7\n\t"
      "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "cc");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) * 8 * 32 / s / 1e9;
#else
  (void)iters;
  return 0;
#endif
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double int8_vnni_gmacs(int64_t iters) {
  __m512i a = _mm512_set1_epi8(3), step = _mm512_set1_epi8(1);
  __m512i acc[8], w[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm512_setzero_si512();
    w[i] = _mm512_set1_epi8(static_cast<char>(i));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, w[i]);  // 64 u8 x s8 into s32
    a = _mm512_add_epi8(a, step);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512i t = acc[0];
  for (int i = 1; i < 8; ++i) t = _mm512_add_epi32(t, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(t);
  (void)sink;
  return static_cast<double>(iters) * 8 * 64 / s / 1e9;
}

__attribute__((target("avx2,fma"))) double fp32_avx2_gflops(int64_t iters) {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 10
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m256 t = acc[0];
  for (int i = 1; i < 10; ++i) t = _mm256_add_ps(t, acc[i]);
  volatile float sink = _mm256_cvtss_f32(t);
  (void)sink;
  return static_cast<double>(iters) * 10 * 16 / s / 1e9;
}

// Runs `f` on `threads` threads at once and adds their rates.
double on_threads(int threads, const std::function<double()>& f) {
  std::vector<double> rates(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { rates[static_cast<size_t>(t)] = f(); });
  for (auto& th : pool) th.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

}  // namespace

CpuPeak measure_cpu_peak(const std::vector<int>& threads) {
  const bool vnni = __builtin_cpu_supports("avx512vnni");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  PARE_CHECK(avx2, "pare bench --peak measures AVX2 or AVX-512 VNNI kernels; this CPU has neither");
  CpuPeak p;
  p.int8_instructions = vnni ? "avx512_vnni vpdpbusd" : "avx2 vpmaddubsw+vpmaddwd";
  p.fp32_instructions = "avx2 vfmadd (8 floats)";
  const int64_t iters = 20'000'000;
  for (int t : threads) {
    const double i8 = on_threads(t, [&] { return vnni ? int8_vnni_gmacs(iters / 2) : int8_avx2_gmacs(iters); });
    const double f32 = on_threads(t, [&] { return fp32_avx2_gflops(iters); });
    p.rates.push_back({t, i8, f32});
  }
  return p;
}

}  // namespace pare::core
