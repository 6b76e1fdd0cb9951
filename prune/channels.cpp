// The channel analysis: runs every node's "prune.channels" facet over the graph in topological
// order, merging the groups of dimensions that must shrink together (see prune/facets.h).
#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "prune/facets.h"

namespace pare::prune {

ChannelGraph::ChannelGraph(const core::Graph& g, std::set<std::string> exclude)
    : g_(g), exclude_(std::move(exclude)) {
  const core::OpRegistry& reg = prune_registry();
  shapes_ = core::probe_shapes(g_, 2);
  for (const auto& in : g_.inputs) {
    auto& ls = layouts_[in.name];
    for (int64_t d : shape(in.name)) ls.push_back(fixed(d));
  }
  for (const core::Node& n : g_.nodes) {
    const core::OpDef& op = reg.get(n.op_type);
    PARE_CHECK(op.has_facet(kChannelFacet), "channel pruning cannot follow channels through ", n.describe(),
               ": op ", n.op_type, " declares no elementwise, reduction or pooling traits in the op registry and "
               "has no '", kChannelFacet, "' facet");
    op.facet<ChannelFacet>(kChannelFacet).propagate(n, *this);
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      auto& ls = layouts_[o];
      const auto& sh = shape(o);
      PARE_ASSERT(ls.size() >= sh.size(), "channel facet of ", n.describe(), " left output '", o,
                  "' without layouts");
      for (size_t a = 0; a < sh.size(); ++a)
        PARE_ASSERT(!ls[a].empty() && size(ls[a]) == sh[a], "channel facet of ", n.describe(),
                    " gave output '", o, "' axis ", a, " a layout of ", size(ls[a]), " elements, not ", sh[a]);
    }
  }
  for (const auto& out : g_.outputs) {
    const auto& sh = shape(out.name);
    for (size_t a = 0; a < sh.size(); ++a) block(get(out.name, static_cast<int64_t>(a)), "reaches graph output '" + out.name + "'");
  }
}

const std::vector<int64_t>& ChannelGraph::shape(const std::string& value) const {
  auto it = shapes_.find(value);
  PARE_ASSERT(it != shapes_.end(), "no probed shape for '", value, "'");
  return it->second;
}

Layout ChannelGraph::get(const std::string& value, int64_t axis) const {
  const int64_t size_ = shape(value).at(static_cast<size_t>(axis));
  if (is_initializer(value)) {
    auto it = init_dims_.find({value, axis});
    return it == init_dims_.end() ? fixed(size_) : it->second;
  }
  auto it = layouts_.find(value);
  if (it == layouts_.end() || static_cast<size_t>(axis) >= it->second.size() || it->second[axis].empty())
    return fixed(size_);
  return it->second[axis];
}

void ChannelGraph::set(const std::string& value, int64_t axis, Layout l) {
  auto& ls = layouts_[value];
  if (ls.size() <= static_cast<size_t>(axis)) ls.resize(axis + 1);
  ls[axis] = std::move(l);
}

void ChannelGraph::tie(const std::string& name, int64_t axis, const Layout& l, Role role) {
  if (!is_initializer(name)) {
    unify(get(name, axis), l, "value '" + name + "'");
    return;
  }
  auto key = std::make_pair(name, axis);
  auto it = init_dims_.find(key);
  if (it == init_dims_.end())
    init_dims_[key] = l;
  else
    unify(it->second, l, "initializer '" + name + "' used twice");
  bool grouped = std::any_of(l.begin(), l.end(), [](const Segment& s) { return s.group >= 0; });
  if (grouped) members_.push_back({Member::Kind::kTensor, name, axis, "", l, role});
}

Layout ChannelGraph::join(const std::vector<std::pair<std::string, int64_t>>& dims, int64_t size_, Role role) {
  std::optional<Layout> l;
  for (auto& [v, a] : dims) {
    if (is_initializer(v)) continue;
    Layout x = get(v, a);
    if (!l) l = x;
    else unify(*l, x, "value '" + v + "'");
  }
  if (!l) l = fixed(size_);
  for (auto& [v, a] : dims)
    if (is_initializer(v)) tie(v, a, *l, role);
  return *l;
}

