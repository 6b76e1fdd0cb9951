// The model zoo: parses a spec string and builds an ONNX-shaped Graph with PyTorch's default
// initialisation, drawn from a generator seeded by the caller.
#include "core/zoo.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/error.h"

namespace pare::core {

namespace {

const char* const kHelp[] = {
    "mlp:784-300-100-10[,in=C,hw=H]   Flatten, then Gemm+Relu layers (no Relu after the last); "
    "input [N,1,28,28] for 784, [N,3,32,32] for 3072, else [N,first]",
    "lenet5[,in=1,hw=28,classes=10]    LeNet-5: Conv 6@5x5 pad 2, pool, Conv 16@5x5, pool, "
    "Gemm 120-84-classes",
    "cnn[,in=1,hw=28,classes=10,width=32,fc=256]   BatchNorm CNN: 3 x (Conv3x3 W/2W/2W, BN, Relu, "
    "MaxPool 2), Gemm fc, Dropout 0.3, Gemm classes (fc=0: straight to the classifier, no Dropout)",
    "resnet:N[,in=1,hw=28,classes=10]  CIFAR-style ResNet-(6N+2): stages 16/32/64, N BasicBlocks "
    "each",
    "transformer:vocab=V,d=D,heads=H,layers=L,classes=C,seq=S[,ff=F,norm=pre|post]   encoder "
    "classifier on int64 ids [N,S]",
};

std::string help_text() {
  std::string s;
  for (const char* line : kHelp) s += std::string("\n  ") + line;
  return s;
}

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  throw InputError("bad zoo model spec '" + spec + "': " + why + "; known specs:" + help_text());
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

int64_t parse_positive(const std::string& spec, const std::string& what, const std::string& s, int64_t least = 1) {
  char* end = nullptr;
  errno = 0;
  long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || v < least)
    bad_spec(spec, what + (least == 0 ? " must be an integer >= 0" : " must be a positive integer") + ", got '" + s + "'");
  return v;
}

// "key=value" options after the head of a spec; unknown keys are an error.
struct Options {
  std::string spec;
  std::map<std::string, std::string> kv;

  Options(const std::string& spec_, const std::vector<std::string>& items,
          const std::vector<std::string>& allowed)
      : spec(spec_) {
    for (const auto& it : items) {
      auto eq = it.find('=');
      if (eq == std::string::npos || eq == 0) bad_spec(spec, "expected key=value, got '" + it + "'");
      std::string k = it.substr(0, eq);
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == k;
      if (!ok) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        bad_spec(spec, "unknown option '" + k + "' (this model takes " + list + ")");
      }
      if (kv.count(k)) bad_spec(spec, "option '" + k + "' given twice");
      kv[k] = it.substr(eq + 1);
    }
  }
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  int64_t get_int(const std::string& k, int64_t def, int64_t least = 1) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : parse_positive(spec, "option '" + k + "'", it->second, least);
  }
  int64_t require_int(const std::string& k) const {
    if (!has(k)) bad_spec(spec, "missing option '" + k + "'");
    return get_int(k, 0);
  }
  std::string get_str(const std::string& k, const std::string& def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
};

// Limits on what a spec may ask for, checked before anything is allocated: above any model one
// trains from the zoo (ResNet-1202, N = 200, has 1202 layers; a billion float32 parameters are
// 4 GB), far below what would exhaust memory or build for hours on a typo such as resnet:99999.
constexpr int64_t kMaxZooLayers = 2000;
constexpr double kMaxZooParameters = 1e9;

void check_depth(const std::string& spec, const std::string& what, double layers) {
  if (layers > kMaxZooLayers) {
    std::ostringstream os;
    os << what << " = " << std::setprecision(15) << layers << " exceeds the zoo's limit of "
       << kMaxZooLayers << " layers";
    bad_spec(spec, os.str());
  }
}

