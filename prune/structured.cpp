// Rewrites a graph into one with fewer channels: ranks the channels of every prunable group
// (prune/facets.h) and slices them out of every member tensor, shape constant and attribute.
#include "prune/structured.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/module.h"
#include "prune/facets.h"

namespace pare::prune {

Importance parse_importance(const std::string& s) {
  if (s == "l1") return Importance::kL1;
  if (s == "l2") return Importance::kL2;
  if (s == "bn-scale") return Importance::kBnScale;
  if (s == "taylor") return Importance::kTaylor;
  throw InputError("--importance must be l1, l2, bn-scale or taylor, got '" + s + "'");
}

const char* importance_name(Importance i) {
  switch (i) {
    case Importance::kL1: return "l1";
    case Importance::kL2: return "l2";
    case Importance::kBnScale: return "bn-scale";
    case Importance::kTaylor: return "taylor";
  }
  return "?";
}

namespace {

struct Span {
  int64_t offset, len, per_channel;  // elements of the dim, per root channel
  int root;                          // -1: fixed
};

std::vector<Span> spans(const ChannelGraph& cg, const Layout& l) {
  std::vector<Span> out;
  int64_t off = 0;
  for (const Segment& s : l) {
    if (s.group < 0) {
      out.push_back({off, s.count, 1, -1});
      off += s.count;
      continue;
    }
    auto [root, f] = cg.resolve(s.group);
    const int64_t e = f * s.k;
    const int64_t len = cg.size(Layout{s});
    out.push_back({off, len, e, root});
    off += len;
  }
  return out;
}

// [channels, rest] view of the part of `t` along `axis` that one span covers.
at::Tensor per_channel(const at::Tensor& t, int64_t axis, const Span& sp) {
  return t.narrow(axis, sp.offset, sp.len).movedim(axis, 0).reshape({sp.len / sp.per_channel, -1});
}

}  // namespace

std::string ChannelPruneResult::report() const {
  std::ostringstream os;
  for (const GroupResult& g : groups) {
    os << "  ";
    for (size_t i = 0; i < g.sources.size() && i < 4; ++i) os << (i ? ", " : "") << g.sources[i];
    if (g.sources.size() > 4) os << " and " << g.sources.size() - 4 << " more";
    if (g.blocked) os << ": " << g.before << " channels kept (" << g.reason << ")\n";
    else os << ": " << g.before << " -> " << g.after << " channels (" << g.criterion << ")\n";
  }
  return os.str();
}

ChannelPruneResult prune_channels(const core::Graph& src, const ChannelOptions& opts) {
  PARE_CHECK(std::isfinite(opts.sparsity_) && opts.sparsity_ >= 0 && opts.sparsity_ <= 1,
             "--sparsity must lie in [0, 1] (a fraction of the channels), got ", opts.sparsity_);
  core::Graph g = src;
  {
    std::set<std::string> names;
    for (auto& n : g.nodes) names.insert(n.name);
    for (auto& e : opts.exclude_)
      PARE_CHECK(names.count(e), "--exclude '", e, "': model '", g.name, "' has no node of that name");
  }
  // A shape constant shared by several Reshapes (the zoo transformer shares one across layers)
  // gets one copy per Reshape, so each layer can keep its own number of heads.
  std::map<std::string, int> uses;
  for (auto& n : g.nodes)
    for (auto& in : n.inputs) ++uses[in];
  for (auto& n : g.nodes)
    if (n.op_type == "Reshape" && n.has_input(1) && g.is_initializer(n.inputs[1]) && uses[n.inputs[1]] > 1) {
      std::string copy = g.unique_name(n.inputs[1] + "." + n.name);
      g.initializers[copy] = g.initializers[n.inputs[1]].clone();
      --uses[n.inputs[1]];
      n.inputs[1] = copy;
    }

  ChannelGraph cg(g, std::set<std::string>(opts.exclude_.begin(), opts.exclude_.end()));
  const auto infos = cg.groups();
  for (const auto& e : opts.exclude_) {
    std::string sources;
    bool found = false;
    for (const auto& gi : infos)
      for (const auto& s : gi.sources) {
        found = found || s == e;
        sources += (sources.empty() ? "" : ", ") + s;
      }
    PARE_CHECK(found, "--exclude '", e, "': node creates no channels (only Conv, Gemm and MatMul nodes with a weight do: ",
               sources, ")");
  }
  const auto& members = cg.members();
  ChannelPruneResult result;
  std::map<int, std::vector<int64_t>> kept;  // root -> kept channels
  for (const auto& gi : infos) {
    GroupResult gr;
    gr.sources = gi.sources;
    gr.before = gr.after = gi.channels;
    gr.blocked = gi.blocked;
    gr.reason = gi.reason;
    if (gi.blocked) {
      result.groups.push_back(gr);
      continue;
    }
    const int64_t remove = static_cast<int64_t>(std::floor(opts.sparsity_ * gi.channels + 1e-9));
    const int64_t keep = gi.channels - remove;
    std::string src_names;
    for (auto& s : gi.sources) src_names += (src_names.empty() ? "" : ", ") + s;
    PARE_CHECK(keep >= 1, "structured pruning at sparsity ", opts.sparsity_, " would remove every one of the ",
               gi.channels, " channels of ", src_names, "; use a sparsity below 1 or --exclude ",
               gi.sources.empty() ? "" : gi.sources.front());
    // Importance of each channel: summed over the members that compute it (or BN scales).
    Importance crit = opts.importance_;
    auto has_role = [&](Role r) {
      for (const Member& m : members)
        if (m.kind == Member::Kind::kTensor && m.role == r)
          for (const Span& sp : spans(cg, m.layout))
            if (sp.root == gi.id) return true;
      return false;
    };
    if (crit == Importance::kBnScale && !has_role(Role::kScale)) crit = Importance::kL1;
    at::Tensor score = at::zeros({gi.channels}, at::kDouble);
    std::set<std::pair<std::string, int64_t>> done;
    for (const Member& m : members) {
      if (m.kind != Member::Kind::kTensor) continue;
      const bool wanted = crit == Importance::kBnScale ? m.role == Role::kScale : m.role == Role::kProduce;
      if (!wanted || !done.insert({m.name, m.axis}).second) continue;
      at::Tensor w = g.initializers.at(m.name).detach().to(at::kDouble);
      if (crit == Importance::kTaylor) {
        PARE_CHECK(opts.taylor_ != nullptr, "taylor importance needs gradients (data)");
        auto it = opts.taylor_->find(m.name);
        if (it == opts.taylor_->end()) continue;
        w = it->second.detach().to(at::kDouble).cpu();
      }
      for (const Span& sp : spans(cg, m.layout)) {
        if (sp.root != gi.id) continue;
        at::Tensor v = per_channel(w, m.axis, sp);
        at::Tensor s = crit == Importance::kL2 ? v.pow(2).sum(1)
                       : crit == Importance::kTaylor ? v.sum(1).pow(2)
                                                     : v.abs().sum(1);
        score += s;
      }
    }
    if (crit == Importance::kL2) score = score.sqrt();
    at::Tensor order = std::get<1>(score.sort(/*stable=*/true, 0, /*descending=*/true));
    std::vector<int64_t> k = core::to_int_vector(order.narrow(0, 0, keep));
    std::sort(k.begin(), k.end());
    kept[gi.id] = k;
    gr.after = keep;
    gr.kept = k;
    gr.criterion = importance_name(crit);
    result.groups.push_back(gr);
  }
  PARE_CHECK(!infos.empty() && std::any_of(infos.begin(), infos.end(), [](const auto& gi) { return !gi.blocked; }),
             "model '", g.name, "' has no channels that structured pruning can remove:\n", cg.describe());

  // Element indices of a dim that survive, and its new size.
  auto surviving = [&](const Layout& l) {
    std::vector<int64_t> idx;
    for (const Span& sp : spans(cg, l)) {
      auto it = sp.root < 0 ? kept.end() : kept.find(sp.root);
      if (it == kept.end()) {
        for (int64_t i = 0; i < sp.len; ++i) idx.push_back(sp.offset + i);
        continue;
      }
      for (int64_t c : it->second)
        for (int64_t r = 0; r < sp.per_channel; ++r) idx.push_back(sp.offset + c * sp.per_channel + r);
    }
    return idx;
  };
  std::set<std::pair<std::string, int64_t>> sliced;
  for (const Member& m : members) {
    if (m.kind == Member::Kind::kTensor) {
      if (!sliced.insert({m.name, m.axis}).second) continue;
      at::Tensor& t = g.initializers.at(m.name);
      std::vector<int64_t> idx = surviving(m.layout);
      if (static_cast<int64_t>(idx.size()) == t.size(m.axis)) continue;
      t = t.index_select(m.axis, at::tensor(idx, at::kLong)).contiguous();
    } else if (m.kind == Member::Kind::kShapeEntry) {
      at::Tensor& t = g.initializers.at(m.name);
      at::Tensor c = t.clone();
      c.view({-1})[m.axis] = static_cast<int64_t>(surviving(m.layout).size());
      t = c;
    } else {
      for (auto& n : g.nodes)
        if (n.name == m.name) n.attrs[m.attr] = static_cast<int64_t>(surviving(m.layout).size());
    }
  }
  g.value_info.clear();
  core::infer_shapes(g);
  g.verify();
  result.graph = std::move(g);
  return result;
}

TaylorScores taylor_scores(core::Module& m, const std::function<at::Tensor()>& loss, int64_t batches) {
  TaylorScores acc;
  const auto& params = m.parameters();
  const auto& names = m.parameter_names();
  for (int64_t b = 0; b < batches; ++b) {
    for (auto& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    loss().backward();
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      at::Tensor gw = (params[i].grad() * params[i]).detach().cpu();
      auto it = acc.find(names[i]);
      if (it == acc.end()) acc[names[i]] = gw;
      else it->second += gw;
    }
  }
  for (auto& p : params)
    if (p.grad().defined()) p.mutable_grad().zero_();
  return acc;
}

}  // namespace pare::prune
