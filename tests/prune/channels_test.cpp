// Structured pruning: for every op with a channel facet, pruning a tiny graph gives the outputs
// of the original graph with the removed channels' consumer weights zeroed (a numerical check,
// not only shapes); the facets cover every registered op; impossible requests are refused.
#include <ATen/core/grad_mode.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/zoo.h"
#include "prune/facets.h"
#include "prune/structured.h"
#include "tests/test_util.h"

using namespace pare;
using namespace pare::core;
using namespace pare::prune;
using pare::testing::expect_input_error;
using pare::testing::expect_option_error;

namespace {

using Ints = std::vector<int64_t>;

// Builds tiny graphs: input "x" [N, 4, 6, 6] unless set otherwise; weights random but seeded.
struct Tiny {
  Graph g;
  explicit Tiny(Shape in = {Dim::sym("N"), 4, 6, 6}, at::ScalarType t = at::kFloat) {
    at::manual_seed(7);
    g.inputs.push_back({"x", t, std::move(in)});
  }
  std::string init(const std::string& name, at::Tensor t) {
    g.initializers[name] = std::move(t);
    return name;
  }
  std::string node(const std::string& op, std::vector<std::string> in, const std::string& name,
                   std::map<std::string, AttrValue> attrs = {}) {
    g.add_node(op, std::move(in), {name}, std::move(attrs), name);
    return name;
  }
  std::string conv(const std::string& name, const std::string& x, int64_t cin, int64_t cout, int64_t group = 1,
                   int64_t k = 3) {
    return node("Conv", {x, init(name + ".w", at::randn({cout, cin / group, k, k}) * 0.3), init(name + ".b", at::randn({cout}))},
                name, {{"pads", Ints{k / 2, k / 2, k / 2, k / 2}}, {"group", group}});
  }
  // 1x1 head conv to 3 channels: the graph output (its group is blocked), consumer of `cin`.
  void head(const std::string& x, int64_t cin) {
    node("Conv", {x, init("head.w", at::randn({3, cin, 1, 1})), init("head.b", at::randn({3}))}, "y");
    out();
  }
  void out(const std::string& y = "y") { g.outputs.push_back({y, at::kFloat, {}, false}); }
};

// Zeroes slices c * per .. c * per + per - 1 along `axis` of initializer `w` for each removed c.
void zero(Graph& g, const std::string& w, int64_t axis, const Ints& removed, int64_t per = 1, int64_t offset = 0) {
  at::Tensor t = g.initializers.at(w).clone();
  for (int64_t c : removed) t.narrow(axis, offset + c * per, per).zero_();
  g.initializers[w] = t;
}

Ints removed_of(const GroupResult& gr) {
  Ints r;
  std::set<int64_t> k(gr.kept.begin(), gr.kept.end());
  for (int64_t c = 0; c < gr.before; ++c)
    if (!k.count(c)) r.push_back(c);
  return r;
}

const GroupResult& group_of(const ChannelPruneResult& r, const std::string& source) {
  for (auto& gr : r.groups)
    for (auto& s : gr.sources)
      if (s == source) return gr;
  throw std::runtime_error("no group with source " + source);
}

at::Tensor input_for(const Graph& g, int64_t n = 3) {
  const ValueInfo& in = g.inputs[0];
  std::vector<int64_t> s;
  for (auto& d : in.shape) s.push_back(d.is_fixed() ? d.value : n);
  if (in.dtype == at::kLong) return at::randint(0, 10, s, at::kLong);
  return at::randn(s);
}

at::Tensor run(const Graph& g, const at::Tensor& x) {
  Module m(g);
  m.eval();
  at::NoGradGuard ng;
  return m.forward({x})[0];
}

// The test ops of tests/test_util.h, registered at static initialisation: before prune's facet
// provider, which attaches to them all the same.
const bool kSquareRegistered = (pare::testing::register_test_ops(), true);

// The op types of every graph expect_matches_zeroed checked, while the coverage test records.
std::set<std::string>* g_checked_ops = nullptr;

// The numeric cases: each is a test of its own and is also run, recording, by
// ChannelFacets.EverySupportedOpHasANumericCase.
std::vector<std::pair<std::string, void (*)()>>& numeric_cases() {
  static std::vector<std::pair<std::string, void (*)()>> cases;
  return cases;
}
#define NUMERIC_CASE(name)                                                                        \
  static void name##_body();                                                                      \
  static const bool name##_registered = (numeric_cases().push_back({#name, &name##_body}), true); \
  TEST(PruneChannels, name) { name##_body(); }                                                    \
  static void name##_body()

// Prunes half of every group, then checks: the groups named in `sources` lost channels, and the
// pruned graph computes what `zero_ref` makes of the original (zeroing the consumers of the
// removed channels), which differs from the original itself.
void expect_matches_zeroed(const Graph& g, const std::vector<std::string>& sources,
                           const std::function<void(Graph&, const ChannelPruneResult&)>& zero_ref,
                           ChannelOptions opts = ChannelOptions().sparsity(0.5)) {
  if (g_checked_ops)
    for (auto& n : g.nodes) g_checked_ops->insert(n.op_type);
  ChannelPruneResult r = prune_channels(g, opts);
  for (auto& s : sources) {
    const GroupResult& gr = group_of(r, s);
    ASSERT_FALSE(gr.blocked) << s << ": " << gr.reason << "\n" << r.report();
    ASSERT_LT(gr.after, gr.before) << s;
  }
  EXPECT_LT(r.graph.parameter_count(), g.parameter_count());
  Graph ref = g;
  zero_ref(ref, r);
  at::manual_seed(11);
  at::Tensor x = input_for(g);
  at::Tensor want = run(ref, x), got = run(r.graph, x), orig = run(g, x);
  ASSERT_EQ(want.sizes(), got.sizes());
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << "max diff " << (got - want).abs().max().item<float>()
                                                   << "\n" << r.report();
  EXPECT_FALSE(at::allclose(orig, want, 1e-4, 1e-5)) << "zeroing the removed channels changed nothing";
  // A valid ONNX model (checker), unless it holds the test's own op, which ONNX does not know.
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op_type == "PareTestSquare"; }))
    EXPECT_NO_THROW(serialize_onnx(r.graph));
}