// Builds a graph while drawing weights from one seeded generator, in construction order. Every
// tensor it makes counts against kMaxZooParameters before it is allocated.
class Builder {
 public:
  Builder(const std::string& spec, uint64_t seed)
      : spec_(spec), gen_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  Graph g;

  at::Tensor uniform(at::IntArrayRef shape, double bound) {
    return empty(shape).uniform_(-bound, bound, gen_);
  }
  at::Tensor normal(at::IntArrayRef shape, double std) {
    return empty(shape).normal_(0.0, std, gen_);
  }
  at::Tensor ones(at::IntArrayRef shape) { return empty(shape).fill_(1.0); }
  at::Tensor zeros(at::IntArrayRef shape) { return empty(shape).zero_(); }
  std::string init(const std::string& name, at::Tensor t) {
    PARE_ASSERT(!g.initializers.count(name), "initializer '", name, "' defined twice");
    g.initializers[name] = std::move(t);
    return name;
  }
  // A constant shared by every node that needs it.
  std::string constant(const std::string& name, at::Tensor t) {
    if (!g.initializers.count(name)) g.initializers[name] = std::move(t);
    return name;
  }
  std::string scalar(const std::string& name, float v) { return constant(name, at::scalar_tensor(v, at::kFloat)); }

  // One node whose output value and node name are both `name`.
  std::string node(const std::string& op, std::vector<std::string> in, const std::string& name,
                   std::map<std::string, AttrValue> attrs = {}) {
    g.add_node(op, std::move(in), {name}, std::move(attrs), name);
    return name;
  }

  // nn.Conv2d: kaiming_uniform(a=sqrt(5)) weight, bound 1/sqrt(fan_in) for both.
  std::string conv(const std::string& name, const std::string& x, int64_t cin, int64_t cout,
                   int64_t k, int64_t stride, int64_t pad, bool bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(cin * k * k));
    std::vector<std::string> in = {x, init(name + ".weight", uniform({cout, cin, k, k}, bound))};
    if (bias) in.push_back(init(name + ".bias", uniform({cout}, bound)));
    return node("Conv", in, name,
                {{"kernel_shape", std::vector<int64_t>{k, k}},
                 {"strides", std::vector<int64_t>{stride, stride}},
                 {"pads", std::vector<int64_t>{pad, pad, pad, pad}}});
  }
  // nn.BatchNorm2d: weight 1, bias 0, running mean 0, var 1; PyTorch momentum 0.1 = ONNX 0.9.
  std::string bn(const std::string& name, const std::string& x, int64_t c) {
    return node("BatchNormalization",
                {x, init(name + ".weight", ones({c})), init(name + ".bias", zeros({c})),
                 init(name + ".running_mean", zeros({c})),
                 init(name + ".running_var", ones({c}))},
                name, {{"epsilon", 1e-5f}, {"momentum", 0.9f}});
  }
  // nn.Linear as Gemm(x, W[out,in], b, transB=1).
  std::string gemm(const std::string& name, const std::string& x, int64_t in, int64_t out,
                   const std::string& out_name = "") {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    std::string w = init(name + ".weight", uniform({out, in}, bound));
    std::string b = init(name + ".bias", uniform({out}, bound));
    const std::string value = out_name.empty() ? name : out_name;
    g.add_node("Gemm", {x, w, b}, {value}, {{"transB", int64_t{1}}}, name);
    return value;
  }
  // nn.Linear on [..., in] as MatMul(x, W[in,out]) + b (the form PyTorch exports).
  std::string linear(const std::string& name, const std::string& x, int64_t in, int64_t out) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    // Drawn as PyTorch's [out, in] and stored transposed, so the numbers match nn.Linear's.
    std::string w = init(name + ".weight", uniform({out, in}, bound).t().contiguous());
    std::string b = init(name + ".bias", uniform({out}, bound));
    std::string mm = node("MatMul", {x, w}, name + ".matmul");
    return node("Add", {mm, b}, name);
  }
  std::string relu(const std::string& name, const std::string& x) { return node("Relu", {x}, name); }
  std::string maxpool(const std::string& name, const std::string& x, int64_t k) {
    return node("MaxPool", {x}, name,
                {{"kernel_shape", std::vector<int64_t>{k, k}},
                 {"strides", std::vector<int64_t>{k, k}}});
  }
  std::string flatten(const std::string& name, const std::string& x) {
    return node("Flatten", {x}, name, {{"axis", int64_t{1}}});
  }
  std::string layer_norm(const std::string& name, const std::string& x, int64_t d) {
    return node("LayerNormalization",
                {x, init(name + ".weight", ones({d})), init(name + ".bias", zeros({d}))},
                name, {{"axis", int64_t{-1}}, {"epsilon", 1e-5f}});
  }

  void image_input(int64_t c, int64_t hw) {
    g.inputs.push_back({"input", at::kFloat, {Dim::sym("N"), c, hw, hw}});
  }
  void logits_output(int64_t classes) {
    g.outputs.push_back({"logits", at::kFloat, {Dim::sym("N"), classes}});
  }

 private:
  at::Tensor empty(at::IntArrayRef shape) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    params_ += n;
    if (params_ > kMaxZooParameters) {
      std::ostringstream os;
      os << "the model would have more than " << std::setprecision(3) << params_
         << " parameters; the zoo's limit is " << kMaxZooParameters;
      bad_spec(spec_, os.str());
    }
    return at::empty(shape, at::kFloat);
  }

  std::string spec_;
  at::Generator gen_;
  double params_ = 0;
};

