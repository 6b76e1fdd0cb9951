// The op harness's case table (ggml's test-backend-ops is the model): one or more cases per op in
// core::OpRegistry, each a single node with its attributes and generated inputs, the inputs whose
// gradients are checked, a tolerance and the reference that judges its forward. The table is
// built in op_harness_cases_test.cpp; op_harness_test.cpp runs it (forwards, float64 gradients
// against central differences, FLOP counts, coverage of the registry) and writes every case as a
// one-node ONNX model for tests/peer/op_harness_test.sh, which runs them in ONNX Runtime.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::core::op_harness {

using Attrs = std::map<std::string, AttrValue>;

/// The core op families, as core/ops_*.cpp register them.
enum class Family { kElementwise, kNn, kTensor, kQuant };
const char* family_name(Family f);

/// What judges a case's forward.
enum class Reference {
  kOrt,       ///< the same one-node model in ONNX Runtime
  kOrtGraph,  ///< an equivalent ONNX graph in ONNX Runtime (`ort_graph`), for ops of pare's domain
  kHand,      ///< `want`, computed in the test: ops ONNX Runtime's CPU build cannot run
};

/// One case: `op` applied once to `inputs` (an undefined tensor is an omitted optional input).
struct OpCase {
  OpCase(std::string op, std::string label, std::vector<at::Tensor> inputs)
      : op(std::move(op)), label(std::move(label)), inputs(std::move(inputs)) {}

  std::string op, label;  ///< label: what the case varies ("Pads1Bias"); "Op_Label" names it
  std::vector<at::Tensor> inputs;
  Family family = Family::kElementwise;  ///< set by the table for its section

  OpCase& attrs(Attrs a) { attrs_ = std::move(a); return *this; }
  /// Inputs whose gradients are checked against central differences (float64).
  OpCase& grad(std::vector<int> i) { grad_ = std::move(i); return *this; }
  /// Only the first `n` outputs enter the gradient check (the others are state, not values to
  /// differentiate: BatchNormalization's running statistics).
  OpCase& grad_outputs(int n) { grad_outputs_ = n; return *this; }
  /// Forward tolerance: |pare - ref| <= atol + rtol * |ref| (integer outputs: atol in steps).
  OpCase& tol(double atol, double rtol = 1e-5) { atol_ = atol; rtol_ = rtol; return *this; }
  OpCase& outputs(int n) { outputs_ = n; return *this; }
  /// The model's opset; above 17 (what the linked onnx checker knows) the checker is skipped.
  OpCase& opset(int64_t v) { opset_ = v; return *this; }
  OpCase& domain(std::string d) { domain_ = std::move(d); return *this; }
  /// Inputs written into the model as initializers instead of being fed.
  OpCase& constant(std::set<int> i) { constant_ = std::move(i); return *this; }
  OpCase& ort_graph(std::function<Graph(const OpCase&)> f, std::string note) {
    ref_ = Reference::kOrtGraph; ort_graph_ = std::move(f); note_ = std::move(note); return *this;
  }
  OpCase& hand(std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> want,
               std::function<void(RunContext&)> context, std::string note) {
    ref_ = Reference::kHand; want_ = std::move(want); context_ = std::move(context);
    note_ = std::move(note); return *this;
  }

  std::string name() const { return op + "_" + label; }

  Attrs attrs_;
  std::vector<int> grad_;
  int grad_outputs_ = -1;  ///< -1: all
  double atol_ = 1e-5, rtol_ = 1e-5;
  int outputs_ = 1;
  int64_t opset_ = 17;
  std::string domain_;
  std::set<int> constant_;
  Reference ref_ = Reference::kOrt;
  std::function<Graph(const OpCase&)> ort_graph_;
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> want_;
  std::function<void(RunContext&)> context_;  ///< e.g. a simulated collective
  std::string note_;                          ///< how a non-ORT reference is built
};

/// Every case (inputs drawn from a fixed seed: the same table every call).
std::vector<OpCase> all_cases();

/// The node of a case: inputs "x0", "x1", ... ("" where omitted), outputs "y0", "y1", ...
Node node_of(const OpCase& c);

}  // namespace pare::core::op_harness