Layout ChannelGraph::source(const core::Node& node, int64_t size_) {
  Group grp;
  grp.parent = static_cast<int>(groups_.size());
  grp.size = size_;
  grp.sources = {node.name};
  if (exclude_.count(node.name)) {
    grp.blocked = true;
    grp.reason = "'" + node.name + "' is excluded";
  }
  groups_.push_back(grp);
  return {Segment{grp.parent, 1, 0}};
}

void ChannelGraph::block(const Layout& l, const std::string& why) {
  for (const Segment& s : l)
    if (s.group >= 0) block_root(resolve(s.group).first, why);
}

void ChannelGraph::block_root(int root, const std::string& why) {
  Group& g = groups_[root];
  if (!g.blocked) g.reason = why;
  g.blocked = true;
}

void ChannelGraph::shape_entry(const std::string& name, int64_t index, const Layout& l) {
  members_.push_back({Member::Kind::kShapeEntry, name, index, "", l, Role::kCarry});
}

void ChannelGraph::attr_size(const core::Node& node, const std::string& attr, const Layout& l) {
  members_.push_back({Member::Kind::kAttr, node.name, 0, attr, l, Role::kCarry});
}

std::pair<int, int64_t> ChannelGraph::resolve(int group) const {
  int64_t f = 1;
  while (groups_[group].parent != group) {
    f *= groups_[group].factor;
    group = groups_[group].parent;
  }
  return {group, f};
}

void ChannelGraph::link(int child, int parent, int64_t factor) {
  PARE_ASSERT(child != parent, "linking a group to itself");
  Group &c = groups_[child], &p = groups_[parent];
  c.parent = parent;
  c.factor = factor;
  if (c.blocked) block_root(parent, c.reason);
  p.sources.insert(p.sources.end(), c.sources.begin(), c.sources.end());
}

int64_t ChannelGraph::seg_len(const Segment& s) const {
  if (s.group < 0) return s.count;
  auto [root, f] = resolve(s.group);
  return groups_[root].size * f * s.k;
}

int64_t ChannelGraph::size(const Layout& l) const {
  int64_t n = 0;
  for (const Segment& s : l) n += seg_len(s);
  return n;
}

void ChannelGraph::unify_segments(const Segment& a, const Segment& b, const std::string& why) {
  if (a.group < 0 && b.group < 0) return;
  if (a.group < 0 || b.group < 0) {
    block(a.group < 0 ? Layout{b} : Layout{a}, "meets a dimension that cannot shrink (" + why + ")");
    return;
  }
  auto [ra, fa] = resolve(a.group);
  auto [rb, fb] = resolve(b.group);
  const int64_t ea = fa * a.k, eb = fb * b.k;  // elements per root channel
  if (ra == rb) {
    if (ea != eb) block_root(ra, "a dimension maps its channels two ways (" + why + ")");
    return;
  }
  // Root channel c of the finer group sits inside root channel c / q of the coarser one.
  if (ea == eb && root_size(ra) == root_size(rb)) {
    link(ra, rb, 1);
  } else if (ea < eb && eb % ea == 0 && root_size(ra) == root_size(rb) * (eb / ea)) {
    link(ra, rb, eb / ea);
  } else if (eb < ea && ea % eb == 0 && root_size(rb) == root_size(ra) * (ea / eb)) {
    link(rb, ra, ea / eb);
  } else {
    block_root(ra, "channel layouts do not line up (" + why + ")");
    block_root(rb, "channel layouts do not line up (" + why + ")");
  }
}

void ChannelGraph::unify(const Layout& a, const Layout& b, const std::string& why) {
  if (size(a) != size(b)) {
    block(a, "sizes differ (" + why + ")");
    block(b, "sizes differ (" + why + ")");
    return;
  }
  // Pairwise when the segment boundaries coincide; otherwise every group involved is blocked.
  auto bounds = [&](const Layout& l) {
    std::vector<int64_t> v;
    int64_t off = 0;
    for (const Segment& s : l) v.push_back(off += seg_len(s));
    return v;
  };
  if (a.size() == b.size() && bounds(a) == bounds(b)) {
    for (size_t i = 0; i < a.size(); ++i) unify_segments(a[i], b[i], why);
    return;
  }
  bool af = std::all_of(a.begin(), a.end(), [](const Segment& s) { return s.group < 0; });
  bool bf = std::all_of(b.begin(), b.end(), [](const Segment& s) { return s.group < 0; });
  if (af && bf) return;
  block(a, "segments do not line up (" + why + ")");
  block(b, "segments do not line up (" + why + ")");
}