// ---------------------------------------------------------------------------------------------

Graph build_mlp(const std::string& spec, const std::vector<std::string>& parts, uint64_t seed) {
  std::vector<int64_t> sizes;
  for (const auto& s : split(parts[0].substr(4), '-')) sizes.push_back(parse_positive(spec, "layer size", s));
  if (sizes.size() < 2) bad_spec(spec, "mlp needs at least an input and an output size, e.g. mlp:784-10");
  check_depth(spec, "layer count", static_cast<double>(sizes.size()) - 1);
  Options opt(spec, {parts.begin() + 1, parts.end()}, {"in", "hw"});
  Builder b(spec, seed);
  const int64_t n_in = sizes[0];
  if (opt.has("in") || opt.has("hw")) {
    const int64_t c = opt.get_int("in", 1), hw = opt.get_int("hw", 28);
    if (c * hw * hw != n_in)
      bad_spec(spec, "in*hw*hw = " + std::to_string(c * hw * hw) + " must equal the input size " +
                         std::to_string(n_in));
    b.image_input(c, hw);
  } else if (n_in == 784) {
    b.image_input(1, 28);
  } else if (n_in == 3072) {
    b.image_input(3, 32);
  } else {
    b.g.inputs.push_back({"input", at::kFloat, {Dim::sym("N"), n_in}});
  }
  std::string x = b.flatten("flatten", "input");
  for (size_t i = 1; i < sizes.size(); ++i) {
    const bool last = i + 1 == sizes.size();
    const std::string name = "fc" + std::to_string(i);
    x = b.gemm(name, x, sizes[i - 1], sizes[i], last ? "logits" : "");
    if (!last) x = b.relu("relu" + std::to_string(i), x);
  }
  b.logits_output(sizes.back());
  return std::move(b.g);
}

