// Between libtorch and pare_rt: tensors in and out without copies, and a runtime model from any
// model spec pare takes (an ONNX file is read by pare_rt itself; a zoo spec is built in core and
// handed over as ONNX bytes).
//
//   rt::Model m = load_rt_model("student.int8.onnx");
//   at::Tensor y = from_rt(m.run({rt_view(x)}).at(0));   // a copy: rt's buffers are reused
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "rt/rt.h"

namespace pare::exporter {

/// A view of a contiguous CPU tensor (no copy). Throws InputError for dtypes pare_rt lacks.
rt::TensorView rt_view(const at::Tensor& t);
/// An owning copy of a runtime output.
at::Tensor from_rt(const rt::TensorView& v);
/// at::ScalarType of a runtime dtype.
at::ScalarType torch_dtype(rt::DType t);

/// The runtime model of an ONNX file or a zoo spec (weights seeded with `seed`). Throws InputError
/// naming the file or spec.
rt::Model load_rt_model(const std::string& path_or_spec, const rt::Options& opts = {}, uint64_t seed = 0);

}  // namespace pare::exporter