// conv a (4 -> 8) -> [body] -> head (8 -> 3): removed channels of a are zeroed in head.w.
void expect_body(const std::function<std::string(Tiny&, const std::string&)>& body) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  t.head(body(t, a), 8);
  expect_matches_zeroed(t.g, {"a"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "head.w", 1, removed_of(group_of(r, "a")));
  });
}

}  // namespace

TEST(ChannelFacets, EveryRegisteredOpHasOneOrIsMarkedUnsupported) {
  const OpRegistry& reg = prune_registry();
  for (const auto& name : reg.names())
    if (name != "PareTestOpaque")  // declares nothing on purpose: refused by name (below)
      EXPECT_TRUE(reg.get(name).has_facet(kChannelFacet)) << name;
}

// An op whose registry entry declares nothing is refused, naming the op and the node.
TEST(PruneChannels, AnOpThatDeclaresNothingIsRefusedByName) {
  ASSERT_TRUE(kSquareRegistered);
  Tiny t;
  t.head(t.node("PareTestOpaque", {t.conv("a", "x", 4, 8)}, "op"), 8);
  expect_input_error([&] { prune_channels(t.g, ChannelOptions().sparsity(0.5)); },
                     {"PareTestOpaque", "'op'", "declares no elementwise, reduction or pooling traits"});
}

// Each supported op appears in a graph that one of the numeric cases below checks: a new facet
// needs a new case. (Runs every case again, recording the ops of the graphs it checks.)
TEST(ChannelFacets, EverySupportedOpHasANumericCase) {
  std::set<std::string> checked;
  g_checked_ops = &checked;
  for (auto& [name, run_case] : numeric_cases()) {
    SCOPED_TRACE(name);
    run_case();
  }
  g_checked_ops = nullptr;
  // Shape and Size read only sizes: they move no channel and constrain none.
  checked.insert({"Shape", "Size"});
  const OpRegistry& reg = prune_registry();
  for (const auto& name : reg.names())
    if (reg.get(name).has_facet(kChannelFacet) && reg.get(name).facet<ChannelFacet>(kChannelFacet).supported)
      EXPECT_TRUE(checked.count(name)) << name << " has a channel facet but no numeric case";
}

NUMERIC_CASE(ConvToConv) {
  expect_body([](Tiny& t, const std::string& a) { return t.node("Relu", {a}, "r"); });
}

