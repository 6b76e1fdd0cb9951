// What one core of this CPU can do: its int8 and fp32 multiply-accumulate rates, measured with the
// instructions pare_rt's and ONNX Runtime's kernels are made of (independent accumulators, no memory
// traffic). `pare bench --peak` prints it; BENCHMARKS.md compares measured kernels against it.
#pragma once

#include <string>
#include <vector>

namespace pare::core {

struct CpuPeak {
  std::string int8_instructions, fp32_instructions;  ///< what was measured ("avx512_vnni vpdpbusd", ...)
  struct Rate {
    int threads = 1;
    double int8_gmacs = 0, fp32_gflops = 0;  ///< summed over the threads
  };
  std::vector<Rate> rates;  ///< one per requested thread count
};

/// Measures the peak on each thread count of `threads` (a second or so each). Throws Error when the
/// CPU has neither AVX2 with FMA nor AVX-512 VNNI.
CpuPeak measure_cpu_peak(const std::vector<int>& threads);

}  // namespace pare::core
