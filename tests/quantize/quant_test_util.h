// Helpers shared by the quantize test suites.
#pragma once

#include <ATen/ATen.h>

#include "core/graph.h"
#include "core/module.h"

namespace pare::quantize::testing {

/// Output 0 of `g` on `x`, in eval mode without autograd.
inline at::Tensor run_eval(const core::Graph& g, const at::Tensor& x) {
  core::Module m(g);
  m.eval();
  at::NoGradGuard no_grad;
  return m.forward({x}).at(0);
}

}  // namespace pare::quantize::testing
