#include "distill/student.h"

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"

namespace pare::distill {

namespace {

constexpr const char* kPrefix = "from-teacher:";

std::string join_ints(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace

std::vector<int64_t> derived_layers(const std::string& spec) {
  PARE_CHECK(is_derived_spec(spec), "'", spec, "' is not a from-teacher: student spec");
  const std::string body = spec.substr(std::string(kPrefix).size());
  PARE_CHECK(body.rfind("layers=", 0) == 0, "student '", spec,
             "': expected from-teacher:layers=I,J,... (the teacher layers to keep)");
  std::vector<int64_t> layers;
  std::stringstream ss(body.substr(7));
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PARE_CHECK(used == item.size() && !item.empty() && v >= 0, "student '", spec, "': layer '", item,
               "' is not a layer index (a non-negative integer)");
    PARE_CHECK(layers.empty() || v > layers.back(), "student '", spec,
               "': list the layers to keep in ascending order, each once");
    layers.push_back(v);
  }
  PARE_CHECK(!layers.empty(), "student '", spec, "': keep at least one layer");
  return layers;
}

namespace {

// The values a set of nodes reads from outside itself (initializers excluded) and the values it
// produces that something outside it reads (or that are graph outputs). A Constant node's value
// counts as neither: exporters store an equal constant once (PyTorch 2.x's TorchScript exporter
// names it after the first layer that uses it and feeds every later layer from there), so it is
// data of the graph, like an initializer, whichever layer's name it carries.
struct Boundary {
  std::vector<std::string> in, out;
};

Boundary boundary(const core::Graph& g, const std::vector<int>& block) {
  std::set<int> members(block.begin(), block.end());
  std::set<std::string> produced;
  for (int i : block)
    for (auto& o : g.nodes[i].outputs) produced.insert(o);
  Boundary b;
  std::set<std::string> seen;
  for (int i : block)
    for (auto& v : g.nodes[i].inputs)
      if (!v.empty() && !produced.count(v) && !g.is_initializer(v) && seen.insert(v).second)
        b.in.push_back(v);
  std::set<std::string> graph_outputs;
  for (auto& o : g.outputs) graph_outputs.insert(o.name);
  for (int i : block)
    for (auto& o : g.nodes[i].outputs) {
      if (g.nodes[i].op_type == "Constant") continue;
      bool outside = graph_outputs.count(o) > 0;
      for (int c : g.consumers(o)) outside = outside || !members.count(c);
      if (outside) b.out.push_back(o);
    }
  return b;
}

}  // namespace

bool is_derived_spec(const std::string& spec) { return spec.rfind(kPrefix, 0) == 0; }

LayerBlocks find_layer_blocks(const core::Graph& g, const std::string& what_arg) {
  const std::string what = what_arg.empty() ? "graph '" + g.name + "'" : what_arg;
  // A layer index: a number after "layer(s)", "block(s)" or "h", at a name-part boundary.
  static const std::regex re(R"((^|[./_])(layers?|blocks?|h)[._]?(\d+)(?=[./_]|$))");
  std::map<std::string, LayerBlocks> families;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::smatch m;
    const std::string& name = g.nodes[i].name;
    if (!std::regex_search(name, m, re)) continue;
    const std::string prefix = name.substr(0, static_cast<size_t>(m.position(3)));
    auto& fam = families[prefix];
    fam.prefix = prefix;
    fam.nodes[std::stoll(m.str(3))].push_back(static_cast<int>(i));
  }
  const LayerBlocks* best = nullptr;
  bool tie = false;
  for (auto& [prefix, fam] : families) {
    if (!best || fam.nodes.size() > best->nodes.size()) {
      best = &fam;
      tie = false;
    } else if (fam.nodes.size() == best->nodes.size()) {
      tie = true;
    }
  }
  PARE_CHECK(best && best->nodes.size() >= 2,
             what, " has no repeated layers (node names such as layer0.*, layer1.* or "
             "/layers.0/*, /layers.1/*)");
  PARE_CHECK(!tie, what, " has several families of layers with ", best->nodes.size(),
             " layers each; cannot tell which to thin");
  return *best;
}

core::Graph derive_student(const core::Graph& teacher, const std::string& spec,
                           const std::string& teacher_name) {
  const std::vector<int64_t> keep = derived_layers(spec);
  core::Graph g = teacher;
  LayerBlocks blocks = find_layer_blocks(g, teacher_name.empty() ? "" : "teacher '" + teacher_name + "'");
  std::vector<int64_t> have;
  for (auto& kv : blocks.nodes) have.push_back(kv.first);
  for (int64_t k : keep)
    PARE_CHECK(blocks.nodes.count(k), "student '", spec, "': the teacher has no layer ", k,
               " (its layers, named ", blocks.prefix, "<i>: ", join_ints(have), ")");

  const auto shapes = core::probe_shapes(g);
  std::set<int> dropped_nodes;
  for (auto& [index, block] : blocks.nodes) {
    if (std::find(keep.begin(), keep.end(), index) != keep.end()) continue;
    const std::string layer = "layer " + std::to_string(index) + " ('" + blocks.prefix + std::to_string(index) + "')";
    Boundary b = boundary(g, block);
    PARE_CHECK(b.out.size() == 1, "student '", spec, "': cannot drop ", layer, ": it has ",
               b.out.size(), " values read outside it, not one");
    const auto& out_shape = shapes.at(b.out[0]);
    std::vector<std::string> same;
    for (auto& v : b.in)
      if (shapes.at(v) == out_shape) same.push_back(v);
    PARE_CHECK(same.size() == 1, "student '", spec, "': cannot drop ", layer, ": ",
               same.empty() ? "no value flowing into it has the shape of its output " + b.out[0]
                            : "several values flowing into it have the shape of its output " + b.out[0],
               " (only layers on a residual stream, same shape in and out, can be dropped)");
    for (auto& o : g.outputs)
      PARE_CHECK(o.name != b.out[0], "student '", spec, "': cannot drop ", layer,
                 ": its output is the graph output");
    for (int c : g.consumers(b.out[0]))
      for (auto& in : g.nodes[c].inputs)
        if (in == b.out[0]) in = same[0];
    dropped_nodes.insert(block.begin(), block.end());
  }
  // A dropped layer's Constant nodes stay when a kept node reads them (Boundary says why).
  for (auto it = dropped_nodes.begin(); it != dropped_nodes.end();) {
    bool read = false;
    if (g.nodes[*it].op_type == "Constant")
      for (auto& o : g.nodes[*it].outputs)
        for (int c : g.consumers(o)) read = read || !dropped_nodes.count(c);
    it = read ? dropped_nodes.erase(it) : std::next(it);
  }

  std::vector<core::Node> kept;
  std::set<std::string> removed_values;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dropped_nodes.count(static_cast<int>(i))) {
      for (auto& o : g.nodes[i].outputs) removed_values.insert(o);
    } else {
      kept.push_back(std::move(g.nodes[i]));
    }
  }
  g.nodes = std::move(kept);
  std::set<std::string> used;
  for (auto& n : g.nodes)
    for (auto& v : n.inputs) used.insert(v);
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = used.count(it->first) ? std::next(it) : g.initializers.erase(it);
  g.value_info.erase(std::remove_if(g.value_info.begin(), g.value_info.end(),
                                    [&](const core::ValueInfo& v) { return removed_values.count(v.name) > 0; }),
                     g.value_info.end());
  g.metadata.erase("pare.zoo_spec");
  g.metadata["pare.derived_from"] = spec;
  g.verify();
  return g;
}

}  // namespace pare::distill
