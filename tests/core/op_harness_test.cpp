// The op harness (ggml's test-backend-ops is the model): every op in core::OpRegistry runs on the
// generated inputs of op_harness_cases_test.cpp. Here: every registered op has a case (a new op
// without one fails, named), every case's forward runs (and matches its hand reference where
// ONNX Runtime cannot be one), gradients of the differentiable inputs match central differences
// in float64, and FLOP counts match hand counts for a few ops. With PARE_OP_HARNESS_DIR set,
// OpHarness.WritesEveryCaseForOnnxRuntime writes each case as a one-node ONNX model with its
// inputs and pare's outputs (.npy) and a manifest; tests/peer/op_harness_test.sh runs them in
// ONNX Runtime and compares.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "core/tensor_io.h"
#include "tests/core/op_harness.h"

namespace pare::core::op_harness {
namespace {

using Tensors = std::vector<at::Tensor>;
using Sizes = std::vector<std::vector<int64_t>>;

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> all = all_cases();
  return all;
}

/// Passes when every name in `registered` has at least one case; otherwise fails naming them.
::testing::AssertionResult covers_every_op(const std::vector<std::string>& registered,
                                           const std::vector<OpCase>& table) {
  std::set<std::string> covered;
  for (const auto& c : table) covered.insert(c.op);
  std::string missing;
  for (const auto& op : registered)
    if (!covered.count(op)) missing += (missing.empty() ? "" : ", ") + op;
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "registered ops without a case in tests/core/op_harness_cases_test.cpp: " << missing;
}

Tensors run_case(const OpCase& c, const Tensors& in) {
  RunContext ctx;
  if (c.context_) c.context_(ctx);
  return OpRegistry::global().get(c.op).forward(node_of(c), in, ctx);
}

/// max |got - want| and max |got - want| / |want| (over |want| >= 1e-3), compared in double;
/// within: |got - want| <= atol + rtol * |want| everywhere (integer `want`: <= atol).
struct Diff {
  double abs = 0, rel = 0;
  bool within = true;  ///< every element within atol + rtol * |want|
};

Diff diff(const at::Tensor& got, const at::Tensor& want, double atol, double rtol) {
  Diff d;
  const at::Tensor g = got.detach().to(at::kDouble), w = want.detach().to(at::kDouble);
  if (g.numel() == 0) return d;
  const at::Tensor e = (g - w).abs();
  d.abs = e.max().item<double>();
  const at::Tensor big = w.abs() >= 1e-3;
  if (big.any().item<bool>()) d.rel = (e.masked_select(big) / w.abs().masked_select(big)).max().item<double>();
  // Integer outputs: within atol steps, whatever their size.
  const double r = want.is_floating_point() ? rtol : 0.0;
  d.within = (e <= atol + r * w.abs()).all().item<bool>();
  return d;
}

Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

/// The case as a model: its node (or, for kOrtGraph, the equivalent graph) with inputs "x<i>"
/// fed or as initializers and outputs "y<k>" typed and shaped as pare's `out`.
Graph case_graph(const OpCase& c, const Tensors& out) {
  Graph g;
  if (c.ref_ == Reference::kOrtGraph) {
    g = c.ort_graph_(c);
  } else {
    g.opset = c.opset_;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].defined()) continue;
      const std::string name = "x" + std::to_string(i);
      if (c.constant_.count(static_cast<int>(i))) g.initializers[name] = c.inputs[i];
      else g.inputs.push_back({name, c.inputs[i].scalar_type(), shape_of(c.inputs[i])});
    }
    g.nodes.push_back(node_of(c));
  }
  g.name = c.name();
  for (int k = 0; k < c.outputs_; ++k)
    g.outputs.push_back({"y" + std::to_string(k), out.at(k).scalar_type(), shape_of(out.at(k))});
  return g;
}

// ---- coverage ----------------------------------------------------------------------------

TEST(OpHarness, EveryRegisteredOpHasACase) {
  const auto names = OpRegistry::global().names();
  ASSERT_GT(names.size(), 50u);
  EXPECT_TRUE(covers_every_op(names, cases()));
}

TEST(OpHarness, AnOpRegisteredWithoutACaseFailsTheCoverageCheckByName) {
  OpRegistry reg;
  register_core_ops(reg);
  ASSERT_TRUE(covers_every_op(reg.names(), cases()));
  OpDef d;
  d.name = "HarnessProbeOp";
  d.forward = [](const Node&, const Tensors& in, const RunContext&) { return in; };
  d.doc = "an op the harness has no case for";
  reg.add(std::move(d));
  const ::testing::AssertionResult r = covers_every_op(reg.names(), cases());
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("HarnessProbeOp"), std::string::npos) << r.message();
  EXPECT_EQ(std::string(r.message()).find("Conv"), std::string::npos) << r.message();
}

