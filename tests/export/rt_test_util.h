// Helpers shared by the pare_rt suites: graphs built as core::Graph, inputs drawn at random, and a
// runner that serializes a graph, loads it into pare_rt and compares with core::Module (the
// libtorch interpreter) on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "export/rt_bridge.h"
#include "rt/rt.h"

namespace pare::rt_testing {

/// The test graphs' batch dim.
inline const core::Dim N = core::Dim::sym("N");
/// A float scalar.
inline at::Tensor f32s(float v) { return at::scalar_tensor(v, at::kFloat); }

/// Draws a tensor of the given dims (the dtype is the graph input's; see Builder::input).
using Draw = std::function<at::Tensor(const std::vector<int64_t>&)>;

inline Draw normal(double scale = 1) {
  return [scale](const std::vector<int64_t>& d) { return at::randn(d) * scale; };
}
inline Draw uniform(double lo, double hi) {
  return [lo, hi](const std::vector<int64_t>& d) { return at::rand(d) * (hi - lo) + lo; };
}
/// Integers in [lo, hi), as the input's dtype (floats holding integers for comparisons).
inline Draw ints(int64_t lo, int64_t hi) {
  return [lo, hi](const std::vector<int64_t>& d) { return at::randint(lo, hi, d, at::kLong); };
}
inline Draw bools() {
  return [](const std::vector<int64_t>& d) { return at::randint(0, 2, d, at::kLong).ne(0); };
}

/// A graph under construction with a draw per graph input.
class Builder {
 public:
  explicit Builder(int64_t opset = 17) { g.opset = opset; }

  /// Adds graph input `name` (default "x<k>"); with `fold`, an initializer drawn now instead
  /// (symbolic dims 2), so that pare_rt computes the graph at load.
  std::string input(core::Shape shape, Draw draw = normal(), at::ScalarType t = at::kFloat, std::string name = "") {
    if (fold) {
      std::vector<int64_t> dims;
      for (auto& d : shape) dims.push_back(d.is_fixed() ? d.value : 2);
      return constant(draw(dims).to(t).contiguous(), name.empty() ? "" : name);
    }
    if (name.empty()) name = "x" + std::to_string(g.inputs.size());
    g.inputs.push_back({name, t, std::move(shape), true});
    draws.push_back(std::move(draw));
    return name;
  }
  /// Adds an initializer (default name "init<k>").
  std::string constant(at::Tensor t, std::string name = "") {
    if (name.empty()) name = "init" + std::to_string(g.initializers.size());
    g.initializers[name] = std::move(t);
    return name;
  }
  Builder& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                std::map<std::string, core::AttrValue> attrs = {}, const std::string& domain = "") {
    core::Node& n = g.add_node(op, std::move(in), std::move(out), std::move(attrs));
    n.domain = domain;
    return *this;
  }
  /// Marks `name` a graph output; its shape is inferred by core::infer_shapes unless given.
  Builder& output(const std::string& name) {
    g.outputs.push_back({name, at::kFloat, {}, false});
    return *this;
  }
  Builder& output(const std::string& name, at::ScalarType t, core::Shape shape) {
    g.outputs.push_back({name, t, std::move(shape), true});
    return *this;
  }

  /// The graph with every output's type and shape filled (by probing it with core).
  core::Graph finish() const {
    core::Graph r = g;
    bool missing = false;
    for (auto& o : r.outputs) missing = missing || !o.has_shape;
    if (missing) core::infer_shapes(r);
    r.value_info.clear();
    return r;
  }

  /// One tensor per graph input, symbolic dims bound to `batch`.
  std::vector<at::Tensor> draw(int64_t batch) const {
    std::vector<at::Tensor> xs;
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      std::vector<int64_t> dims;
      for (auto& d : g.inputs[k].shape) dims.push_back(d.is_fixed() ? d.value : batch);
      xs.push_back(draws[k](dims).to(g.inputs[k].dtype).contiguous());
    }
    return xs;
  }

  core::Graph g;
  std::vector<Draw> draws;
  bool fold = false;
};

/// Graph outputs of `g` from core::Module (frozen, eval, no autograd).
inline std::vector<at::Tensor> run_core(const core::Graph& g, const std::vector<at::Tensor>& xs) {
  core::Module m(g, core::Module::Use::kFrozen);
  m.eval();
  at::NoGradGuard no_grad;
  return m.forward(xs);
}

/// Graph outputs of a pare_rt model as owning tensors.
inline std::vector<at::Tensor> run_rt(rt::Model& m, const std::vector<at::Tensor>& xs) {
  std::vector<rt::TensorView> views;
  for (auto& x : xs) views.push_back(exporter::rt_view(x));
  std::vector<at::Tensor> ys;
  for (auto& v : m.run(views)) ys.push_back(exporter::from_rt(v));
  return ys;
}

/// Loads `g` into pare_rt through ONNX bytes (`check`: run the ONNX checker while serializing).
inline rt::Model load_rt(const core::Graph& g, const std::string& origin, const rt::Options& opts = {},
                         bool check = true) {
  return rt::Model::load_bytes(core::serialize_onnx(g, check), origin, opts);
}

/// Largest |a - b| (0 for empty tensors).
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// got == want in dtype and dims, and in values: exactly when `tol` is 0 or the dtype is not
/// floating, else |got - want| <= tol * (1 + |want|).
inline void expect_same(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (tol == 0 || !want.is_floating_point()) {
    EXPECT_TRUE(got.equal(want)) << what << ": not exactly equal\ngot\n" << got << "\nwant\n" << want;
    return;
  }
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const at::Tensor nan_mismatch = g.isnan().ne(w.isnan());
  EXPECT_FALSE(nan_mismatch.any().item<bool>()) << what << ": NaN in one and not the other";
  const at::Tensor ok = ((g - w).abs() <= tol * (1 + w.abs())) | (g.isnan() & w.isnan()) | g.eq(w);
  EXPECT_TRUE(ok.all().item<bool>()) << what << ": max |diff| " << max_abs_diff(got, want) << " > tol " << tol
                                     << "\ngot\n" << got << "\nwant\n" << want;
}

}  // namespace pare::rt_testing
