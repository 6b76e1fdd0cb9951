// Core ops, recurrent family: LSTM, GRU and RNN as ONNX defines them (opsets 7 to 14: gate orders
// iofc for LSTM and zrh for GRU, optional biases, initial states, LSTM peepholes, sequence_lens,
// forward/reverse/bidirectional, `layout` 1 for batch-major tensors, `clip`, and the activation
// functions of the spec with their alpha/beta). The time loop runs in libtorch ops, so the
// forward is differentiable in the inputs and the weights.
//
// sequence_lens: a batch entry's steps after its length leave its state unchanged and give zeros
// in Y (as ONNX Runtime does); the reverse direction reverses each sequence within its length.
#include <cctype>
#include <variant>

#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::has_input;
using ops::spec_float;
using ops::spec_floats;
using ops::spec_int;
using ops::spec_string;
using ops::spec_strings;
using Tensors = std::vector<at::Tensor>;

enum class Cell { kLstm, kGru, kRnn };

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

at::Tensor activate(const Activation& a, const at::Tensor& x) {
  const std::string& n = a.name;
  if (n == "sigmoid") return at::sigmoid(x);
  if (n == "tanh") return at::tanh(x);
  if (n == "relu") return at::relu(x);
  if (n == "affine") return x * a.alpha + a.beta;
  if (n == "leakyrelu") return at::leaky_relu(x, a.alpha);
  if (n == "thresholdedrelu") return at::where(x.gt(a.alpha), x, at::zeros_like(x));
  if (n == "scaledtanh") return at::tanh(x * a.beta) * a.alpha;
  if (n == "hardsigmoid") return at::clamp(x * a.alpha + a.beta, 0.0, 1.0);
  if (n == "elu") return at::elu(x, a.alpha);
  if (n == "softsign") return x / (at::abs(x) + 1);
  return at::softplus(x);  // "softplus" (checked by activations_of)
}

