// Chooses unstructured (magnitude) and N:M masks over the weights the ops' "prune.weight" facets
// name, and applies them.
#include "prune/masks.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/module.h"
#include "core/op_registry.h"
#include "prune/facets.h"

namespace pare::prune {

void MaskOptions::validate() const {
  PARE_CHECK_OPTION(std::isfinite(sparsity_) && sparsity_ >= 0.0 && sparsity_ <= 1.0, "sparsity",
                    "must lie in [0, 1] (a fraction of the weights), got ", sparsity_);
  if (method_ == MaskMethod::kNM) {
    PARE_CHECK(m_ >= 1, "N:M pruning needs m >= 1, got m = ", m_);
    PARE_CHECK(n_ >= 0 && n_ <= m_, "N:M pruning needs 0 <= n <= m, got n = ", n_, ", m = ", m_);
  }
}

std::vector<WeightTarget> find_targets(const core::Graph& g, const std::vector<std::string>& exclude) {
  const core::OpRegistry& reg = prune_registry();
  std::vector<WeightTarget> all;
  std::set<std::string> node_names, seen;
  for (const core::Node& n : g.nodes) {
    node_names.insert(n.name);
    const core::OpDef& op = reg.get(n.op_type);
    if (!op.has_facet(kWeightFacet)) continue;
    auto role = op.facet<WeightFacet>(kWeightFacet).role(n, g);
    if (!role) continue;
    const std::string& w = n.inputs[role->input];
    auto it = g.initializers.find(w);
    if (it == g.initializers.end() || !it->second.is_floating_point() || !seen.insert(w).second) continue;
    all.push_back({n.name, n.op_type, w, role->in_axis});
  }
  auto names_of = [&] {
    std::string s;
    for (auto& t : all) s += (s.empty() ? "" : ", ") + t.node;
    return s.empty() ? std::string("none") : s;
  };
  std::set<std::string> ex;
  for (const std::string& e : exclude) {
    PARE_CHECK_OPTION(node_names.count(e), "exclude", "'", e, "': model '", g.name,
               "' has no node of that name; prunable layers: ", names_of());
    bool prunable = std::any_of(all.begin(), all.end(), [&](const WeightTarget& t) { return t.node == e; });
    PARE_CHECK_OPTION(prunable, "exclude", "'", e, "': node has no prunable weight; prunable layers: ", names_of());
    ex.insert(e);
  }
  std::vector<WeightTarget> out;
  for (auto& t : all)
    if (!ex.count(t.node)) out.push_back(t);
  return out;
}

WeightLookup lookup_in(const core::Graph& g) {
  return [&g](const std::string& name) {
    auto it = g.initializers.find(name);
    PARE_ASSERT(it != g.initializers.end(), "no initializer '", name, "'");
    return it->second;
  };
}

WeightLookup lookup_in(const core::Module& m) {
  return [&m](const std::string& name) { return m.initializer(name); };
}

namespace {

// Keeps the n largest |w| of every m consecutive weights along `axis` (a trailing partial group
// keeps min(n, its size)).
at::Tensor nm_mask(const at::Tensor& w, int64_t axis, int64_t n, int64_t m) {
  at::Tensor a = w.detach().abs().movedim(axis, -1).contiguous();
  const int64_t len = a.size(-1);
  PARE_ASSERT(len % m == 0, "N:M on an axis of ", len, " not divisible by ", m);
  at::Tensor groups = a.reshape({-1, m});
  at::Tensor mask = at::zeros_like(groups);
  if (n > 0) {
    at::Tensor idx = std::get<1>(groups.topk(n, 1));
    mask.scatter_(1, idx, 1.0);
  }
  std::vector<int64_t> moved(a.sizes().begin(), a.sizes().end());
  return mask.reshape(moved).movedim(-1, axis).contiguous();
}

// 0 for the `k` smallest entries of `score` (ties broken by position), 1 elsewhere.
at::Tensor lowest_k_mask(const at::Tensor& score, int64_t k) {
  at::Tensor flat = score.reshape({-1});
  at::Tensor mask = at::ones_like(flat);
  if (k > 0) {
    at::Tensor order = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    mask.index_fill_(0, order.narrow(0, 0, k), 0.0);
  }
  return mask.reshape(score.sizes());
}

}  // namespace

Masks compute_masks(const WeightLookup& weights, const std::vector<WeightTarget>& targets,
                    const MaskOptions& opts, std::vector<std::string>* skipped) {
  opts.validate();
  at::NoGradGuard no_grad;
  Masks masks;
  if (opts.method_ == MaskMethod::kNM) {
    for (auto& t : targets) {
      at::Tensor w = weights(t.weight);
      if (w.size(t.in_axis) % opts.m_ != 0) {
        if (skipped) skipped->push_back(t.node);
        continue;
      }
      masks[t.weight] = nm_mask(w, t.in_axis, opts.n_, opts.m_).to(w.dtype());
    }
    return masks;
  }
  if (!opts.global_) {
    for (auto& t : targets) {
      at::Tensor w = weights(t.weight).detach().to(at::kFloat);
      const int64_t k = static_cast<int64_t>(std::floor(opts.sparsity_ * w.numel() + 1e-9));
      masks[t.weight] = lowest_k_mask(w.abs().cpu(), k).to(weights(t.weight).dtype());
    }
    return masks;
  }
  std::vector<at::Tensor> flat;
  int64_t total = 0;
  for (auto& t : targets) {
    at::Tensor w = weights(t.weight).detach().to(at::kFloat).cpu();
    flat.push_back(w.abs().reshape({-1}));
    total += w.numel();
  }
  if (flat.empty()) return masks;
  const int64_t k = static_cast<int64_t>(std::floor(opts.sparsity_ * total + 1e-9));
  at::Tensor all = lowest_k_mask(at::cat(flat), k);
  int64_t off = 0;
  for (auto& t : targets) {
    at::Tensor w = weights(t.weight);
    masks[t.weight] = all.narrow(0, off, w.numel()).reshape(w.sizes()).to(w.dtype()).contiguous();
    off += w.numel();
  }
  return masks;
}

void apply_masks(core::Graph& g, const Masks& masks) {
  at::NoGradGuard no_grad;
  for (auto& [name, mask] : masks) {
    auto it = g.initializers.find(name);
    PARE_ASSERT(it != g.initializers.end(), "mask for unknown initializer '", name, "'");
    it->second = it->second * mask.to(it->second.device());
  }
}

void apply_masks(core::Module& m, const Masks& masks) {
  at::NoGradGuard no_grad;
  for (auto& [name, mask] : masks) {
    at::Tensor w = m.initializer(name);
    w.mul_(mask.to(w.device()));
  }
}

SparsityReport measure_sparsity(const WeightLookup& weights, const std::vector<WeightTarget>& targets) {
  SparsityReport r;
  for (auto& t : targets) {
    at::Tensor w = weights(t.weight);
    SparsityReport::Layer l{t.node, t.weight, w.numel(), w.numel() - w.count_nonzero().item<int64_t>()};
    r.elements += l.elements;
    r.zeros += l.zeros;
    r.layers.push_back(l);
  }
  return r;
}

bool satisfies_nm(const at::Tensor& w, int64_t in_axis, int64_t n, int64_t m) {
  at::Tensor nz = w.detach().ne(0).movedim(in_axis, -1).contiguous();
  const int64_t len = nz.size(-1);
  const int64_t pad = (m - len % m) % m;
  if (pad) nz = at::constant_pad_nd(nz.to(at::kInt), {0, pad}, 0);
  return nz.to(at::kInt).reshape({-1, m}).sum(1).le(n).all().item<bool>();
}

}  // namespace pare::prune