Layout ChannelGraph::merge(const std::vector<Layout>& dims, const std::vector<int64_t>& sizes, const std::string& why) {
  int64_t total = 1;
  for (int64_t s : sizes) total *= s;
  int grouped = -1, count = 0;
  for (size_t i = 0; i < dims.size(); ++i)
    if (std::any_of(dims[i].begin(), dims[i].end(), [](const Segment& s) { return s.group >= 0; })) {
      grouped = static_cast<int>(i);
      ++count;
    }
  if (count == 0) return fixed(total);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < static_cast<int>(sizes.size()); ++i) (i < grouped ? outer : inner) *= (i == grouped ? 1 : sizes[i]);
  if (count > 1 || outer * static_cast<int64_t>(dims[grouped].size()) > 4096) {
    for (auto& d : dims) block(d, why + ": merges several channel dimensions");
    return fixed(total);
  }
  Layout out;
  for (int64_t o = 0; o < outer; ++o)
    for (Segment s : dims[grouped]) {
      if (s.group < 0) s.count *= inner;
      else s.k *= inner;
      out.push_back(s);
    }
  return out;
}

std::vector<Layout> ChannelGraph::split(const Layout& l, const std::vector<int64_t>& sizes, const std::string& why) {
  std::vector<Layout> out;
  for (int64_t s : sizes) out.push_back(fixed(s));
  if (std::all_of(l.begin(), l.end(), [](const Segment& s) { return s.group < 0; })) return out;
  if (sizes.size() == 1) return {l};
  // One group segment: the first dim larger than 1 carries the channels, the later ones index
  // inside a channel.
  size_t j = 0;
  while (j < sizes.size() && sizes[j] == 1) ++j;
  int64_t trailing = 1;
  for (size_t i = j + 1; i < sizes.size(); ++i) trailing *= sizes[i];
  if (l.size() == 1 && j < sizes.size()) {
    auto [root, f] = resolve(l[0].group);
    const int64_t e = f * l[0].k;  // elements per root channel
    if (trailing == e) {  // dim j indexes the root's channels one to one
      out[j] = {Segment{root, 1, 0}};
      return out;
    }
    if (trailing % e == 0) {
      // Channels come in blocks (heads): a new, coarser group owns the root's channels.
      Group grp;
      grp.parent = static_cast<int>(groups_.size());
      grp.size = sizes[j];
      groups_.push_back(grp);
      link(root, grp.parent, trailing / e);
      out[j] = {Segment{grp.parent, 1, 0}};
      return out;
    }
    if (e % trailing == 0) {
      out[j] = {Segment{root, e / trailing, 0}};
      return out;
    }
  }
  block(l, why + ": splits a channel dimension in a way pare cannot follow");
  return out;
}

bool ChannelGraph::tied_to_blocked(const std::string& name) const {
  for (auto it = init_dims_.lower_bound({name, 0}); it != init_dims_.end() && it->first.first == name; ++it)
    for (const Segment& s : it->second)
      if (s.group >= 0 && groups_[resolve(s.group).first].blocked) return true;
  return false;
}

std::vector<ChannelGraph::GroupInfo> ChannelGraph::groups() const {
  std::vector<GroupInfo> r;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Group& g = groups_[i];
    if (g.parent != static_cast<int>(i)) continue;
    r.push_back({static_cast<int>(i), g.size, g.blocked, g.reason, g.sources});
  }
  return r;
}

std::string ChannelGraph::describe() const {
  std::ostringstream os;
  for (const GroupInfo& gi : groups()) {
    os << "group " << gi.id << ": " << gi.channels << " channels from ";
    for (size_t i = 0; i < gi.sources.size(); ++i) os << (i ? ", " : "") << gi.sources[i];
    if (gi.blocked) os << " (kept: " << gi.reason << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace pare::prune
