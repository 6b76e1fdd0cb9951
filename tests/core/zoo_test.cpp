// Tests for core/zoo: every spec builds a graph that verifies and runs, with seeded PyTorch-style
// initialisation; bad specs are rejected with the list of known ones.
#include "core/zoo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/module.h"

namespace pare::core {
namespace {

struct ZooCase {
  std::string spec;
  int64_t classes;
};

const std::vector<ZooCase> kCases = {
    {"mlp:784-300-100-10", 10},
    {"mlp:12-5,in=3,hw=2", 5},
    {"lenet5", 10},
    {"cnn", 10},
    {"resnet:1", 10},
    {"resnet:2,in=3,hw=16,classes=7", 7},
    {"transformer:vocab=50,d=32,heads=4,layers=2,classes=3,seq=8", 3},
    {"transformer:vocab=20,d=16,heads=2,layers=1,classes=4,seq=5,ff=24,norm=post", 4},
};

at::Tensor example_input(const Graph& g, int64_t batch) {
  const ValueInfo& in = g.inputs.at(0);
  std::vector<int64_t> sizes = {batch};
  for (size_t i = 1; i < in.shape.size(); ++i) sizes.push_back(in.shape[i].value);
  if (in.dtype == at::kLong) {
    auto opts = at::TensorOptions().dtype(at::kLong);
    return at::randint(0, 20, sizes, opts);
  }
  return at::rand(sizes);
}

TEST(Zoo, EverySpecBuildsVerifiesAndRuns) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.spec);
    ASSERT_TRUE(is_zoo_spec(c.spec));
    Graph g = build_zoo_model(c.spec, 1);
    EXPECT_EQ(g.opset, 17);
    ASSERT_EQ(g.inputs.size(), 1u);
    EXPECT_EQ(g.inputs[0].name, "input");
    EXPECT_EQ(g.inputs[0].shape.at(0), Dim::sym("N"));
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.outputs[0].name, "logits");
    EXPECT_NO_THROW(g.verify());
    Module m(g);
    for (bool training : {false, true}) {
      m.train(training);
      for (int64_t batch : {2, 3}) {
        auto out = m.forward({example_input(g, batch)});
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].sizes(), at::IntArrayRef({batch, c.classes}))
            << (training ? "train" : "eval");
        EXPECT_TRUE(out[0].isfinite().all().item<bool>());
      }
    }
  }
}

TEST(Zoo, DefaultImageModelsTakeFashionMnistShape) {
  for (const char* spec : {"mlp:784-300-100-10", "lenet5", "cnn", "resnet:1"}) {
    Graph g = build_zoo_model(spec);
    const Shape want = {Dim::sym("N"), 1, 28, 28};
    EXPECT_EQ(g.inputs[0].shape, want) << spec;
    EXPECT_EQ(g.inputs[0].dtype, at::kFloat);
  }
  Graph t = build_zoo_model("transformer:vocab=10,d=8,heads=2,layers=1,classes=2,seq=6");
  EXPECT_EQ(t.inputs[0].dtype, at::kLong);
  EXPECT_EQ(t.inputs[0].shape, (Shape{Dim::sym("N"), 6}));
}

TEST(Zoo, ParameterCountsMatchPyTorch) {
  // torch.nn equivalents: sum(p.numel() for p in model.parameters())
  EXPECT_EQ(build_zoo_model("mlp:784-300-100-10").parameter_count(), 266610);
  EXPECT_EQ(build_zoo_model("lenet5").parameter_count(), 61706);
  // ResNet-20 for one input channel with 1x1 conv + BN shortcuts: stem 176, stage 1 14016,
  // stage 2 51648, stage 3 205696, fc 650 (BatchNorm running statistics are buffers).
  Module m(build_zoo_model("resnet:3"));
  EXPECT_EQ(m.parameter_count(), 272186);
  // conv 288+18432+36864, BN 64+128+128, fc 147712+2570
  EXPECT_EQ(Module(build_zoo_model("cnn")).parameter_count(), 206186);
  // width=16, fc=0: conv 144+4608+9216, BN 2*(16+32+32), classifier 32*3*3*10+10
  EXPECT_EQ(Module(build_zoo_model("cnn,width=16,fc=0")).parameter_count(), 17018);
}