TEST(OpHarness, EveryCaseIsAValidGraphAndRunsItsForward) {
  std::set<std::string> names;
  int hand = 0;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name());
    EXPECT_TRUE(names.insert(c.name()).second) << "two cases named " << c.name();
    ASSERT_NE(OpRegistry::global().find(c.op), nullptr) << "case for an op core does not register";
    Tensors out;
    try {
      out = run_case(c, c.inputs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "forward threw: " << e.what();
      continue;
    }
    ASSERT_GE(out.size(), static_cast<size_t>(c.outputs_));
    for (int k = 0; k < c.outputs_; ++k) ASSERT_TRUE(out[k].defined()) << "output " << k;
    // Arity and attribute kinds as Graph::verify (and so load_onnx) checks them.
    Graph g = case_graph(c, out);
    EXPECT_NO_THROW(g.verify());
    if (c.ref_ == Reference::kHand) {
      ++hand;
      const Tensors want = c.want_(c.inputs);
      ASSERT_EQ(want.size(), static_cast<size_t>(c.outputs_));
      for (int k = 0; k < c.outputs_; ++k) {
        ASSERT_EQ(out[k].sizes(), want[k].sizes());
        const Diff d = diff(out[k], want[k], c.atol_, c.rtol_);
        EXPECT_TRUE(d.within) << "output " << k << ": max abs diff " << d.abs << " against " << c.note_;
      }
    }
  }
  EXPECT_GE(hand, 2);  // the collectives
}

TEST(OpHarness, CollectivesRefuseToRunOutsideAShardedRun) {
  for (const auto& c : cases()) {
    if (c.op != "AllReduce" && c.op != "AllGather") continue;
    SCOPED_TRACE(c.name());
    EXPECT_THROW(OpRegistry::global().get(c.op).forward(node_of(c), c.inputs, RunContext{}), InputError);
  }
}

// ---- gradients ---------------------------------------------------------------------------

/// Floating inputs as float64, the others unchanged.
Tensors to_double(const Tensors& in) {
  Tensors r;
  for (const auto& t : in) r.push_back(t.defined() && t.is_floating_point() ? t.to(at::kDouble) : t);
  return r;
}

TEST(OpHarness, GradientsMatchCentralDifferencesInFloat64) {
  constexpr double kStep = 1e-6, kAtol = 1e-6, kRtol = 1e-5;
  std::set<std::string> ops;
  int checked = 0;
  for (const auto& c : cases()) {
    if (c.grad_.empty()) continue;
    SCOPED_TRACE(c.name());
    const Tensors in = to_double(c.inputs);
    // L = sum_k <y_k, w_k> with fixed random w_k: one scalar whose gradient sees every output.
    Tensors weights;
    {
      at::NoGradGuard no_grad;
      const Tensors out = run_case(c, in);
      at::Generator g = at::make_generator<at::CPUGeneratorImpl>(7);
      const int differentiable = c.grad_outputs_ < 0 ? c.outputs_ : c.grad_outputs_;
      for (int k = 0; k < differentiable; ++k)
        weights.push_back(out[k].is_floating_point() ? at::randn(out[k].sizes(), g, at::kDouble) : at::Tensor());
    }
    auto loss = [&](const Tensors& x) {
      const Tensors out = run_case(c, x);
      at::Tensor l = at::zeros({}, at::kDouble);
      for (size_t k = 0; k < weights.size(); ++k)
        if (weights[k].defined()) l = l + (out[k].to(at::kDouble) * weights[k]).sum();
      return l;
    };
    Tensors x = in;
    std::vector<at::Tensor> vars;
    for (int i : c.grad_) {
      ASSERT_TRUE(in.at(i).scalar_type() == at::kDouble) << "input " << i << " is not floating";
      x[i] = in[i].detach().clone().requires_grad_(true);
      vars.push_back(x[i]);
    }
    const at::Tensor l = loss(x);
    ASSERT_TRUE(l.requires_grad()) << "no gradient flows to the inputs " << ::testing::PrintToString(c.grad_);
    const auto analytic = torch::autograd::grad({l}, vars, {}, false, false, true);
    at::NoGradGuard no_grad;
    for (size_t v = 0; v < vars.size(); ++v) {
      const int i = c.grad_[v];
      at::Tensor base = in[i].detach().clone().contiguous();
      double* p = base.data_ptr<double>();
      at::Tensor numeric = at::empty_like(base);
      double* q = numeric.data_ptr<double>();
      Tensors xs = in;
      xs[i] = base;
      for (int64_t e = 0; e < base.numel(); ++e) {
        const double orig = p[e];
        p[e] = orig + kStep;
        const double up = loss(xs).item<double>();
        p[e] = orig - kStep;
        const double down = loss(xs).item<double>();
        p[e] = orig;
        q[e] = (up - down) / (2 * kStep);
      }
      const at::Tensor a = analytic[v].defined() ? analytic[v] : at::zeros_like(numeric);
      ASSERT_EQ(a.sizes(), numeric.sizes());
      const Diff d = diff(a, numeric, kAtol, kRtol);
      EXPECT_TRUE(d.within) << "input " << i << ": autograd and central differences differ by up to "
                            << d.abs << " (relative " << d.rel << ")\nautograd\n"
                            << a << "\nnumeric\n" << numeric;
    }
    ++checked;
    ops.insert(c.op);
  }
  std::printf("[ op harness ] gradients of %d cases (%zu ops) checked against central differences\n", checked,
              ops.size());
  EXPECT_GE(ops.size(), 60u);
}

