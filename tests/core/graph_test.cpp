#include <gtest/gtest.h>

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/graph.h"
#include "core/module.h"
#include "core/zoo.h"

using namespace pare;
using namespace pare::core;

namespace {
// x[N,4] -> Gemm(w[3,4], b[3]) -> Relu -> y[N,3]
Graph tiny_mlp() {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 4}});
  g.initializers["w"] = at::arange(12, at::kFloat).reshape({3, 4}) / 10 - 0.5;
  g.initializers["b"] = at::tensor({0.1f, -0.2f, 0.3f});
  g.add_node("Gemm", {"x", "w", "b"}, {"h"}, {{"transB", int64_t{1}}}, "fc");
  g.add_node("Relu", {"h"}, {"y"}, {}, "relu");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 3}});
  return g;
}

at::Tensor leaf_of(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }
}  // namespace

TEST(Graph, VerifyAcceptsWellFormedGraph) { EXPECT_NO_THROW(tiny_mlp().verify()); }

TEST(Graph, VerifyNamesUnknownOp) {
  Graph g = tiny_mlp();
  g.nodes[1].op_type = "Frobnicate";
  try {
    g.verify();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("Frobnicate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("relu"), std::string::npos) << e.what();
  }
}

TEST(Graph, VerifyRejectsUndefinedInputAndUnknownAttribute) {
  Graph g = tiny_mlp();
  g.nodes[1].inputs[0] = "nope";
  EXPECT_THROW(g.verify(), InputError);
  g = tiny_mlp();
  g.nodes[0].attrs["transC"] = int64_t{1};
  EXPECT_THROW(g.verify(), InputError);
  g = tiny_mlp();
  g.nodes[0].attrs["transB"] = 1.0f;  // wrong kind
  EXPECT_THROW(g.verify(), InputError);
}

TEST(Graph, VerifyRejectsDoubleDefinitionAndMissingOutput) {
  Graph g = tiny_mlp();
  g.nodes[1].outputs[0] = "h";
  EXPECT_THROW(g.verify(), InputError);
  g = tiny_mlp();
  g.outputs[0].name = "z";
  EXPECT_THROW(g.verify(), InputError);
}

TEST(Graph, TopoSortOrdersProducersFirstAndDetectsCycles) {
  Graph g = tiny_mlp();
  std::swap(g.nodes[0], g.nodes[1]);
  EXPECT_THROW(g.verify(), InputError);
  g.topo_sort();
  EXPECT_EQ(g.nodes[0].name, "fc");
  EXPECT_NO_THROW(g.verify());

  Graph c = tiny_mlp();
  c.nodes[0].inputs[0] = "y";  // fc reads relu's output: a cycle
  EXPECT_THROW(c.topo_sort(), InputError);
}

TEST(Graph, InferShapesMarksBatchDims) {
  Graph g = tiny_mlp();
  g.outputs[0].shape.clear();
  infer_shapes(g);
  ASSERT_EQ(g.outputs[0].shape.size(), 2u);
  EXPECT_EQ(g.outputs[0].shape[0].symbol, "N");
  EXPECT_EQ(g.outputs[0].shape[1].value, 3);
  ASSERT_EQ(g.value_info.size(), 1u);
  EXPECT_EQ(g.value_info[0].name, "h");
}

TEST(Graph, TypedAttributeGettersRejectWrongKind) {
  Node n;
  n.op_type = "Gemm";
  n.name = "fc";
  n.attrs["alpha"] = 2.0f;
  EXPECT_FLOAT_EQ(n.attr_float("alpha", 1.0f), 2.0f);
  EXPECT_EQ(n.attr_int("transA", 0), 0);
  EXPECT_THROW(n.attr_int("alpha", 0), InputError);
}

TEST(Module, ForwardMatchesManualComputation) {
  Graph g = tiny_mlp();
  at::Tensor w = g.initializers["w"], b = g.initializers["b"];
  Module m(g);
  at::Tensor x = at::randn({5, 4});
  at::Tensor y = m.forward({x})[0];
  EXPECT_TRUE(at::allclose(y, at::relu(at::addmm(b, x, w.t()))));
}

TEST(Module, ParametersGetGradientsAndWriteBack) {
  Module m(tiny_mlp());
  ASSERT_EQ(m.parameter_names(), (std::vector<std::string>{"w", "b"}));
  at::Tensor x = at::randn({2, 4});
  m.forward({x})[0].sum().backward();
  ASSERT_TRUE(m.parameters()[0].grad().defined());
  {
    at::NoGradGuard no_grad;
    m.parameters()[0].fill_(1.5);
  }
  Graph g = m.to_graph();
  EXPECT_TRUE(at::equal(g.initializers["w"], at::full({3, 4}, 1.5f)));
  EXPECT_FALSE(g.initializers["w"].requires_grad());
}

// A language model's tied head: ids -> Gather(E [V, H]) -> MatMul(E^T [H, V]), E^T a view of E.
Graph tied_lm() {
  Graph g;
  g.inputs.push_back({"ids", at::kLong, {Dim::sym("N")}});
  at::Tensor e = at::arange(15, at::kFloat).reshape({5, 3}) / 10 - 0.7;
  g.initializers["embed.weight"] = e;
  g.initializers["embed.weight.T"] = e.t();
  g.add_node("Gather", {"embed.weight", "ids"}, {"h"}, {}, "embed");
  g.add_node("MatMul", {"h", "embed.weight.T"}, {"logits"}, {}, "head");
  g.outputs.push_back({"logits", at::kFloat, {Dim::sym("N"), 5}});
  return g;
}

TEST(Module, ATiedWeightIsOneParameterThatTrainingMovesForBothReaders) {
  Graph g = tied_lm();
  EXPECT_EQ(g.tied_initializers(), (std::map<std::string, std::string>{{"embed.weight.T", "embed.weight"}}));
  EXPECT_EQ(g.parameter_count(), 15);
  EXPECT_EQ(g.initializer_bytes(), 15 * 4);
  Module m(g);
  ASSERT_EQ(m.parameter_names(), (std::vector<std::string>{"embed.weight"}));
  EXPECT_EQ(m.parameter_count(), 15);
  at::Tensor ids = at::tensor(std::vector<int64_t>{1, 4});
  m.forward({ids})[0].sum().backward();
  // d(sum)/dE: the head's gradient (every row gets the sum of the two embeddings) plus the
  // embedding's (rows 1 and 4 get the sum over the vocabulary of E^T's columns).
  at::Tensor e = leaf_of(g.initializers["embed.weight"]);
  at::index_select(e, 0, ids).matmul(e.t()).sum().backward();
  EXPECT_TRUE(at::allclose(m.parameters()[0].grad(), e.grad()));
  {
    at::NoGradGuard no_grad;
    m.parameters()[0].add_(1.0);
  }
  EXPECT_TRUE(at::equal(m.initializer("embed.weight.T"), m.initializer("embed.weight").t()));
  Graph out = m.to_graph();
  EXPECT_TRUE(at::equal(out.initializers["embed.weight"], g.initializers["embed.weight"] + 1));
  EXPECT_EQ(out.tied_initializers().size(), 1u);  // written back still tied
}

// forward_until stops after the last step making a value asked for: the head that follows the
// hidden state does not run (here it would fail), and the tied head's view it returns is the one
// gradients reach the embedding through.
TEST(Module, ForwardUntilRunsNoFurtherThanTheValuesAskedFor) {
  Graph g = tied_lm();
  g.initializers["shape"] = at::tensor(std::vector<int64_t>{7, 7});
  g.nodes.back().outputs = {"pre"};
  g.add_node("Reshape", {"pre", "shape"}, {"logits"}, {}, "impossible");
  Module m(g);
  const at::Tensor ids = at::tensor(std::vector<int64_t>{1, 4});
  EXPECT_THROW(m.forward({ids}), InputError);
  auto v = m.forward_until({ids}, {"h", "embed.weight.T"});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(at::equal(v["h"], at::index_select(g.initializers["embed.weight"], 0, ids)));
  at::matmul(v["h"], v["embed.weight.T"]).sum().backward();
  EXPECT_TRUE(m.parameters()[0].grad().defined());
  EXPECT_TRUE(m.forward_until({ids}, {"embed.weight"}).at("embed.weight").is_same(m.parameters()[0]));
  EXPECT_THROW(m.forward_until({ids}, {"nope"}), InputError);
}

TEST(Module, AFrozenModuleReadsTheGraphsTensorsAndCannotTrain) {
  Graph g = tiny_mlp();
  Module m(g, Module::Use::kFrozen);
  EXPECT_TRUE(m.initializer("w").is_same(g.initializers["w"]));  // no copy
  EXPECT_TRUE(m.parameters().empty());
  at::Tensor x = at::randn({5, 4});
  EXPECT_TRUE(at::equal(m.forward({x})[0], Module(g).forward({x})[0]));
  EXPECT_THROW(m.train(), InternalError);
  EXPECT_NO_THROW(m.eval());
}

TEST(Module, ForwardValuesReturnsIntermediates) {
  Module m(tiny_mlp());
  auto v = m.forward_values({at::randn({2, 4})}, {"h"});
  ASSERT_TRUE(v.count("h"));
  ASSERT_TRUE(v.count("y"));
  EXPECT_TRUE(at::equal(v["y"], at::relu(v["h"])));
  EXPECT_THROW(m.forward_values({at::randn({2, 4})}, {"nothing"}), InputError);
}

TEST(Module, RejectsInputOfWrongShapeNamingIt) {
  Module m(tiny_mlp());
  try {
    m.forward({at::randn({2, 5})});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(Module, BatchNormUsesBatchStatisticsOnlyInTraining) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 2, 3, 3}});
  g.initializers["s"] = at::ones({2});
  g.initializers["bias"] = at::zeros({2});
  g.initializers["mean"] = at::zeros({2});
  g.initializers["var"] = at::ones({2});
  g.add_node("BatchNormalization", {"x", "s", "bias", "mean", "var"}, {"y"},
             {{"epsilon", 1e-5f}, {"momentum", 0.9f}}, "bn");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 2, 3, 3}});
  Module m(g);
  EXPECT_EQ(m.buffer_names(), (std::vector<std::string>{"mean", "var"}));
  at::Tensor x = at::randn({4, 2, 3, 3}) * 3 + 2;
  m.eval();
  EXPECT_TRUE(at::allclose(m.forward({x})[0], x / std::sqrt(1 + 1e-5), 1e-5, 1e-5));
  m.train();
  at::Tensor y = m.forward({x})[0];
  EXPECT_NEAR(y.mean().item<double>(), 0.0, 1e-4);
  // ONNX momentum 0.9: running = 0.9 * running + 0.1 * batch
  at::Tensor expect_mean = 0.1 * x.mean({0, 2, 3});
  EXPECT_TRUE(at::allclose(m.initializer("mean"), expect_mean, 1e-4, 1e-5));
  // The graph written back carries the updated statistics.
  EXPECT_TRUE(at::allclose(m.to_graph().initializers["mean"], expect_mean, 1e-4, 1e-5));
}

TEST(Module, ChannelsLastKeepsValuesAndGradients) {
  Module ref(build_zoo_model("cnn", 2)), cl(build_zoo_model("cnn", 2));
  cl.set_memory_format(at::MemoryFormat::ChannelsLast);
  ref.eval();
  cl.eval();
  at::Tensor x = at::rand({3, 1, 28, 28});
  at::Tensor a = ref.forward({x})[0], b = cl.forward({x})[0];
  EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6)) << (a - b).abs().max();
  EXPECT_TRUE(cl.initializer("conv1.weight").is_contiguous(at::MemoryFormat::ChannelsLast));
  cl.train();
  cl.forward({x})[0].sum().backward();
  for (auto& p : cl.parameters()) EXPECT_TRUE(p.grad().defined());
}