// A new op declared elementwise in its registry entry, and nothing else, is pruned through.
NUMERIC_CASE(AnOpWithTraitsOnlyIsHandled) {
  ASSERT_TRUE(kSquareRegistered);
  expect_body([](Tiny& t, const std::string& a) { return t.node("PareTestSquare", {a}, "op"); });
}

NUMERIC_CASE(UnaryElementwiseOps) {
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Erf", "Sin", "Cos", "Floor", "Ceil",
                         "Round", "Sign", "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Softplus", "Identity",
                         "Clip", "Dropout", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Selu", "Celu",
                         "ThresholdedRelu", "Shrink", "Softsign"}) {
    SCOPED_TRACE(op);
    expect_body([op](Tiny& t, const std::string& a) { return t.node(op, {a}, "op"); });
  }
  for (const char* op : {"Log", "Sqrt", "Reciprocal", "Asin", "Acos", "Atanh"}) {
    SCOPED_TRACE(op);
    // Through a Sigmoid first, so they see (0, 1).
    expect_body([op](Tiny& t, const std::string& a) { return t.node(op, {t.node("Sigmoid", {a}, "s")}, "op"); });
  }
  SCOPED_TRACE("Acosh");  // on exp(|x|) >= 1
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("Acosh", {t.node("Exp", {t.node("Abs", {a}, "abs")}, "exp")}, "op");
  });
  SCOPED_TRACE("Cast");
  expect_body([](Tiny& t, const std::string& a) { return t.node("Cast", {a}, "op", {{"to", int64_t{1}}}); });
}

// PRelu as exporters write it: a learned slope per channel, [C, 1, 1], sliced with the channels.
NUMERIC_CASE(PReluSlopePerChannel) {
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("PRelu", {a, t.init("slope", at::rand({8, 1, 1}))}, "op");
  });
}

NUMERIC_CASE(BinaryElementwiseOpsJoinTheirGroups) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Sum", "Mean", "Max", "Min", "PRelu"}) {
    SCOPED_TRACE(op);
    Tiny t;
    std::string a = t.node("Sigmoid", {t.conv("a", "x", 4, 8)}, "sa");
    std::string b = t.node("Sigmoid", {t.conv("b", "x", 4, 8)}, "sb");
    std::map<std::string, AttrValue> attrs;
    if (std::string(op) == "Mod") attrs["fmod"] = int64_t{1};
    t.head(t.node(op, {a, b}, "op", attrs), 8);
    expect_matches_zeroed(t.g, {"a", "b"}, [](Graph& ref, const ChannelPruneResult& r) {
      EXPECT_EQ(&group_of(r, "a"), &group_of(r, "b"));
      zero(ref, "head.w", 1, removed_of(group_of(r, "a")));
    });
  }
}

NUMERIC_CASE(BroadcastConstantIsSliced) {
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("Add", {a, t.init("shift", at::randn({8, 1, 1}))}, "op");
  });
}

NUMERIC_CASE(ComparisonsAndLogicThroughWhere) {
  Tiny t;
  std::string a = t.node("Sigmoid", {t.conv("a", "x", 4, 8)}, "sa");
  std::string b = t.node("Sigmoid", {t.conv("b", "x", 4, 8)}, "sb");
  std::string half = t.init("half", at::scalar_tensor(0.5));
  std::string c1 = t.node("Less", {a, b}, "lt");
  std::string c2 = t.node("Or", {t.node("Greater", {a, half}, "gt"), t.node("Equal", {a, b}, "eq")}, "or");
  std::string c3 = t.node("Xor", {t.node("LessOrEqual", {a, half}, "le"), t.node("GreaterOrEqual", {b, half}, "ge")}, "xor");
  std::string c = t.node("And", {t.node("Not", {c1}, "not"), t.node("Or", {c2, c3}, "or2")}, "and");
  t.head(t.node("Where", {c, a, b}, "where"), 8);
  expect_matches_zeroed(t.g, {"a", "b"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "head.w", 1, removed_of(group_of(r, "a")));
  });
}

NUMERIC_CASE(BatchNormParametersAreSliced) {
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("BatchNormalization",
                  {a, t.init("bn.s", at::rand({8}) + 0.5), t.init("bn.b", at::randn({8})),
                   t.init("bn.m", at::randn({8})), t.init("bn.v", at::rand({8}) + 0.5)},
                  "bn");
  });
}

NUMERIC_CASE(LayerNormOverTrailingDimsKeepsChannelsFree) {
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("LayerNormalization", {a, t.init("ln.s", at::rand({6}) + 0.5), t.init("ln.b", at::randn({6}))}, "ln",
                  {{"axis", int64_t{-1}}});
  });
}

