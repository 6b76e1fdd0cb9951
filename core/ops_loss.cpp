// Loss ops of ONNX (opset 13): NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, over
// [N, C] or [N, C, d1, ...] inputs, with per-class weights, ignore_index and reduction none, sum
// or mean (mean divides by the sum of the weights of the targets not ignored), as ONNX's
// reference defines them. libtorch's nll_loss computes both, with autograd.
#include <limits>

#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_input;
using ops::has_input;
using ops::spec_int;
using ops::spec_string;
using Tensors = std::vector<at::Tensor>;

// NLL of log-probabilities `logp` [N, C, ...] for targets [N, ...], the node's attributes and
// optional weights [C].
at::Tensor nll(const Node& n, const at::Tensor& logp, const at::Tensor& target, const at::Tensor& weight) {
  PARE_CHECK(logp.dim() >= 2 && target.dim() == logp.dim() - 1 && target.size(0) == logp.size(0),
             n.describe(), ": ", n.op_type, " needs input [N, C, d...] and target [N, d...], got ", logp.sizes(),
             " and ", target.sizes());
  for (int64_t d = 2; d < logp.dim(); ++d)
    PARE_CHECK(target.size(d - 1) == logp.size(d), n.describe(), ": target ", target.sizes(),
               " does not match input ", logp.sizes());
  PARE_CHECK(!at::isFloatingType(target.scalar_type()) && target.scalar_type() != at::kBool, n.describe(),
             ": the target must hold class indices (integers), got ", target.scalar_type());
  const std::string reduction = n.attr_string("reduction", "mean");
  int64_t r = at::Reduction::Mean;
  if (reduction == "none") r = at::Reduction::None;
  else if (reduction == "sum") r = at::Reduction::Sum;
  else PARE_CHECK(reduction == "mean", n.describe(), ": reduction must be none, sum or mean, got '", reduction, "'");
  // Without ignore_index no target is ignored: a value no int64 target can equal beside real ones.
  const bool ignoring = n.has_attr("ignore_index");
  const int64_t ignore = ignoring ? n.attr_int("ignore_index", 0) : std::numeric_limits<int64_t>::min();
  const at::Tensor t = target.to(at::kLong);
  const int64_t classes = logp.size(1);
  at::Tensor bad = t.lt(0).logical_or(t.ge(classes));
  if (ignoring) bad = bad.logical_and(t.ne(ignore));
  PARE_CHECK(!bad.any().item<bool>(), n.describe(), ": a target lies outside [0, ", classes, ")",
             ignoring ? " and is not ignore_index" : "");
  if (weight.defined())
    PARE_CHECK(weight.dim() == 1 && weight.size(0) == classes, n.describe(), ": weight must be [", classes,
               "], got ", weight.sizes());
  c10::optional<at::Tensor> w;
  if (weight.defined()) w = weight.to(logp.scalar_type());
  return at::nll_loss_nd(logp, t, w, r, ignore);
}

OpDef nll_op() {
  OpDef d = ops::op_def("NegativeLogLikelihoodLoss", 2, 3,
                        "-input[n, target[n, d], d] * weight[target]; reduction none, sum or mean (default; "
                        "over the weights of the targets kept), ignore_index skipped");
  d.attrs = {spec_int("ignore_index"), spec_string("reduction")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    return {nll(n, in.at(0), in.at(1), has_input(in, 2) ? in[2] : at::Tensor())};
  };
  d.flops = flops_per_input(0);
  d.traits.opaque_channels = true;
  return d;
}

OpDef softmax_cross_entropy_op() {
  OpDef d = ops::op_def("SoftmaxCrossEntropyLoss", 2, 3,
                        "NegativeLogLikelihoodLoss of log_softmax(scores, axis 1); optional second output "
                        "log_prob");
  d.outputs_max = 2;
  d.attrs = {spec_int("ignore_index"), spec_string("reduction")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& scores = in.at(0);
    PARE_CHECK(scores.dim() >= 2, n.describe(), ": scores must be [N, C, d...], got ", scores.sizes());
    at::Tensor logp = at::log_softmax(scores, 1);
    Tensors out = {nll(n, logp, in.at(1), has_input(in, 2) ? in[2] : at::Tensor())};
    if (n.outputs.size() > 1) out.push_back(logp);
    return out;
  };
  d.flops = flops_per_input(5);  // exp, sum, log, subtract, gather
  d.traits.opaque_channels = true;
  return d;
}

}  // namespace

void register_loss_ops(OpRegistry& reg) {
  reg.add(nll_op());
  reg.add(softmax_cross_entropy_op());
}

}  // namespace pare::core