Graph build_lenet5(const std::string& spec, const std::vector<std::string>& parts, uint64_t seed) {
  Options opt(spec, {parts.begin() + 1, parts.end()}, {"in", "hw", "classes"});
  const int64_t c = opt.get_int("in", 1), hw = opt.get_int("hw", 28), classes = opt.get_int("classes", 10);
  const int64_t s = ((hw / 2) - 4) / 2;  // conv pad 2 keeps hw; pool; conv 5x5; pool
  if (hw / 2 - 4 < 2) bad_spec(spec, "lenet5 needs hw >= 12, got " + std::to_string(hw));
  Builder b(spec, seed);
  b.image_input(c, hw);
  std::string x = b.conv("conv1", "input", c, 6, 5, 1, 2, true);
  x = b.relu("relu1", x);
  x = b.maxpool("pool1", x, 2);
  x = b.conv("conv2", x, 6, 16, 5, 1, 0, true);
  x = b.relu("relu2", x);
  x = b.maxpool("pool2", x, 2);
  x = b.flatten("flatten", x);
  x = b.relu("relu3", b.gemm("fc1", x, 16 * s * s, 120));
  x = b.relu("relu4", b.gemm("fc2", x, 120, 84));
  b.gemm("fc3", x, 84, classes, "logits");
  b.logits_output(classes);
  return std::move(b.g);
}

Graph build_cnn(const std::string& spec, const std::vector<std::string>& parts, uint64_t seed) {
  Options opt(spec, {parts.begin() + 1, parts.end()}, {"in", "hw", "classes", "width", "fc"});
  const int64_t c = opt.get_int("in", 1), hw = opt.get_int("hw", 28), classes = opt.get_int("classes", 10);
  const int64_t w = opt.get_int("width", 32), fc = opt.get_int("fc", 256, 0);
  if (hw < 8) bad_spec(spec, "cnn needs hw >= 8, got " + std::to_string(hw));
  const int64_t s = ((hw / 2) / 2) / 2;  // three 2x2 max pools (floor), 28 -> 14 -> 7 -> 3
  Builder b(spec, seed);
  b.image_input(c, hw);
  // Three Conv3x3-BN-Relu-MaxPool stages: one conv per stage keeps the memory-bound work at full
  // resolution small (on 2 cores BatchNorm and pooling at 28x28 cost as much as the convs).
  auto stage = [&](const std::string& n, const std::string& x, int64_t cin, int64_t cout) {
    std::string y = b.conv("conv" + n, x, cin, cout, 3, 1, 1, false);
    y = b.relu("relu" + n, b.bn("bn" + n, y, cout));
    return b.maxpool("pool" + n, y, 2);
  };
  std::string x = stage("1", "input", c, w);
  x = stage("2", x, w, 2 * w);
  x = stage("3", x, 2 * w, 2 * w);
  x = b.flatten("flatten", x);
  if (fc == 0) {
    b.gemm("fc2", x, 2 * w * s * s, classes, "logits");
  } else {
    x = b.relu("relu4", b.gemm("fc1", x, 2 * w * s * s, fc));
    x = b.node("Dropout", {x, b.scalar("dropout.ratio", 0.3f)}, "dropout");
    b.gemm("fc2", x, fc, classes, "logits");
  }
  b.logits_output(classes);
  return std::move(b.g);
}

Graph build_resnet(const std::string& spec, const std::vector<std::string>& parts, uint64_t seed) {
  const int64_t blocks = parse_positive(spec, "resnet block count", parts[0].substr(7));
  check_depth(spec, "depth 6N+2", 6.0 * static_cast<double>(blocks) + 2);
  Options opt(spec, {parts.begin() + 1, parts.end()}, {"in", "hw", "classes"});
  const int64_t c = opt.get_int("in", 1), hw = opt.get_int("hw", 28), classes = opt.get_int("classes", 10);
  Builder b(spec, seed);
  b.image_input(c, hw);
  std::string x = b.conv("stem.conv", "input", c, 16, 3, 1, 1, false);
  x = b.relu("stem.relu", b.bn("stem.bn", x, 16));
  int64_t cin = 16;
  const int64_t widths[3] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage) {
    for (int64_t i = 0; i < blocks; ++i) {
      const int64_t cout = widths[stage];
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i) + ".";
      std::string y = b.conv(p + "conv1", x, cin, cout, 3, stride, 1, false);
      y = b.relu(p + "relu1", b.bn(p + "bn1", y, cout));
      y = b.conv(p + "conv2", y, cout, cout, 3, 1, 1, false);
      y = b.bn(p + "bn2", y, cout);
      std::string shortcut = x;
      if (stride != 1 || cin != cout) {
        shortcut = b.conv(p + "downsample.conv", x, cin, cout, 1, stride, 0, false);
        shortcut = b.bn(p + "downsample.bn", shortcut, cout);
      }
      x = b.relu(p + "relu2", b.node("Add", {y, shortcut}, p + "add"));
      cin = cout;
    }
  }
  x = b.node("GlobalAveragePool", {x}, "avgpool");
  x = b.flatten("flatten", x);
  b.gemm("fc", x, 64, classes, "logits");
  b.logits_output(classes);
  return std::move(b.g);
}