// ---- FLOPs -------------------------------------------------------------------------------

const OpCase& find_case(const std::string& name) {
  for (const auto& c : cases())
    if (c.name() == name) return c;
  throw std::runtime_error("no case " + name);
}

/// The op's FLOP count for the case's real input and output sizes; checks the output shape first.
int64_t flops_of(const std::string& case_name, const std::vector<int64_t>& want_out) {
  const OpCase& c = find_case(case_name);
  const Tensors out = run_case(c, c.inputs);
  EXPECT_EQ(out.at(0).sizes().vec(), want_out) << case_name;
  Sizes in, outs;
  for (const auto& t : c.inputs) in.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
  for (const auto& t : out) outs.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
  return OpRegistry::global().get(c.op).flops(node_of(c), in, outs);
}

TEST(OpHarness, FlopsMatchHandCounts) {
  // Multiply-add = 2 FLOPs, bias additions not counted.
  // Conv x [1,3,5,5], W [4,3,3,3], pads 1: y [1,4,5,5]; each of 100 outputs reads 3*3*3 = 27
  // weights: 2 * 100 * 27.
  EXPECT_EQ(flops_of("Conv_Pads1Bias", {1, 4, 5, 5}), 5400);
  // Grouped: x [2,4,9,9], W [6,2,3,3], group 2, stride 2, dilation 2 (reach 5), pads 1:
  // (9 + 2 - 5) / 2 + 1 = 4, y [2,6,4,4] = 192 outputs of 2*3*3 = 18 MACs each.
  EXPECT_EQ(flops_of("Conv_Groups2Stride2Dilation2", {2, 6, 4, 4}), 2 * 192 * 18);
  // Gemm A [3,5] B^T [4,5]: y [3,4], 12 outputs of 5 MACs.
  EXPECT_EQ(flops_of("Gemm_TransBAlphaBetaBroadcastC", {3, 4}), 120);
  // Gemm with transA, A [5,3]: the reduction is A's first dim, 5.
  EXPECT_EQ(flops_of("Gemm_TransANoC", {3, 4}), 120);
  // MatMul [2,3,4] @ [4,5]: y [2,3,5], 30 outputs of 4 MACs.
  EXPECT_EQ(flops_of("MatMul_Batched", {2, 3, 5}), 240);
  // MatMul [2,1,3,4] @ [3,4,2]: y [2,3,3,2], 36 outputs of 4 MACs.
  EXPECT_EQ(flops_of("MatMul_BroadcastBatch", {2, 3, 3, 2}), 288);
  // Add [2,3,4] + [3,1]: one FLOP per output element.
  EXPECT_EQ(flops_of("Add_Broadcast", {2, 3, 4}), 24);
  // Sum of three inputs broadcast to [2,3]: two additions per output.
  EXPECT_EQ(flops_of("Sum_ThreeInputsBroadcast", {2, 3}), 12);
  // MaxPool k3 s2 pads 1 on [1,2,7,7]: (7 + 2 - 3) / 2 + 1 = 4, y [1,2,4,4]: 32 windows of 9.
  EXPECT_EQ(flops_of("MaxPool_K3S2Pads1Indices", {1, 2, 4, 4}), 288);
  // AveragePool k3 pads 1 on [1,2,5,5]: y [1,2,5,5], 50 windows of 9.
  EXPECT_EQ(flops_of("AveragePool_Pads1ExcludePad", {1, 2, 5, 5}), 450);
  // ReduceSum over axis 1 of [2,3,4]: one addition per input element.
  EXPECT_EQ(flops_of("ReduceSum_Axis1Keepdims", {2, 1, 4}), 24);
  EXPECT_EQ(flops_of("ReduceMean_TwoAxesNoKeepdims", {3}), 24);
  // Shape ops move data, no arithmetic.
  EXPECT_EQ(flops_of("Transpose_Perm", {2, 4, 5, 3}), 0);
  // Einsum bij,bjk->bik: a multiply-add for each of the 2*3*4*5 points (b, i, j, k).
  EXPECT_EQ(flops_of("Einsum_BatchMatMul", {2, 3, 5}), 240);
  EXPECT_EQ(flops_of("Einsum_EllipsisDiagonal", {2, 3}), 2 * 2 * 3);
  // Linear Resize of two axes to [1,2,3,4]: 2 taps, a multiply-add each, per axis per output.
  EXPECT_EQ(flops_of("Resize_LinearHalfPixelSizesDown", {1, 2, 3, 4}), 2 * 2 * 2 * 24);
  EXPECT_EQ(flops_of("Resize_NearestScales2x", {1, 2, 6, 8}), 0);
}

