// Rewrites a graph into one with fewer channels: ranks the channels of every prunable group
// (prune/facets.h) and slices them out of every member tensor, shape constant and attribute.
#include "prune/structured.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <memory>
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
  throw InputError("importance must be l1, l2, bn-scale or taylor, got '" + s + "'").about("importance");
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

// Gives each node after the first that reads initializer `name` its own copy (named after the
// node), recording the copies' origin. Returns how many copies it made.
int clone_per_consumer(core::Graph& g, const std::string& name, std::map<std::string, std::string>& origin) {
  int copies = 0;
  bool first = true;
  for (auto& n : g.nodes) {
    bool reads = false;
    for (auto& in : n.inputs) reads = reads || in == name;
    if (!reads) continue;
    if (first) {
      first = false;
      continue;
    }
    const std::string copy = g.unique_name(name + "." + n.name);
    g.initializers[copy] = g.initializers.at(name).clone();
    origin[copy] = origin.count(name) ? origin.at(name) : name;
    for (auto& in : n.inputs)
      if (in == name) in = copy;
    ++copies;
  }
  return copies;
}

// torch.onnx.export de-duplicates initializers that are merely equal (a fresh model's zero
// biases) into one tensor read through Identity nodes; tied parameters it writes as one tensor
// read directly. Each Identity(initializer) becomes a copy of its own, so equal constants shrink
// with their own layers. Returns how many.
int copy_constant_identities(core::Graph& g, std::map<std::string, std::string>& origin) {
  int n = 0;
  for (auto it = g.nodes.begin(); it != g.nodes.end();) {
    if (it->op_type == "Identity" && it->inputs.size() == 1 && it->outputs.size() == 1 &&
        g.is_initializer(it->inputs[0]) && !core::is_graph_output(g, it->outputs[0])) {
      const std::string& src = it->inputs[0];
      g.initializers[it->outputs[0]] = g.initializers.at(src).clone();
      origin[it->outputs[0]] = origin.count(src) ? origin.at(src) : src;
      it = g.nodes.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

// After slicing: copies that still equal another copy of the same constant are one tensor again
// (nothing grows where pruning left the constants equal). Returns, per original constant that
// stayed split, how many distinct tensors it became (at least 2).
std::map<std::string, int> merge_equal_copies(core::Graph& g, const std::map<std::string, std::string>& origin) {
  std::map<std::string, std::vector<std::string>> family;  // origin -> its copies and itself
  for (auto& [copy, from] : origin) family[from].push_back(copy);
  std::map<std::string, std::string> rename;
  std::map<std::string, int> split;
  for (auto& [from, copies] : family) {
    std::vector<std::string> names = copies;
    if (g.is_initializer(from)) names.insert(names.begin(), from);
    std::vector<std::string> distinct;
    for (const std::string& c : names) {
      const at::Tensor& t = g.initializers.at(c);
      auto same = std::find_if(distinct.begin(), distinct.end(), [&](const std::string& d) {
        const at::Tensor& u = g.initializers.at(d);
        return u.scalar_type() == t.scalar_type() && u.sizes() == t.sizes() && at::equal(u, t);
      });
      if (same == distinct.end()) distinct.push_back(c);
      else rename[c] = *same;
    }
    if (distinct.size() > 1) split[from] = static_cast<int>(distinct.size());
  }
  for (auto& n : g.nodes)
    for (auto& in : n.inputs) {
      auto it = rename.find(in);
      if (it != rename.end()) in = it->second;
    }
  core::remove_unused_initializers(g);
  return split;
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
  for (const std::string& n : notes) os << "  " << n << "\n";
  return os.str();
}

namespace {

// How many nodes read each initializer.
std::map<std::string, int> initializer_readers(const core::Graph& g) {
  std::map<std::string, int> r;
  for (auto& n : g.nodes)
    for (const auto& in : std::set<std::string>(n.inputs.begin(), n.inputs.end()))
      if (g.is_initializer(in)) ++r[in];
  return r;
}

// Constants that are merely equal: those torch.onnx.export stored once and reads through
// Identity, and tensors of one repeated value (a fresh model's zero biases, which it may also
// read directly from several nodes) carry nothing per channel to keep tied: one copy per reader.
// So does a shape constant shared by several Reshapes (the zoo transformer shares one across
// layers), so each layer can keep its own number of heads. Returns the equal-valued constants
// copied; `origin` maps each copy to the constant it copies.
std::set<std::string> copy_shared_constants(core::Graph& g, std::map<std::string, std::string>& origin) {
  std::set<std::string> equal_constants;
  for (auto& [name, count] : initializer_readers(g)) {
    const at::Tensor& t = g.initializers.at(name);
    if (count > 1 && t.numel() > 1 && at::equal(t, t.reshape(-1)[0].expand_as(t))) equal_constants.insert(name);
  }
  for (auto& n : g.nodes)
    if (n.op_type == "Identity" && n.inputs.size() == 1 && g.is_initializer(n.inputs[0])) equal_constants.insert(n.inputs[0]);
  std::set<std::string> reshape_shapes;
  for (auto& n : g.nodes)
    if (n.op_type == "Reshape" && n.has_input(1) && g.is_initializer(n.inputs[1])) reshape_shapes.insert(n.inputs[1]);
  copy_constant_identities(g, origin);
  for (const auto& s : equal_constants) clone_per_consumer(g, s, origin);
  for (const auto& s : reshape_shapes) clone_per_consumer(g, s, origin);
  return equal_constants;
}

// The channel graph of `g`. A weight read by several nodes stays tied while its readers shrink
// together. One tied to a group that cannot shrink is cloned per reader (listed in `untied`) and
// the graph analysed again: where the tie was what kept a group whole, the copies now shrink
// apart; elsewhere they stay equal and are one tensor again after slicing.
std::unique_ptr<ChannelGraph> analyse(core::Graph& g, const std::vector<std::string>& exclude,
                                      std::map<std::string, std::string>& origin, std::vector<std::string>& untied) {
  const std::set<std::string> excluded(exclude.begin(), exclude.end());
  auto cg = std::make_unique<ChannelGraph>(g, excluded);
  for (auto& [name, count] : initializer_readers(g))
    if (count > 1 && cg->tied_to_blocked(name)) untied.push_back(name);
  for (const auto& name : untied) clone_per_consumer(g, name, origin);
  if (!untied.empty()) cg = std::make_unique<ChannelGraph>(g, excluded);
  return cg;
}

// Every excluded name must be a node that creates channels.
void check_excluded_sources(const std::vector<ChannelGraph::GroupInfo>& infos, const std::vector<std::string>& exclude) {
  for (const auto& e : exclude) {
    std::string sources;
    bool found = false;
    for (const auto& gi : infos)
      for (const auto& s : gi.sources) {
        found = found || s == e;
        sources += (sources.empty() ? "" : ", ") + s;
      }
    PARE_CHECK_OPTION(found, "exclude", "'", e,
                      "': node creates no channels (only Conv, Gemm and MatMul nodes with a weight do: ", sources, ")");
  }
}

// The importance of each channel of group `gi`: summed over the members that compute it (or its
// BatchNorm scales). `crit` may fall back from bn-scale to l1 where the group has no scale.
at::Tensor channel_scores(const ChannelGraph& cg, const core::Graph& g, const ChannelGraph::GroupInfo& gi,
                          Importance& crit, const ChannelOptions& opts,
                          const std::map<std::string, std::string>& origin) {
  const auto& members = cg.members();
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
      auto it = opts.taylor_->find(origin.count(m.name) ? origin.at(m.name) : m.name);
      if (it == opts.taylor_->end()) continue;
      w = it->second.detach().to(at::kDouble).cpu();
    }
    for (const Span& sp : spans(cg, m.layout)) {
      if (sp.root != gi.id) continue;
      at::Tensor v = per_channel(w, m.axis, sp);
      score += crit == Importance::kL2 ? v.pow(2).sum(1) : crit == Importance::kTaylor ? v.sum(1).pow(2) : v.abs().sum(1);
    }
  }
  return crit == Importance::kL2 ? score.sqrt() : score;
}

// Chooses the channels each unblocked group keeps (root -> sorted channel indices), recording a
// GroupResult per group in `result`.
std::map<int, std::vector<int64_t>> choose_channels(const ChannelGraph& cg,
                                                    const std::vector<ChannelGraph::GroupInfo>& infos,
                                                    const core::Graph& g, const ChannelOptions& opts,
                                                    const std::map<std::string, std::string>& origin,
                                                    ChannelPruneResult& result) {
  std::map<int, std::vector<int64_t>> kept;
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
    const int64_t keep = gi.channels - static_cast<int64_t>(std::floor(opts.sparsity_ * gi.channels + 1e-9));
    std::string src_names;
    for (auto& s : gi.sources) src_names += (src_names.empty() ? "" : ", ") + s;
    if (keep < 1)
      throw InputError(pare::detail::concat("structured pruning at sparsity ", opts.sparsity_,
                                      " would remove every one of the ", gi.channels, " channels of ", src_names,
                                      "; use a lower sparsity or exclude ",
                                      gi.sources.empty() ? "" : gi.sources.front()))
          .about("sparsity")
          .about("exclude");
    Importance crit = opts.importance_;
    at::Tensor score = channel_scores(cg, g, gi, crit, opts, origin);
    at::Tensor order = std::get<1>(score.sort(/*stable=*/true, 0, /*descending=*/true));
    std::vector<int64_t> k = core::to_int_vector(order.narrow(0, 0, keep));
    std::sort(k.begin(), k.end());
    kept[gi.id] = k;
    gr.after = keep;
    gr.kept = k;
    gr.criterion = importance_name(crit);
    result.groups.push_back(gr);
  }
  return kept;
}

// Slices every member (tensor dims, shape entries, attributes) down to the kept channels.
void slice_members(core::Graph& g, const ChannelGraph& cg, const std::map<int, std::vector<int64_t>>& kept) {
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
  for (const Member& m : cg.members()) {
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
}

}  // namespace

ChannelPruneResult prune_channels(const core::Graph& src, const ChannelOptions& opts) {
  PARE_CHECK_OPTION(std::isfinite(opts.sparsity_) && opts.sparsity_ >= 0 && opts.sparsity_ <= 1, "sparsity",
                    "must lie in [0, 1] (a fraction of the channels), got ", opts.sparsity_);
  core::Graph g = src;
  {
    std::set<std::string> names;
    for (auto& n : g.nodes) names.insert(n.name);
    for (auto& e : opts.exclude_)
      PARE_CHECK_OPTION(names.count(e), "exclude", "'", e, "': model '", g.name, "' has no node of that name");
  }
  std::map<std::string, std::string> origin;  // copy -> the constant it copies (see merge_equal_copies)
  const std::set<std::string> equal_constants = copy_shared_constants(g, origin);
  std::vector<std::string> untied;
  const std::unique_ptr<ChannelGraph> cg = analyse(g, opts.exclude_, origin, untied);
  const auto infos = cg->groups();
  check_excluded_sources(infos, opts.exclude_);
  ChannelPruneResult result;
  const std::map<int, std::vector<int64_t>> kept = choose_channels(*cg, infos, g, opts, origin, result);
  PARE_CHECK(std::any_of(infos.begin(), infos.end(), [](const auto& gi) { return !gi.blocked; }),
             "model '", g.name, "' has no channels that structured pruning can remove:\n", cg->describe());
  slice_members(g, *cg, kept);

  const std::map<std::string, int> split = merge_equal_copies(g, origin);
  if (!equal_constants.empty()) {
    int after = 0;
    for (const auto& c : equal_constants) after += split.count(c) ? split.at(c) : 1;
    result.notes.push_back(std::to_string(equal_constants.size()) +
                           " equal-valued constants stored once for several readers (torch.onnx.export "
                           "de-duplicates them) were copied per reader, so each layer shrinks on its own; "
                           "equal copies are stored once again: " + std::to_string(after) + " tensors now");
  }
  for (const auto& name : untied)
    if (split.count(name))
      result.notes.push_back("tied weight '" + name + "' was cloned per reader (" + std::to_string(split.at(name)) +
                             " tensors now): tied, its readers' channels could not shrink");
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

TaylorScores taylor_scores(core::Module& m, const core::TensorDataset& data, int64_t batch_size, int64_t batches) {
  PARE_CHECK_OPTION(batches >= 1, "taylor_batches", "must be at least 1, got ", batches);
  core::require_labels(data, "taylor importance (gradients of the loss)");
  PARE_CHECK(data.size() >= 1, "taylor importance needs data; '", data.name, "' is empty");
  m.train();
  const int64_t bs = std::max<int64_t>(1, std::min<int64_t>(batch_size, data.size()));
  int64_t b = 0;
  return taylor_scores(m, [&] {
    const int64_t start = (b++ * bs) % std::max<int64_t>(1, data.size() - bs + 1);
    at::Tensor logits = m.forward({data.x.narrow(0, start, bs)}).at(0);
    return at::cross_entropy_loss(logits, data.y.narrow(0, start, bs));
  }, batches);
}

}  // namespace pare::prune