// x * 0.5 * (1 + erf(x / sqrt(2))), the exact GELU as PyTorch exports it.
std::string gelu(Builder& b, const std::string& p, const std::string& x) {
  std::string t = b.node("Div", {x, b.scalar("const.sqrt2", static_cast<float>(std::sqrt(2.0)))},
                         p + ".div");
  t = b.node("Erf", {t}, p + ".erf");
  t = b.node("Add", {t, b.scalar("const.one", 1.0f)}, p + ".add");
  t = b.node("Mul", {x, t}, p + ".mul");
  return b.node("Mul", {t, b.scalar("const.half", 0.5f)}, p);
}

Graph build_transformer(const std::string& spec, const std::vector<std::string>& parts,
                        uint64_t seed) {
  std::vector<std::string> items(parts.begin(), parts.end());
  items[0] = items[0].substr(std::string("transformer:").size());
  if (items.size() == 1 && items[0].empty()) items.clear();
  Options opt(spec, items, {"vocab", "d", "heads", "layers", "classes", "seq", "ff", "norm"});
  const int64_t vocab = opt.require_int("vocab"), d = opt.require_int("d"),
                heads = opt.require_int("heads"), layers = opt.require_int("layers"),
                classes = opt.require_int("classes"), seq = opt.require_int("seq");
  check_depth(spec, "layers", static_cast<double>(layers));
  const int64_t ff = opt.get_int("ff", 4 * d);
  const std::string norm = opt.get_str("norm", "pre");
  if (norm != "pre" && norm != "post") bad_spec(spec, "norm must be 'pre' or 'post', got '" + norm + "'");
  if (d % heads != 0)
    bad_spec(spec, "d = " + std::to_string(d) + " must be divisible by heads = " + std::to_string(heads));
  const int64_t dk = d / heads;
  const bool pre = norm == "pre";

  Builder b(spec, seed);
  b.g.inputs.push_back({"input", at::kLong, {Dim::sym("N"), seq}});
  // nn.Embedding draws N(0, 1); the learned positions start small as in BERT/GPT.
  std::string x = b.node("Gather", {b.init("embed.weight", b.normal({vocab, d}, 1.0)), "input"},
                         "embed", {{"axis", int64_t{0}}});
  x = b.node("Add", {x, b.init("pos_embed.weight", b.normal({seq, d}, 0.02))}, "pos_embed");

  // Reshape with 0 copies that dim from the input, so N (and S) stay dynamic.
  const std::string split_shape = b.constant("const.split_heads_shape", at::tensor({int64_t{0}, int64_t{0}, heads, dk}, at::kLong));
  const std::string merge_shape = b.constant("const.merge_heads_shape", at::tensor({int64_t{0}, int64_t{0}, d}, at::kLong));
  const std::string scale = b.scalar("const.sqrt_dk", static_cast<float>(std::sqrt(static_cast<double>(dk))));
  const std::vector<int64_t> to_heads = {0, 2, 1, 3};  // [N,S,H,dk] -> [N,H,S,dk]
  const std::vector<int64_t> to_keys_t = {0, 2, 3, 1};  // [N,S,H,dk] -> [N,H,dk,S]

  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "layer" + std::to_string(l);
    const std::string a = p + ".attn";
    std::string h = pre ? b.layer_norm(p + ".ln1", x, d) : x;
    auto heads_of = [&](const std::string& n, const std::vector<int64_t>& perm) {
      std::string t = b.linear(a + "." + n, h, d, d);
      t = b.node("Reshape", {t, split_shape}, a + "." + n + ".reshape");
      return b.node("Transpose", {t}, a + "." + n + ".heads", {{"perm", perm}});
    };
    const std::string q = heads_of("q", to_heads);
    const std::string k = heads_of("k", to_keys_t);
    const std::string v = heads_of("v", to_heads);
    std::string s = b.node("MatMul", {q, k}, a + ".scores");           // [N,H,S,S]
    s = b.node("Div", {s, scale}, a + ".scaled");
    s = b.node("Softmax", {s}, a + ".softmax", {{"axis", int64_t{-1}}});
    std::string ctx = b.node("MatMul", {s, v}, a + ".context");         // [N,H,S,dk]
    ctx = b.node("Transpose", {ctx}, a + ".context.transpose", {{"perm", to_heads}});
    ctx = b.node("Reshape", {ctx, merge_shape}, a + ".merged");        // [N,S,D]
    std::string o = b.linear(a + ".out", ctx, d, d);
    x = b.node("Add", {x, o}, p + ".attn_residual");
    if (!pre) x = b.layer_norm(p + ".ln1", x, d);

    h = pre ? b.layer_norm(p + ".ln2", x, d) : x;
    std::string f = b.linear(p + ".ffn.fc1", h, d, ff);
    f = gelu(b, p + ".ffn.gelu", f);
    f = b.linear(p + ".ffn.fc2", f, ff, d);
    x = b.node("Add", {x, f}, p + ".ffn_residual");
    if (!pre) x = b.layer_norm(p + ".ln2", x, d);
  }
  if (pre) x = b.layer_norm("final_ln", x, d);
  x = b.node("ReduceMean", {x}, "pool", {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}});
  b.gemm("classifier", x, d, classes, "logits");
  b.logits_output(classes);
  return std::move(b.g);
}