NUMERIC_CASE(RMSNormOverTrailingDimsKeepsChannelsFree) {
  expect_body([](Tiny& t, const std::string& a) {
    return t.node("RMSNormalization", {a, t.init("rms.s", at::rand({6}) + 0.5)}, "rms", {{"axis", int64_t{-1}}});
  });
}

NUMERIC_CASE(PoolingOps) {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) {
    SCOPED_TRACE(op);
    expect_body([op](Tiny& t, const std::string& a) {
      std::map<std::string, AttrValue> attrs;
      if (std::string(op) == "MaxPool" || std::string(op) == "AveragePool") attrs["kernel_shape"] = Ints{2, 2};
      return t.node(op, {a}, "pool", attrs);
    });
  }
}

NUMERIC_CASE(SoftmaxAndReductionsAlongOtherAxes) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    expect_body([op](Tiny& t, const std::string& a) { return t.node(op, {a}, "op", {{"axis", int64_t{-1}}}); });
  }
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum"}) {
    SCOPED_TRACE(op);
    expect_body([op](Tiny& t, const std::string& a) {
      std::string s = t.node("Sigmoid", {a}, "s");
      if (std::string(op) == "ReduceSum")  // axes is an input since opset 13
        return t.node(op, {s, t.init("axes", at::tensor(Ints{3}))}, "op", {{"keepdims", int64_t{1}}});
      return t.node(op, {s}, "op", {{"axes", Ints{3}}, {"keepdims", int64_t{1}}});
    });
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    SCOPED_TRACE(op);
    expect_body([op](Tiny& t, const std::string& a) {
      std::string i = t.node(op, {a}, "op", {{"axis", int64_t{3}}, {"keepdims", int64_t{1}}});
      return t.node("Cast", {i}, "f", {{"to", int64_t{1}}});
    });
  }
}

NUMERIC_CASE(TransposeReshapeSqueezeUnsqueeze) {
  expect_body([](Tiny& t, const std::string& a) {
    std::string y = t.node("Transpose", {a}, "t1", {{"perm", Ints{0, 2, 3, 1}}});
    return t.node("Transpose", {y}, "t2", {{"perm", Ints{0, 3, 1, 2}}});
  });
  // Shape constants with the channel count written out are rewritten.
  expect_body([](Tiny& t, const std::string& a) {
    std::string y = t.node("Reshape", {a, t.init("s1", at::tensor(Ints{0, 8, 36}))}, "r1");
    return t.node("Reshape", {y, t.init("s2", at::tensor(Ints{0, 8, 6, 6}))}, "r2");
  });
  expect_body([](Tiny& t, const std::string& a) {
    std::string y = t.node("Unsqueeze", {a, t.init("ax", at::tensor(Ints{2}))}, "u");
    return t.node("Squeeze", {y, t.init("ax2", at::tensor(Ints{2}))}, "sq");
  });
}

NUMERIC_CASE(ConcatKeepsEachPartsGroup) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8), b = t.conv("b", "x", 4, 6);
  t.head(t.node("Concat", {a, b}, "cat", {{"axis", int64_t{1}}}), 14);
  expect_matches_zeroed(t.g, {"a", "b"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "head.w", 1, removed_of(group_of(r, "a")));
    zero(ref, "head.w", 1, removed_of(group_of(r, "b")), 1, 8);
  });
}

NUMERIC_CASE(ResidualAddJoinsBranches) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  std::string b = t.conv("b", t.node("Relu", {a}, "r1"), 8, 8);
  std::string s = t.node("Add", {b, a}, "add");
  t.head(t.node("Relu", {s}, "r2"), 8);
  expect_matches_zeroed(t.g, {"a", "b"}, [](Graph& ref, const ChannelPruneResult& r) {
    EXPECT_EQ(&group_of(r, "a"), &group_of(r, "b"));
    Ints rm = removed_of(group_of(r, "a"));
    zero(ref, "head.w", 1, rm);
    zero(ref, "b.w", 1, rm);  // b reads a's channels too
  });
}