// The node's activation functions, `per_direction` for each direction, with alpha and beta taken
// in order by the functions that have them (as ONNX Runtime reads the lists).
std::vector<Activation> activations_of(const Node& n, Cell cell, int64_t directions) {
  const std::vector<std::string> defaults = cell == Cell::kLstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                            : cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                 : std::vector<std::string>{"Tanh"};
  const size_t per = defaults.size();
  std::vector<std::string> names;
  if (n.has_attr("activations")) {
    const auto* list = std::get_if<std::vector<std::string>>(&n.attrs.at("activations"));
    PARE_CHECK(list != nullptr, n.describe(), ": activations must be a list of strings");
    names = *list;
    if (names.size() == per && directions == 2) names.insert(names.end(), names.begin(), names.end());
  } else {
    for (int64_t d = 0; d < directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  PARE_CHECK(names.size() == per * static_cast<size_t>(directions), n.describe(), ": ", n.op_type, " needs ",
             per * directions, " activations for ", directions, " direction(s), got ", names.size());
  const auto alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const auto& raw : names) {
    Activation a;
    for (char c : raw) a.name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // Name, then whether it takes alpha and beta, with their defaults.
    struct Known { const char* name; bool alpha; double alpha_def; bool beta; double beta_def; };
    static const Known known[] = {
        {"sigmoid", false, 0, false, 0},     {"tanh", false, 0, false, 0},       {"relu", false, 0, false, 0},
        {"affine", true, 1, true, 0},        {"leakyrelu", true, 0.01, false, 0}, {"thresholdedrelu", true, 1, false, 0},
        {"scaledtanh", true, 1, true, 1},    {"hardsigmoid", true, 0.2, true, 0.5}, {"elu", true, 1, false, 0},
        {"softsign", false, 0, false, 0},    {"softplus", false, 0, false, 0}};
    const Known* k = nullptr;
    for (const auto& e : known) if (a.name == e.name) k = &e;
    PARE_CHECK(k != nullptr, n.describe(), ": unknown activation '", raw, "'");
    a.alpha = k->alpha && ai < alphas.size() ? alphas[ai++] : k->alpha_def;
    a.beta = k->beta && bi < betas.size() ? betas[bi++] : k->beta_def;
    out.push_back(a);
  }
  return out;
}

// x [seq, batch, ...] with each batch entry's first lens[b] steps reversed.
at::Tensor reverse_within(const at::Tensor& x, const at::Tensor& lens) {
  const int64_t steps = x.size(0);
  at::Tensor src = ops::reversed_steps(steps, lens);  // [seq, batch]
  std::vector<int64_t> shape = {steps, x.size(1)};
  for (int64_t i = 2; i < x.dim(); ++i) shape.push_back(1);
  return x.gather(0, src.reshape(shape).expand(x.sizes()).to(x.device()));
}

struct Weights {
  at::Tensor w, r, wb, rb, p;  // one direction: W [G*h, in], R [G*h, h], biases [G*h], peepholes [3*h]
};

struct Settings {
  Cell cell;
  int64_t hidden;
  double clip;  // <= 0: none
  bool linear_before_reset;
};

// One direction over the whole sequence: Y [seq, batch, h], final H (and C for LSTM).
Tensors run_direction(const Settings& s, const at::Tensor& x, const Weights& wt, at::Tensor h, at::Tensor c,
                      const at::Tensor& valid, const Activation* act) {
  const int64_t H = s.hidden;
  auto gate = [&](const at::Tensor& t) { return s.clip > 0 ? at::clamp(t, -s.clip, s.clip) : t; };
  // Input projections for every step at once: [seq, batch, G*h].
  at::Tensor xw = at::matmul(x, wt.w.t());
  if (wt.wb.defined()) xw = xw + wt.wb;
  // The recurrent projection of every gate, but for GRU's h gate without linear_before_reset,
  // which projects r * h instead (below): its rows are left out of the per-step matmul.
  const bool late_h = s.cell == Cell::kGru && !s.linear_before_reset;
  const at::Tensor r_step = late_h ? wt.r.narrow(0, 0, 2 * H) : wt.r;
  const at::Tensor rb_step = wt.rb.defined() && late_h ? wt.rb.narrow(0, 0, 2 * H) : wt.rb;
  const at::Tensor r_h = late_h ? wt.r.narrow(0, 2 * H, H).t() : at::Tensor();
  const at::Tensor rb_h = wt.rb.defined() && late_h ? wt.rb.narrow(0, 2 * H, H) : at::Tensor();
  std::vector<at::Tensor> ys;
  for (int64_t t = 0; t < x.size(0); ++t) {
    at::Tensor hr = at::matmul(h, r_step.t());
    if (rb_step.defined()) hr = hr + rb_step;
    at::Tensor h_new, c_new;
    if (s.cell == Cell::kLstm) {
      at::Tensor g = xw[t] + hr;  // gates i, o, f, c
      at::Tensor gi = g.narrow(1, 0, H), go = g.narrow(1, H, H), gf = g.narrow(1, 2 * H, H), gc = g.narrow(1, 3 * H, H);
      if (wt.p.defined()) {
        gi = gi + wt.p.narrow(0, 0, H) * c;
        gf = gf + wt.p.narrow(0, 2 * H, H) * c;
      }
      at::Tensor i = activate(act[0], gate(gi)), f = activate(act[0], gate(gf)), cc = activate(act[1], gate(gc));
      c_new = f * c + i * cc;
      if (wt.p.defined()) go = go + wt.p.narrow(0, H, H) * c_new;
      h_new = activate(act[0], gate(go)) * activate(act[2], c_new);
    } else if (s.cell == Cell::kGru) {
      at::Tensor xg = xw[t];  // gates z, r, h
      at::Tensor z = activate(act[0], gate(xg.narrow(1, 0, H) + hr.narrow(1, 0, H)));
      at::Tensor r = activate(act[0], gate(xg.narrow(1, H, H) + hr.narrow(1, H, H)));
      at::Tensor hh;
      if (late_h) {
        hh = at::matmul(r * h, r_h);
        if (rb_h.defined()) hh = hh + rb_h;
      } else {
        hh = r * hr.narrow(1, 2 * H, H);  // (h Rh^T + Rbh), reset after the projection
      }
      at::Tensor cand = activate(act[1], gate(xg.narrow(1, 2 * H, H) + hh));
      h_new = (1 - z) * cand + z * h;
    } else {
      h_new = activate(act[0], gate(xw[t] + hr));
    }
    at::Tensor ok = valid[t].unsqueeze(1);  // [batch, 1]
    ys.push_back(at::where(ok, h_new, at::zeros_like(h_new)));
    h = at::where(ok, h_new, h);
    if (c_new.defined()) c = at::where(ok, c_new, c);
  }
  at::Tensor y = ys.empty() ? at::zeros({0, x.size(1), H}, x.options()) : at::stack(ys);
  return {y, h, c};
}

// Reads input i of direction d, or an undefined tensor when it is omitted.
at::Tensor slice_dir(const Tensors& in, size_t i, int64_t d) { return has_input(in, i) ? in[i][d] : at::Tensor(); }

Tensors rnn_forward(Cell cell, const Node& n, const Tensors& in) {
  const int64_t gates = cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1;
  const std::string direction = n.attr_string("direction", "forward");
  PARE_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional", n.describe(),
             ": direction must be forward, reverse or bidirectional, got '", direction, "'");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_major = n.attr_int("layout", 0) != 0;
  PARE_CHECK(n.attr_int("input_forget", 0) == 0, n.describe(), ": input_forget=1 is not supported");
  at::Tensor x = in.at(0);
  const at::Tensor &w = in.at(1), &r = in.at(2);
  PARE_CHECK(x.dim() == 3 && w.dim() == 3 && r.dim() == 3, n.describe(), ": X, W and R must be 3-D, got ",
             x.sizes(), ", ", w.sizes(), ", ", r.sizes());
  if (batch_major) x = x.transpose(0, 1);  // [seq, batch, in]
  const int64_t H = r.size(2), batch = x.size(1), steps = x.size(0);
  PARE_CHECK(!n.has_attr("hidden_size") || n.attr_int("hidden_size", 0) == H, n.describe(), ": hidden_size ",
             n.attr_int("hidden_size", 0), " does not match R ", r.sizes());
  PARE_CHECK(w.size(0) == dirs && r.size(0) == dirs && w.size(1) == gates * H && r.size(1) == gates * H &&
                 w.size(2) == x.size(2),
             n.describe(), ": W must be [", dirs, ", ", gates * H, ", ", x.size(2), "] and R [", dirs, ", ", gates * H,
             ", ", H, "], got ", w.sizes(), " and ", r.sizes());
  const at::Tensor b = has_input(in, 3) ? in[3] : at::Tensor();
  if (b.defined())
    PARE_CHECK(b.dim() == 2 && b.size(0) == dirs && b.size(1) == 2 * gates * H, n.describe(), ": B must be [", dirs,
               ", ", 2 * gates * H, "], got ", b.sizes());
  at::Tensor lens = at::full({batch}, steps, at::kLong);
  if (has_input(in, 4)) {
    PARE_CHECK(in[4].dim() == 1 && in[4].size(0) == batch && !in[4].is_floating_point(), n.describe(),
               ": sequence_lens must be integers [", batch, "], got ", in[4].sizes());
    lens = in[4].to(at::kLong).cpu();
    PARE_CHECK(lens.min().item<int64_t>() >= 0 && lens.max().item<int64_t>() <= steps, n.describe(),
               ": sequence_lens must lie in [0, ", steps, "]");
  }
  auto state = [&](size_t i) {  // initial_h / initial_c as [dirs, batch, h]
    if (!has_input(in, i)) return at::zeros({dirs, batch, H}, x.options());
    at::Tensor s = batch_major ? in[i].transpose(0, 1) : in[i];
    PARE_CHECK(s.dim() == 3 && s.size(0) == dirs && s.size(1) == batch && s.size(2) == H, n.describe(),
               ": initial state must be [", dirs, ", ", batch, ", ", H, "] (layout 0), got ", in[i].sizes());
    return s;
  };
  const at::Tensor h0 = state(5), c0 = cell == Cell::kLstm ? state(6) : at::Tensor();
  const at::Tensor peep = cell == Cell::kLstm && has_input(in, 7) ? in[7] : at::Tensor();
  if (peep.defined())
    PARE_CHECK(peep.dim() == 2 && peep.size(0) == dirs && peep.size(1) == 3 * H, n.describe(), ": P must be [", dirs,
               ", ", 3 * H, "], got ", peep.sizes());
  Settings s{cell, H, n.has_attr("clip") ? static_cast<double>(n.attr_float("clip", 0.0f)) : 0.0,
             n.attr_int("linear_before_reset", 0) != 0};
  const auto acts = activations_of(n, cell, dirs);
  const at::Tensor valid = at::arange(steps, at::kLong).unsqueeze(1).lt(lens.unsqueeze(0)).to(x.device());
  Tensors ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    Weights wt{w[d], r[d], {}, {}, peep.defined() ? peep[d] : at::Tensor()};
    if (b.defined()) {
      wt.wb = b[d].narrow(0, 0, gates * H);
      wt.rb = b[d].narrow(0, gates * H, gates * H);
    }
    at::Tensor xs = reverse ? reverse_within(x, lens) : x;
    Tensors out = run_direction(s, xs, wt, h0[d], c0.defined() ? c0[d] : at::zeros({batch, H}, x.options()), valid,
                                acts.data() + d * (acts.size() / dirs));
    ys.push_back(reverse ? reverse_within(out[0], lens) : out[0]);
    hs.push_back(out[1]);
    cs.push_back(out[2]);
  }
  at::Tensor y = at::stack(ys, 1);  // [seq, dirs, batch, h]
  at::Tensor yh = at::stack(hs, 0), yc = cell == Cell::kLstm ? at::stack(cs, 0) : at::Tensor();
  if (batch_major) {
    y = y.permute({2, 0, 1, 3});  // [batch, seq, dirs, h]
    yh = yh.transpose(0, 1);
    if (yc.defined()) yc = yc.transpose(0, 1);
  }
  Tensors result = {y, yh};
  if (cell == Cell::kLstm) result.push_back(yc);
  result.resize(std::max<size_t>(1, n.outputs.size()));
  return result;
}

