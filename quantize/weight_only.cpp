// Rewrites MatMul/Gemm with a constant weight into MatMulNBits with block-wise int4 weights.
#include "quantize/weight_only.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "core/op_registry.h"
#include "quantize/fold_bn.h"
#include "quantize/observer.h"
#include "quantize/ptq.h"

namespace pare::quantize {
namespace {

struct Int4Weight {
  at::Tensor packed;  // uint8 [N, blocks, group / 2]
  at::Tensor scales;  // float32 [N * blocks]
  at::Tensor dequantized;  // float32 [N, K], for the report
};

// Symmetric int4 per block of `group` values along K of wt [N, K].
Int4Weight int4_blocks(const at::Tensor& wt, int64_t group) {
  const int64_t n = wt.size(0), k = wt.size(1), blocks = (k + group - 1) / group;
  at::Tensor w = at::constant_pad_nd(wt, {0, blocks * group - k}, 0).reshape({n, blocks, group});
  at::Tensor amax = w.abs().amax(2, true);
  at::Tensor scale = at::where(amax > 1e-12, amax / 7.0, at::ones_like(amax)).to(at::kFloat);
  at::Tensor q = at::clamp(at::round(w / scale), -8, 7);
  Int4Weight r;
  r.dequantized = (q * scale).reshape({n, blocks * group}).narrow(1, 0, k);
  at::Tensor u = (q + 8).to(at::kInt);
  at::Tensor pairs = u.reshape({n, blocks, group / 2, 2});
  r.packed = at::bitwise_or(pairs.select(3, 0), at::bitwise_left_shift(pairs.select(3, 1), 4)).to(at::kByte);
  r.scales = scale.reshape({-1});
  return r;
}

}  // namespace

WeightOnlyResult quantize_weight_only(const core::Graph& fp32, const WeightOnlyOptions& opts) {
  check_not_quantized(fp32, "model '" + fp32.name + "'");
  const int64_t group = opts.group_;
  PARE_CHECK_OPTION(group >= 16 && (group & (group - 1)) == 0, "group", "must be a power of two >= 16 (",
             "ONNX Runtime's MatMulNBits), got ", group);
  check_names(fp32, opts.exclude_, "exclude");
  WeightOnlyResult res;
  core::Graph g = fp32;
  g.topo_sort();
  bypass_constant_identities(g);
  std::vector<core::Node> out;
  for (auto& n : g.nodes) {
    const bool mm = n.op_type == "MatMul", gemm = n.op_type == "Gemm";
    const std::string w = n.inputs.size() > 1 ? n.inputs[1] : "";
    const bool constant = (mm || gemm) && g.is_initializer(w) && g.initializers.at(w).dim() == 2 &&
                          at::isFloatingType(g.initializers.at(w).scalar_type()) && !g.is_initializer(n.inputs[0]);
    const bool plain_gemm = !gemm || (n.attr_int("transA", 0) == 0 && n.attr_float("alpha", 1.0f) == 1.0f);
    if (!constant || !plain_gemm || matches(n, opts.exclude_)) {
      out.push_back(n);
      continue;
    }
    at::Tensor wt = g.initializers.at(w).to(at::kFloat);
    if (core::weight_axes(n, 1, 2).out != 0) wt = wt.t();  // all but Gemm with transB
    wt = wt.contiguous();  // [N, K]
    const int64_t N = wt.size(0), K = wt.size(1);
    at::Tensor bias;
    if (gemm && n.has_input(2)) {
      bias = g.initializers.count(n.inputs[2]) ? g.initializers.at(n.inputs[2]).to(at::kFloat) : at::Tensor();
      if (!bias.defined() || !(bias.numel() == 1 || (bias.dim() == 1 && bias.size(0) == N))) {
        out.push_back(n);  // a bias that is computed or 2-D: leave the node alone
        continue;
      }
      bias = bias * n.attr_float("beta", 1.0f);
    }
    Int4Weight q = int4_blocks(wt, group);
    res.layers.push_back({n.name, n.op_type, w, K, N, sqnr_db(wt, q.dequantized)});
    const std::string bq = g.unique_name(w + "_int4");
    g.initializers[bq] = q.packed;
    const std::string sc = g.unique_name(w + "_int4_scale");
    g.initializers[sc] = q.scales;
    core::Node m;
    m.op_type = "MatMulNBits";
    m.domain = "com.microsoft";
    m.name = n.name;
    m.inputs = {n.inputs[0], bq, sc};
    m.attrs = {{"K", K}, {"N", N}, {"bits", int64_t{4}}, {"block_size", group}};
    m.outputs = n.outputs;
    if (bias.defined()) {
      const std::string bn = g.unique_name(w + "_bias");
      g.initializers[bn] = bias.reshape({-1});
      const std::string mid = g.unique_name(n.outputs[0] + "_matmul");
      m.outputs = {mid};
      core::Node add;
      add.op_type = "Add";
      add.name = n.name + "_bias";
      add.inputs = {mid, bn};
      add.outputs = n.outputs;
      out.push_back(m);
      out.push_back(add);
    } else {
      out.push_back(m);
    }
  }
  g.nodes = std::move(out);
  remove_unused_initializers(g);
  g.verify();
  std::ostringstream meta;
  meta << "weight-only int4 (MatMulNBits, block " << group << ")";
  g.metadata["pare.quantization"] = meta.str();
  res.fp32_bytes = fp32.initializer_bytes();
  res.quantized_bytes = g.initializer_bytes();
  res.done = "to int4";
  res.graph = std::move(g);
  return res;
}

std::string RewriteResult::to_text() const {
  std::ostringstream os;
  os << std::left << std::setw(28) << "node" << std::setw(8) << "op" << std::setw(14) << "K x N"
     << "W SQNR\n";
  for (auto& l : layers) {
    std::ostringstream kn, db;
    kn << l.k << " x " << l.n;
    db << std::fixed << std::setprecision(1) << l.weight_sqnr_db << " dB";
    os << std::left << std::setw(28) << l.node << std::setw(8) << l.op << std::setw(14) << kn.str()
       << db.str() << "\n";
  }
  for (auto& s : skipped) os << "kept fp32: " << s << "\n";
  os << layers.size() << " layers " << done << ", initializers " << fp32_bytes << " -> " << quantized_bytes
     << " bytes\n";
  return os.str();
}

}  // namespace pare::quantize