NUMERIC_CASE(DepthwiseConvFollowsItsInput) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  std::string dw = t.conv("dw", t.node("Relu", {a}, "r"), 8, 16, /*group=*/8);  // depth multiplier 2
  t.head(dw, 16);
  expect_matches_zeroed(t.g, {"a"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "head.w", 1, removed_of(group_of(r, "a")), 2);
  });
  ChannelPruneResult r = prune_channels(t.g, ChannelOptions().sparsity(0.5));
  for (auto& n : r.graph.nodes)
    if (n.name == "dw") EXPECT_EQ(n.attr_int("group", 0), 4);
}

NUMERIC_CASE(GroupedConvIsLeftWhole) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  t.head(t.conv("g", a, 8, 8, /*group=*/2), 8);
  ChannelGraph cg(t.g);
  auto groups = cg.groups();
  ASSERT_EQ(groups.size(), 2u);  // a's channels, the head's
  EXPECT_EQ(groups[0].sources, (std::vector<std::string>{"a"}));
  EXPECT_TRUE(groups[0].blocked);
  EXPECT_NE(groups[0].reason.find("grouped"), std::string::npos) << groups[0].reason;
  expect_input_error([&] { prune_channels(t.g, ChannelOptions()); }, {"no channels", "grouped"});
}

NUMERIC_CASE(ConvTranspose) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  std::string u = t.node("ConvTranspose", {a, t.init("u.w", at::randn({8, 6, 2, 2}) * 0.3), t.init("u.b", at::randn({6}))},
                         "u", {{"strides", Ints{2, 2}}});
  t.head(t.node("Relu", {u}, "r"), 6);
  expect_matches_zeroed(t.g, {"a", "u"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "u.w", 0, removed_of(group_of(r, "a")));
    zero(ref, "head.w", 1, removed_of(group_of(r, "u")));
  });
}

NUMERIC_CASE(FlattenIntoGemm) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  std::string f = t.node("Flatten", {t.node("Relu", {a}, "r")}, "flat", {{"axis", int64_t{1}}});
  t.node("Gemm", {f, t.init("fc.w", at::randn({5, 8 * 36}) * 0.1), t.init("fc.b", at::randn({5}))}, "y",
         {{"transB", int64_t{1}}});
  t.out();
  expect_matches_zeroed(t.g, {"a"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "fc.w", 1, removed_of(group_of(r, "a")), 36);  // each channel is 36 features
  });
}

NUMERIC_CASE(GemmAndMatMulHiddenUnits) {
  for (int64_t trans : {0, 1}) {
    Tiny t({Dim::sym("N"), 16});
    at::Tensor w = at::randn({12, 16}) * 0.3;
    std::string h = t.node("Gemm", {"x", t.init("fc1.w", trans ? w : w.t().contiguous()), t.init("fc1.b", at::randn({12}))},
                           "fc1", {{"transB", trans}});
    t.node("Gemm", {t.node("Relu", {h}, "r"), t.init("fc2.w", at::randn({3, 12})), t.init("fc2.b", at::randn({3}))}, "y",
           {{"transB", int64_t{1}}});
    t.out();
    expect_matches_zeroed(t.g, {"fc1"}, [](Graph& ref, const ChannelPruneResult& r) {
      zero(ref, "fc2.w", 1, removed_of(group_of(r, "fc1")));
    });
  }
  Tiny t({Dim::sym("N"), 5, 16});
  std::string h = t.node("MatMul", {"x", t.init("w1", at::randn({16, 12}) * 0.3)}, "mm1");
  h = t.node("Relu", {t.node("Add", {h, t.init("b1", at::randn({12}))}, "add1")}, "r");
  t.node("MatMul", {h, t.init("w2", at::randn({12, 3}))}, "y");
  t.out();
  expect_matches_zeroed(t.g, {"mm1"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "w2", 0, removed_of(group_of(r, "mm1")));
  });
}