bool has_head(const std::string& spec, const std::string& name) {
  return spec == name || spec.rfind(name + ",", 0) == 0;
}

}  // namespace

bool is_zoo_spec(const std::string& spec) {
  return spec.rfind("mlp:", 0) == 0 || spec.rfind("resnet:", 0) == 0 ||
         spec.rfind("transformer:", 0) == 0 || has_head(spec, "lenet5") || has_head(spec, "cnn");
}

Graph build_zoo_model(const std::string& spec, uint64_t seed) {
  if (!is_zoo_spec(spec)) bad_spec(spec, "not a zoo model");
  const std::vector<std::string> parts = split(spec, ',');
  Graph g;
  if (spec.rfind("mlp:", 0) == 0)
    g = build_mlp(spec, parts, seed);
  else if (spec.rfind("resnet:", 0) == 0)
    g = build_resnet(spec, parts, seed);
  else if (spec.rfind("transformer:", 0) == 0)
    g = build_transformer(spec, parts, seed);
  else if (has_head(spec, "lenet5"))
    g = build_lenet5(spec, parts, seed);
  else
    g = build_cnn(spec, parts, seed);
  g.name = parts[0].substr(0, parts[0].find(':'));
  g.opset = 17;
  g.doc = "pare zoo model '" + spec + "'";
  g.metadata["pare.zoo_spec"] = spec;
  g.metadata["pare.seed"] = std::to_string(seed);
  return g;
}

std::vector<std::string> zoo_help() { return {std::begin(kHelp), std::end(kHelp)}; }

}  // namespace pare::core