TEST(Zoo, TransformerWeightsAreParametersAndConstantsAreNot) {
  Module m(build_zoo_model("transformer:vocab=30,d=16,heads=4,layers=2,classes=3,seq=6"));
  // embeddings 30*16 + 6*16; per layer 4 projections (16*16+16), 2 LayerNorms (2*16),
  // FFN 16*64+64 and 64*16+16; final LayerNorm 2*16; classifier 16*3+3.
  EXPECT_EQ(m.parameter_count(), 480 + 96 + 2 * (4 * 272 + 64 + 1088 + 1040) + 32 + 51);
  const auto& names = m.parameter_names();
  for (const char* want : {"embed.weight", "pos_embed.weight", "layer1.attn.v.weight",
                           "layer0.ffn.fc2.bias", "final_ln.weight", "classifier.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) EXPECT_NE(n.rfind("const.", 0), 0u) << n;
}

TEST(Zoo, InitialisationFollowsPyTorchDefaults) {
  Graph g = build_zoo_model("cnn", 3);
  const at::Tensor& w = g.initializers.at("fc1.weight");
  const double bound = 1.0 / std::sqrt(static_cast<double>(w.size(1)));
  EXPECT_LE(w.abs().max().item<double>(), bound);
  EXPECT_GT(w.abs().max().item<double>(), 0.95 * bound);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.05 * bound);
  const at::Tensor& conv = g.initializers.at("conv2.weight");  // [64, 32, 3, 3]
  EXPECT_LE(conv.abs().max().item<double>(), 1.0 / std::sqrt(32.0 * 9));
  EXPECT_TRUE(at::equal(g.initializers.at("bn1.weight"), at::ones({32})));
  EXPECT_TRUE(at::equal(g.initializers.at("bn1.bias"), at::zeros({32})));
  EXPECT_TRUE(at::equal(g.initializers.at("bn1.running_mean"), at::zeros({32})));
  EXPECT_TRUE(at::equal(g.initializers.at("bn1.running_var"), at::ones({32})));
}

TEST(Zoo, SameSeedSameWeightsOtherSeedOtherWeights) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.spec);
    Graph a = build_zoo_model(c.spec, 7), b = build_zoo_model(c.spec, 7), d = build_zoo_model(c.spec, 8);
    ASSERT_EQ(a.initializers.size(), b.initializers.size());
    bool any_differs = false;
    for (const auto& [name, t] : a.initializers) {
      EXPECT_TRUE(at::equal(t, b.initializers.at(name))) << name;
      any_differs = any_differs || !at::equal(t, d.initializers.at(name));
    }
    EXPECT_TRUE(any_differs);
  }
}

TEST(Zoo, SeedIsIndependentOfTorchGlobalRng) {
  at::manual_seed(1);
  Graph a = build_zoo_model("lenet5", 5);
  at::manual_seed(2);
  Graph b = build_zoo_model("lenet5", 5);
  EXPECT_TRUE(at::equal(a.initializers.at("conv1.weight"), b.initializers.at("conv1.weight")));
}

TEST(Zoo, TransformerAttentionValuesHavePredictableNames) {
  Graph g = build_zoo_model("transformer:vocab=30,d=16,heads=4,layers=2,classes=3,seq=6", 0);
  Module m(g);
  m.eval();
  auto vals = m.forward_values({example_input(g, 3)}, {"layer0.attn.softmax", "layer1.attn.softmax",
                                                       "layer1.ffn.gelu", "layer1.attn.q"});
  const at::Tensor& p = vals.at("layer1.attn.softmax");
  EXPECT_EQ(p.sizes(), at::IntArrayRef({3, 4, 6, 6}));
  EXPECT_TRUE(at::allclose(p.sum(-1), at::ones({3, 4, 6})));
  EXPECT_EQ(vals.at("layer1.ffn.gelu").sizes(), at::IntArrayRef({3, 6, 64}));
  EXPECT_EQ(vals.at("layer1.attn.q").sizes(), at::IntArrayRef({3, 6, 16}));
  EXPECT_EQ(vals.at("logits").sizes(), at::IntArrayRef({3, 3}));
}