NUMERIC_CASE(AttentionHeadsOfTheZooTransformer) {
  Graph g = build_zoo_model("transformer:vocab=20,d=8,heads=4,layers=2,classes=3,seq=5", 3);
  // Heads only: the feed-forward groups are excluded.
  auto opts = ChannelOptions().sparsity(0.5).exclude({"layer0.ffn.fc1.matmul", "layer1.ffn.fc1.matmul"});
  expect_matches_zeroed(
      g, {"layer0.attn.q.matmul", "layer1.attn.v.matmul"},
      [](Graph& ref, const ChannelPruneResult& r) {
        for (const char* l : {"layer0", "layer1"}) {
          const GroupResult& gr = group_of(r, std::string(l) + ".attn.q.matmul");
          EXPECT_EQ(gr.before, 4);  // the group is the heads, not the 8 dims
          EXPECT_EQ(&gr, &group_of(r, std::string(l) + ".attn.k.matmul"));
          EXPECT_EQ(&gr, &group_of(r, std::string(l) + ".attn.v.matmul"));
          zero(ref, std::string(l) + ".attn.out.weight", 0, removed_of(gr), 2);  // d/heads = 2 rows per head
        }
      },
      opts);
  // With the feed-forward layers pruned too.
  ChannelPruneResult r = prune_channels(g, ChannelOptions().sparsity(0.5));
  EXPECT_EQ(group_of(r, "layer0.ffn.fc1.matmul").after, 16);
  EXPECT_TRUE(group_of(r, "classifier").blocked);
}

TEST(PruneChannels, ZooModelsShrinkAndStayValid) {
  for (const char* spec : {"cnn", "resnet:1", "lenet5", "mlp:784-300-100-10"}) {
    SCOPED_TRACE(spec);
    Graph g = build_zoo_model(spec, 1);
    ChannelPruneResult r = prune_channels(g, ChannelOptions().sparsity(0.5));
    EXPECT_LT(r.graph.parameter_count(), g.parameter_count() * 0.5);
    EXPECT_NO_THROW(serialize_onnx(r.graph));
    at::Tensor x = at::rand({2, 1, 28, 28});
    EXPECT_EQ(run(r.graph, x).sizes(), (std::vector<int64_t>{2, 10}));
  }
}

TEST(PruneChannels, ImportanceCriteriaChooseTheChannels) {
  Tiny t;
  std::string a = t.conv("a", "x", 4, 8);
  t.head(t.node("BatchNormalization",
                {a, t.init("bn.s", at::tensor({1.f, 9.f, 2.f, 8.f, 3.f, 7.f, 4.f, 6.f})), t.init("bn.b", at::zeros({8})),
                 t.init("bn.m", at::zeros({8})), t.init("bn.v", at::ones({8}))},
                "bn"),
         8);
  auto r = prune_channels(t.g, ChannelOptions().sparsity(0.5).importance(Importance::kBnScale));
  EXPECT_EQ(group_of(r, "a").kept, (Ints{1, 3, 5, 7}));
  // L1 of a's kernels (plus bias): make channel 0 the largest.
  t.g.initializers["a.w"][0].mul_(100);
  r = prune_channels(t.g, ChannelOptions().sparsity(0.875).importance(Importance::kL1));
  EXPECT_EQ(group_of(r, "a").kept, (Ints{0}));
  // Taylor: the scores given decide.
  TaylorScores ts;
  ts["a.w"] = at::zeros({8, 4, 3, 3});
  ts["a.w"][6].fill_(1.0);
  r = prune_channels(t.g, ChannelOptions().sparsity(0.875).importance(Importance::kTaylor).taylor(&ts));
  EXPECT_EQ(group_of(r, "a").kept, (Ints{6}));
}

TEST(PruneChannels, ImpossibleRequestsAreInputErrors) {
  Graph g = build_zoo_model("cnn", 1);
  expect_input_error([&] { prune_channels(g, ChannelOptions().sparsity(1.0)); }, {"remove every one of", "channels of"});
  expect_option_error([&] { prune_channels(g, ChannelOptions().sparsity(1.5)); }, "sparsity", {"sparsity must", "1.5"});
  expect_input_error([&] { prune_channels(g, ChannelOptions().exclude({"conv9"})); }, {"'conv9'", "no node"});
  expect_input_error([&] { prune_channels(g, ChannelOptions().exclude({"relu1"})); }, {"'relu1'", "creates no channels", "conv1"});
  // Nothing prunable: a single Gemm whose output is the graph output.
  Tiny t({Dim::sym("N"), 4});
  t.node("Gemm", {"x", t.init("w", at::randn({3, 4})), t.init("b", at::randn({3}))}, "y", {{"transB", int64_t{1}}});
  t.out();
  expect_input_error([&] { prune_channels(t.g, ChannelOptions()); }, {"no channels", "graph output"});
}