// ---- files for ONNX Runtime --------------------------------------------------------------

std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') r += '\\';
    r += ch;
  }
  return r + "\"";
}

std::string json_number(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

TEST(OpHarness, WritesEveryCaseForOnnxRuntime) {
  const char* dir_env = std::getenv("PARE_OP_HARNESS_DIR");
  if (dir_env == nullptr || *dir_env == '\0')
    GTEST_SKIP() << "set PARE_OP_HARNESS_DIR to write the cases (tests/peer/op_harness_test.sh does)";
  const std::string dir = dir_env;
  std::ostringstream manifest;
  {
    std::map<std::string, std::string> family;
    for (const auto& c : cases()) family.emplace(c.op, family_name(c.family));
    manifest << "{\"registered\": [";
    bool first = true;
    for (const auto& op : OpRegistry::global().names()) {
      manifest << (first ? "" : ", ") << "[" << json_string(op) << ", "
               << json_string(family.count(op) ? family[op] : "none") << "]";
      first = false;
    }
    manifest << "]}\n";
  }
  int index = 0;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name());
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%03d", index++);
    const std::string stem = std::string(prefix) + "_" + c.name();
    const Tensors out = run_case(c, c.inputs);
    manifest << "{\"case\": " << json_string(c.name()) << ", \"op\": " << json_string(c.op)
             << ", \"family\": " << json_string(family_name(c.family)) << ", \"atol\": " << json_number(c.atol_)
             << ", \"rtol\": " << json_number(c.rtol_) << ", \"note\": " << json_string(c.note_);
    if (c.ref_ == Reference::kHand) {
      // Judged here, against the hand reference; the manifest carries the numbers.
      const Tensors want = c.want_(c.inputs);
      Diff worst;
      for (int k = 0; k < c.outputs_; ++k) {
        const Diff d = diff(out.at(k), want.at(k), c.atol_, c.rtol_);
        worst.abs = std::max(worst.abs, d.abs);
        worst.rel = std::max(worst.rel, d.rel);
        worst.within = worst.within && d.within && out[k].sizes() == want[k].sizes();
      }
      manifest << ", \"ref\": \"hand\", \"abs\": " << json_number(worst.abs) << ", \"rel\": "
               << json_number(worst.rel) << ", \"ok\": " << (worst.within ? "true" : "false") << "}\n";
      continue;
    }
    const Graph g = case_graph(c, out);
    const std::string model = stem + ".onnx";
    const bool checkable = g.opset <= 17 && c.domain_.empty();
    ASSERT_NO_THROW(save_onnx(g, dir + "/" + model, OnnxSaveOptions().check(checkable)));
    manifest << ", \"ref\": " << (c.ref_ == Reference::kOrt ? "\"ort\"" : "\"ort-graph\"")
             << ", \"model\": " << json_string(model) << ", \"inputs\": [";
    bool first = true;
    for (const auto& vi : g.inputs) {
      const int i = std::stoi(vi.name.substr(1));
      const std::string file = stem + "." + vi.name + ".npy";
      save_npy(c.inputs.at(static_cast<size_t>(i)), dir + "/" + file);
      manifest << (first ? "" : ", ") << "[" << json_string(vi.name) << ", " << json_string(file) << "]";
      first = false;
    }
    manifest << "], \"outputs\": [";
    for (int k = 0; k < c.outputs_; ++k) {
      const std::string name = "y" + std::to_string(k);
      const std::string file = stem + ".pare." + name + ".npy";
      save_npy(out.at(k), dir + "/" + file);
      manifest << (k ? ", " : "") << "[" << json_string(name) << ", " << json_string(file) << "]";
    }
    manifest << "]}\n";
  }
  std::ofstream f(dir + "/manifest.jsonl");
  f << manifest.str();
  ASSERT_TRUE(f.good()) << "cannot write " << dir << "/manifest.jsonl";
  std::printf("[ op harness ] %d cases written to %s\n", index, dir.c_str());
}

}  // namespace
}  // namespace pare::core::op_harness
