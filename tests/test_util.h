// Helpers shared by the GoogleTest suites: a scratch folder, InputError expectations, a toy data
// set, and two ops that are not in core.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "core/data.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::testing {

/// Writes a hand-made or hostile file whole, as pare writes its own.
inline void write_bytes(const std::string& path, const std::string& bytes) { write_file_atomic(path, bytes); }

/// Same dtype, same sizes, same bytes.
inline ::testing::AssertionResult bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type())
    return ::testing::AssertionFailure() << "dtype " << a.scalar_type() << " vs " << b.scalar_type();
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "sizes " << a.sizes() << " vs " << b.sizes();
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  if (ca.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

/// A fresh folder under the GoogleTest temp dir, removed with its files at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "pare_test_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << "mkdtemp " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the entries in the folder.
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

/// Runs `fn`, expecting an InputError whose message contains every string in `parts`.
template <class Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

/// Runs `fn`, expecting an InputError about the library option `option` (Error::about, which the
/// command line rewrites to its flag) whose message holds every string of `parts` and names no
/// command-line flag.
template <class Fn>
void expect_option_error(Fn fn, const std::string& option, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError about option '" << option << "'";
  } catch (const InputError& e) {
    const auto& about = e.options();
    EXPECT_NE(std::find(about.begin(), about.end(), option), about.end())
        << "message '" << e.what() << "' is not marked as about option '" << option << "'";
    EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << "library message names a flag: " << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

/// Two Gaussian blobs in 784-d shaped like Fashion-MNIST images: label 0 around 0, label 1 around 1.
inline core::TensorDataset two_blobs(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor y = at::randint(0, 2, {n}, gen, at::kLong);
  at::Tensor x = at::randn({n, 1, 28, 28}, gen) * 0.5 + y.to(at::kFloat).view({n, 1, 1, 1});
  return {x, y, "blobs"};
}

/// ||a - ref|| / ||ref||, in float64 on the CPU.
inline double relative_error(const at::Tensor& a, const at::Tensor& ref) {
  at::Tensor r = ref.detach().cpu().to(at::kDouble);
  return (a.detach().cpu().to(at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
}

/// Registers two ops that core does not have, for the tests that show how each pass meets a new op
/// (docs/ARCHITECTURE.md, "Add an op"): PareTestSquare (x * x), whose registry entry declares it
/// elementwise and nothing else, and PareTestOpaque (2 * x), which declares nothing. Once per
/// process; whatever facet providers come before or after attach to them.
inline void register_test_ops() {
  core::OpRegistry& reg = core::OpRegistry::global();
  if (reg.find("PareTestSquare")) return;
  auto add = [&](const char* name, bool elementwise, double power) {
    core::OpDef d;
    d.name = name;
    d.doc = std::string("test op ") + name;
    if (elementwise) d.traits.elementwise = core::OpTraits::Elementwise::kUnary;
    d.forward = [power](const core::Node&, const std::vector<at::Tensor>& in, const core::RunContext&) {
      return std::vector<at::Tensor>{power == 2 ? in.at(0) * in.at(0) : in.at(0) * 2};
    };
    reg.add(std::move(d));
  };
  add("PareTestSquare", true, 2);
  add("PareTestOpaque", false, 1);
}

/// A decoder layer of ONNX opset 23 ops on x [N, seq, 16]: RMSNormalization, q/k/v MatMuls,
/// RotaryEmbedding (positions 0..seq-1 as a [1, seq] constant), Attention (4 query heads of 4
/// over 2 KV heads, causal), the out-projection and the residual Add; output y.
inline core::Graph decoder_layer_graph(int64_t seq, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t hidden = 16, head = 4;
  core::Graph g;
  g.name = "decoder_layer";
  g.inputs.push_back({"x", at::kFloat, {core::Dim::sym("N"), seq, hidden}});
  g.initializers["norm.scale"] = at::rand({hidden}, gen) + 0.5;
  g.initializers["wq"] = at::randn({hidden, 4 * head}, gen) * 0.3;
  g.initializers["wk"] = at::randn({hidden, 2 * head}, gen) * 0.3;
  g.initializers["wv"] = at::randn({hidden, 2 * head}, gen) * 0.3;
  g.initializers["wo"] = at::randn({4 * head, hidden}, gen) * 0.3;
  const at::Tensor angle = at::outer(at::arange(seq, at::kFloat), at::rand({head / 2}, gen));
  g.initializers["cos"] = at::cos(angle);
  g.initializers["sin"] = at::sin(angle);
  g.initializers["pos"] = at::arange(seq, at::kLong).unsqueeze(0);
  g.add_node("RMSNormalization", {"x", "norm.scale"}, {"h"}, {}, "norm");
  g.add_node("MatMul", {"h", "wq"}, {"q"}, {}, "q_proj");
  g.add_node("MatMul", {"h", "wk"}, {"k"}, {}, "k_proj");
  g.add_node("MatMul", {"h", "wv"}, {"v"}, {}, "v_proj");
  g.add_node("RotaryEmbedding", {"q", "cos", "sin", "pos"}, {"qr"}, {{"num_heads", int64_t{4}}}, "rope_q");
  g.add_node("RotaryEmbedding", {"k", "cos", "sin", "pos"}, {"kr"}, {{"num_heads", int64_t{2}}}, "rope_k");
  g.add_node("Attention", {"qr", "kr", "v"}, {"a"},
             {{"is_causal", int64_t{1}}, {"q_num_heads", int64_t{4}}, {"kv_num_heads", int64_t{2}}}, "attn");
  g.add_node("MatMul", {"a", "wo"}, {"o"}, {}, "o_proj");
  g.add_node("Add", {"x", "o"}, {"y"}, {}, "residual");
  g.outputs.push_back({"y", at::kFloat, {core::Dim::sym("N"), seq, hidden}});
  return g;
}

}  // namespace pare::testing