TEST(Zoo, TransformerMatchesAReferenceComputation) {
  // One pre-LN layer recomputed with ATen from the graph's own weights.
  Graph g = build_zoo_model("transformer:vocab=11,d=8,heads=2,layers=1,classes=3,seq=4,ff=12", 4);
  Module m(g);
  m.eval();
  at::Tensor ids = at::randint(0, 11, {2, 4}, at::TensorOptions().dtype(at::kLong));
  at::Tensor got = m.forward({ids})[0];
  auto W = [&](const std::string& n) { return g.initializers.at(n); };
  auto lin = [&](const at::Tensor& x, const std::string& n) {
    return at::matmul(x, W(n + ".weight")) + W(n + ".bias");
  };
  auto ln = [&](const at::Tensor& x, const std::string& n) {
    return at::layer_norm(x, {8}, W(n + ".weight"), W(n + ".bias"), 1e-5);
  };
  at::Tensor x = W("embed.weight").index_select(0, ids.flatten()).view({2, 4, 8}) + W("pos_embed.weight");
  at::Tensor h = ln(x, "layer0.ln1");
  auto heads = [&](const at::Tensor& t) { return t.view({2, 4, 2, 4}).transpose(1, 2); };
  at::Tensor q = heads(lin(h, "layer0.attn.q")), k = heads(lin(h, "layer0.attn.k")),
             v = heads(lin(h, "layer0.attn.v"));
  at::Tensor att = at::softmax(at::matmul(q, k.transpose(-1, -2)) / 2.0, -1);
  at::Tensor ctx = at::matmul(att, v).transpose(1, 2).reshape({2, 4, 8});
  x = x + lin(ctx, "layer0.attn.out");
  at::Tensor f = at::gelu(lin(ln(x, "layer0.ln2"), "layer0.ffn.fc1"));
  x = x + lin(f, "layer0.ffn.fc2");
  at::Tensor pooled = ln(x, "final_ln").mean(1);
  at::Tensor want = at::addmm(W("classifier.bias"), pooled, W("classifier.weight").t());
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << got << want;
}

TEST(Zoo, IsZooSpecTellsSpecsFromPaths) {
  for (const char* s : {"mlp:784-10", "lenet5", "lenet5,classes=3", "cnn", "cnn,in=3", "resnet:3",
                        "transformer:vocab=1"})
    EXPECT_TRUE(is_zoo_spec(s)) << s;
  for (const char* s : {"cnn.onnx", "lenet5.onnx", "mlp.onnx", "models/cnn", "resnet", "", "cnnx"})
    EXPECT_FALSE(is_zoo_spec(s)) << s;
}

TEST(Zoo, BadSpecsThrowInputErrorListingKnownSpecs) {
  for (const char* s :
       {"vgg16", "mlp:", "mlp:784", "mlp:784-x-10", "mlp:784--10", "mlp:784-10,in=3", "mlp:784-10,foo=1",
        "resnet:0", "resnet:abc", "resnet:", "lenet5,foo=1", "lenet5,in=0", "cnn,classes", "cnn,in=2,in=3", "cnn,width=0", "cnn,fc=-1",
        "transformer:", "transformer:vocab=10", "transformer:vocab=10,d=30,heads=4,layers=1,classes=2,seq=4",
        "transformer:vocab=10,d=8,heads=2,layers=1,classes=2,seq=4,norm=mid"}) {
    try {
      build_zoo_model(s);
      ADD_FAILURE() << "no error for '" << s << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(s), std::string::npos) << msg;
      EXPECT_NE(msg.find("transformer:vocab="), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(zoo_help().size(), 5u);
}

// Issue 18, item 4: absurd sizes are refused at once, naming the limit, before anything is
// allocated (resnet:99999 used to start building 300k residual blocks).
TEST(Zoo, AbsurdSpecsAreRefusedBeforeBuilding) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"resnet:99999", "depth 6N+2 = 599996 exceeds the zoo's limit of 2000 layers"},
      {"resnet:9223372036854775807", "exceeds the zoo's limit of 2000 layers"},
      {"mlp:784-1000000000-10", "parameters; the zoo's limit is 1e+09"},
      {"mlp:9223372036854775807-9223372036854775807", "parameters; the zoo's limit is 1e+09"},
      {"transformer:vocab=1000000000,d=64,heads=1,layers=1,classes=2,seq=4", "the zoo's limit is 1e+09"},
      {"transformer:vocab=10,d=8,heads=1,layers=5000,classes=2,seq=4", "layers = 5000 exceeds"},
  };
  for (const auto& [spec, want] : cases) {
    try {
      build_zoo_model(spec);
      ADD_FAILURE() << "no error for '" << spec << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(spec), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  }
  // The limits leave real models alone: ResNet-1202 (N = 200) is within them.
  EXPECT_NO_THROW(build_zoo_model("resnet:200"));
}

}  // namespace
}  // namespace pare::core