OpDef rnn_op(Cell cell) {
  const std::string name = cell == Cell::kLstm ? "LSTM" : cell == Cell::kGru ? "GRU" : "RNN";
  const std::string doc =
      cell == Cell::kLstm ? "long short-term memory over X [seq, batch, in] (gates iofc, optional peepholes); outputs Y, Y_h, Y_c"
      : cell == Cell::kGru ? "gated recurrent unit over X [seq, batch, in] (gates zrh, linear_before_reset); outputs Y, Y_h"
                           : "Elman recurrent network over X [seq, batch, in]; outputs Y, Y_h";
  OpDef d = ops::op_def(name, 3, cell == Cell::kLstm ? 8 : 6, doc);
  // Every output is optional in ONNX; a node has at least one.
  d.outputs_max = cell == Cell::kLstm ? 3 : 2;
  d.attrs = {spec_floats("activation_alpha"), spec_floats("activation_beta"), spec_strings("activations"),
             spec_float("clip"), spec_string("direction"), spec_int("hidden_size"), spec_int("layout")};
  if (cell == Cell::kLstm) d.attrs.push_back(spec_int("input_forget"));
  if (cell == Cell::kGru) d.attrs.push_back(spec_int("linear_before_reset"));
  d.forward = [cell](const Node& n, const Tensors& in, const RunContext&) -> Tensors { return rnn_forward(cell, n, in); };
  // Per step and direction: the two projections (2 FLOPs per weight per batch row) and about
  // 3 elementwise FLOPs per gate value.
  d.flops = [](const Node&, const std::vector<std::vector<int64_t>>& in,
                    const std::vector<std::vector<int64_t>>&) -> int64_t {
    if (in.size() < 3 || in[0].size() != 3 || in[1].size() != 3 || in[2].size() != 3) return 0;
    const int64_t rows = in[0][0] * in[0][1], dirs = in[1][0], gh = in[1][1];
    return rows * dirs * (2 * gh * (in[1][2] + in[2][2]) + 3 * gh);
  };
  // W, R and B hold gate blocks, not one channel axis (the op is opaque to channel pruning);
  // LSTM's P holds the peepholes.
  d.weights = {WeightInput::fixed(1, WeightRole::kWeight), WeightInput::fixed(2, WeightRole::kWeight),
               WeightInput::fixed(3, WeightRole::kBias)};
  if (cell == Cell::kLstm) d.weights.push_back(WeightInput::fixed(7, WeightRole::kWeight));
  d.traits.opaque_channels = true;
  return d;
}

}  // namespace

void register_rnn_ops(OpRegistry& reg) {
  reg.add(rnn_op(Cell::kLstm));
  reg.add(rnn_op(Cell::kGru));
  reg.add(rnn_op(Cell::kRnn));
}

}  // namespace pare::core