// Issue 18, item 3: torch.onnx.export de-duplicates equal constants (a fresh model's zero biases)
// into one initializer read through Identity nodes. Each layer must still shrink on its own, and
// copies that stay equal are one tensor again.
TEST(PruneChannels, EqualConstantsBehindIdentityShrinkPerLayer) {
  Tiny t;
  // a (4 -> 8) and b (8 -> 8) with zero biases as torch exports them: b's is Identity(a's).
  t.node("Conv", {"x", t.init("a.w", at::randn({8, 4, 3, 3}) * 0.3), t.init("a.b", at::zeros({8}))}, "a",
         {{"pads", Ints{1, 1, 1, 1}}});
  t.node("Identity", {"a.b"}, "b.b");
  t.node("Relu", {"a"}, "ra");
  t.node("Conv", {"ra", t.init("b.w", at::randn({8, 8, 3, 3}) * 0.3), "b.b"}, "b", {{"pads", Ints{1, 1, 1, 1}}});
  t.node("Relu", {"b"}, "rb");
  t.head("rb", 8);
  // Make the two layers keep different channels.
  t.g.initializers["a.w"].narrow(0, 0, 4).mul_(0.01);
  t.g.initializers["b.w"].narrow(0, 4, 4).mul_(0.01);
  expect_matches_zeroed(t.g, {"a", "b"}, [](Graph& ref, const ChannelPruneResult& r) {
    zero(ref, "b.w", 1, removed_of(group_of(r, "a")));
    zero(ref, "head.w", 1, removed_of(group_of(r, "b")));
  });
  ChannelPruneResult r = prune_channels(t.g, ChannelOptions().sparsity(0.5));
  EXPECT_EQ(group_of(r, "a").kept, (Ints{4, 5, 6, 7}));
  EXPECT_EQ(group_of(r, "b").kept, (Ints{0, 1, 2, 3}));
  // The two zero biases of 4 channels are equal again: stored once, no Identity left.
  int biases = 0;
  for (auto& [name, w] : r.graph.initializers) biases += w.dim() == 1 && w.size(0) == 4;
  EXPECT_EQ(biases, 1);
  for (auto& n : r.graph.nodes) EXPECT_NE(n.op_type, "Identity");
  ASSERT_EQ(r.notes.size(), 1u) << r.report();
  EXPECT_NE(r.notes[0].find("copied per reader"), std::string::npos) << r.notes[0];
}

// A weight read directly by two nodes is tied: it stays one tensor while its readers can shrink
// together, and is cloned per reader, with a note, where tying would keep a group whole. (A
// tensor of one repeated value read by several nodes is an equal constant, copied per reader.)
TEST(PruneChannels, TiedWeightsStayTiedUnlessTyingBlocksAGroup) {
  {
    // Two branches from x, both scaled by the same per-channel constant s, then added.
    Tiny t;
    std::string a = t.conv("a", "x", 4, 8), b = t.conv("b", "x", 4, 8);
    t.init("s", at::rand({1, 8, 1, 1}) + 0.5);
    t.node("Mul", {a, "s"}, "sa");
    t.node("Mul", {b, "s"}, "sb");
    t.node("Add", {"sa", "sb"}, "sum");
    t.head("sum", 8);
    ChannelPruneResult r = prune_channels(t.g, ChannelOptions().sparsity(0.5));
    EXPECT_FALSE(group_of(r, "a").blocked) << r.report();
    EXPECT_TRUE(r.notes.empty()) << r.report();
    EXPECT_EQ(r.graph.initializers.at("s").size(1), 4);
  }
  {
    // The same constant scales a's channels and the 8 channels of the graph output y2, which can
    // never shrink: tied, a would be kept whole; cloned, a shrinks and y2 keeps its own copy.
    Tiny t;
    std::string a = t.conv("a", "x", 4, 8);
    t.init("s", at::rand({1, 8, 1, 1}) + 0.5);
    t.node("Mul", {a, "s"}, "sa");
    t.head("sa", 8);
    std::string c = t.conv("c", "x", 4, 8);
    t.node("Mul", {c, "s"}, "y2");
    t.out("y2");
    ChannelPruneResult r = prune_channels(t.g, ChannelOptions().sparsity(0.5));
    EXPECT_FALSE(group_of(r, "a").blocked) << r.report();
    EXPECT_EQ(group_of(r, "a").after, 4);
    ASSERT_EQ(r.notes.size(), 1u) << r.report();
    EXPECT_NE(r.notes[0].find("'s'"), std::string::npos) << r.notes[0];
    EXPECT_NE(r.report().find("cloned per reader (2 tensors now)"), std::string::npos) << r.report();
  }
}
