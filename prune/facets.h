// prune/'s facets on the op registry, and the channel analysis they feed.
//
// Two facets, attached to every op by attach_prune_facets() (prune/facets.cpp):
//   "prune.weight"    (WeightFacet)   which input is the op's prunable weight and which of its
//                                      axes runs along the op's input (reduction) dimension;
//                                      used by unstructured and N:M pruning. Read from the
//                                      op's weight declaration (core::OpDef::weights).
//   "prune.channels"  (ChannelFacet)  how channel dimensions flow through the op: which output
//                                      dims follow which input dims, which dims a node creates
//                                      (Conv output channels, Gemm hidden units), which it
//                                      forbids shrinking (a Softmax axis, LayerNorm's normalized
//                                      dims). Every core op has one; opaque ops (the core
//                                      trait opaque_channels) block every dimension and are
//                                      marked unsupported.
//
// The channel analysis (ChannelGraph) walks the graph in topological order and runs each node's
// channel facet. A channel dimension's Layout says which channel groups its elements belong to:
// after Flatten a conv channel spans H*W consecutive features, after Concat a dimension is two
// groups side by side, after a Reshape that splits D into heads x head_dim the group is the
// heads. Groups that must shrink together are merged (union-find); a group touching a graph
// input or output, an unsupported op or a forbidden axis is blocked. The structured pass
// (prune/structured.h) then removes channels of the unblocked groups from every tensor, shape
// constant and attribute that the facets recorded as members.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::prune {

inline constexpr const char* kWeightFacet = "prune.weight";
inline constexpr const char* kChannelFacet = "prune.channels";

/// Attaches prune's facets to one op: its prunable weight from the op's weight declaration in
/// core (OpDef::weights), channel propagation by name or, for elementwise, reduction, pooling and
/// opaque ops, by core traits; the axes a channel rule ties come from the weight declaration.
void attach_prune_facets(core::OpDef& op);
/// The global registry with attach_prune_facets as a facet provider (added once, thread-safe): every
/// op, registered before or after, has prune's facets.
const core::OpRegistry& prune_registry();

/// The prunable weight of one node.
struct WeightRole {
  int input = 1;        ///< node input that holds the weight (an initializer)
  int64_t in_axis = 1;  ///< weight axis along the op's input (reduction) dimension
};
struct WeightFacet {
  /// The node's weight role, or nullopt when it has none (a MatMul of two activations).
  std::function<std::optional<WeightRole>(const core::Node&, const core::Graph&)> role;
};

/// A run of elements of one tensor dimension: every channel of `group` spans `k` consecutive
/// elements (group >= 0), or `count` elements that belong to no group (group -1, "fixed").
struct Segment {
  int group = -1;
  int64_t k = 1;
  int64_t count = 0;
};
/// A tensor dimension as consecutive segments.
using Layout = std::vector<Segment>;

/// How a member tensor relates to its channel group.
enum class Role {
  kProduce,  ///< computes the channels (Conv/Gemm output rows, their bias): importance comes from here
  kConsume,  ///< reads the channels (a Conv/Gemm weight's input axis): zeroing it removes their effect
  kCarry,    ///< per-channel parameters on the way (BatchNorm shift and statistics, a depthwise kernel)
  kScale,    ///< BatchNorm scale (used by the bn-scale importance)
};

class ChannelGraph;

/// How channels flow through one op (see the file comment).
struct ChannelFacet {
  /// Reads the layouts of the node's inputs from `cg` and declares its outputs' layouts, its
  /// members and its constraints. Must set a layout for every dimension of every output.
  std::function<void(const core::Node&, ChannelGraph&)> propagate;
  /// False for ops marked unsupported: their propagate blocks every dimension they touch.
  bool supported = true;
};

/// A tensor, shape-constant entry or attribute that changes when a group loses channels.
struct Member {
  enum class Kind { kTensor, kShapeEntry, kAttr } kind = Kind::kTensor;
  std::string name;   ///< initializer (kTensor, kShapeEntry) or node name (kAttr)
  int64_t axis = 0;   ///< tensor axis (kTensor), entry index (kShapeEntry)
  std::string attr;   ///< kAttr: the integer attribute set to the layout's new size
  Layout layout;
  Role role = Role::kCarry;
};

/// The channel analysis of one graph (see the file comment). Facets call the methods in the
/// first block; the pass reads the results through the second.
class ChannelGraph {
 public:
  /// Probes `g`'s shapes (batch 2) and runs every node's channel facet. Nodes named in
  /// `exclude` create blocked groups. Throws Error naming an op without a channel facet.
  explicit ChannelGraph(const core::Graph& g, std::set<std::string> exclude = {});

  // ---- for facets -------------------------------------------------------------------------
  const core::Graph& graph() const { return g_; }
  /// Concrete sizes of a value or initializer at the probe batch.
  const std::vector<int64_t>& shape(const std::string& value) const;
  int64_t rank(const std::string& value) const { return static_cast<int64_t>(shape(value).size()); }
  bool is_initializer(const std::string& name) const { return g_.is_initializer(name); }
  /// Layout of dimension `axis` of a value (fixed for graph inputs, and for initializer dims not
  /// yet tied to a group).
  Layout get(const std::string& value, int64_t axis) const;
  /// Declares the layout of an output dimension.
  void set(const std::string& value, int64_t axis, Layout l);
  /// Declares that dimension `axis` of `name` has layout `l`: merges the groups when the value
  /// already has one, and records initializers as members with `role`.
  void tie(const std::string& name, int64_t axis, const Layout& l, Role role = Role::kCarry);
  /// The layout shared by a set of dimensions that must be equal (elementwise broadcasting,
  /// concat's other axes, a contraction): merges the values' layouts and ties the initializers'
  /// dims to the result. Fixed of `size` when no value takes part.
  Layout join(const std::vector<std::pair<std::string, int64_t>>& dims, int64_t size, Role role = Role::kCarry);
  /// A new group of `size` channels created by `node` (blocked when the node is excluded).
  Layout source(const core::Node& node, int64_t size);
  /// Forbids shrinking every group in `l`, saying why.
  void block(const Layout& l, const std::string& why);
  /// Records that entry `index` of the shape initializer `name` holds the size of `l`.
  void shape_entry(const std::string& name, int64_t index, const Layout& l);
  /// Records that integer attribute `attr` of `node` holds the size of `l`.
  void attr_size(const core::Node& node, const std::string& attr, const Layout& l);
  /// Makes two layouts of the same dimension one (merging or blocking groups).
  void unify(const Layout& a, const Layout& b, const std::string& why);
  /// The layout of the dimension formed by merging dims of the given layouts and sizes (row
  /// major, as Flatten and Reshape do).
  Layout merge(const std::vector<Layout>& dims, const std::vector<int64_t>& sizes, const std::string& why);
  /// Layouts of the dims of `sizes` that split one dimension of layout `l` (row major).
  std::vector<Layout> split(const Layout& l, const std::vector<int64_t>& sizes, const std::string& why);

  static Layout fixed(int64_t size) { return {Segment{-1, 1, size}}; }
  /// Number of elements of a layout.
  int64_t size(const Layout& l) const;

  // ---- results ------------------------------------------------------------------------------
  struct GroupInfo {
    int id = 0;
    int64_t channels = 0;
    bool blocked = false;
    std::string reason;                // why it is blocked
    std::vector<std::string> sources;  // nodes that create its channels
  };
  /// Every root group (one per set of dims that shrink together).
  std::vector<GroupInfo> groups() const;
  /// Root group of `group`, and how many consecutive elements of `group` one root channel spans
  /// per element of `group`'s channel (group channel c <-> root channel c / factor).
  std::pair<int, int64_t> resolve(int group) const;
  const std::vector<Member>& members() const { return members_; }
  /// True when a dimension of initializer `name` is tied to a group that cannot shrink (for a
  /// weight read by several nodes: tying may be what keeps the group whole).
  bool tied_to_blocked(const std::string& name) const;
  /// Human-readable summary: one line per group.
  std::string describe() const;

 private:
  struct Group {
    int parent = -1;
    int64_t factor = 1;
    int64_t size = 0;
    bool blocked = false;
    std::string reason;
    std::vector<std::string> sources;
  };
  int64_t root_size(int root) const { return groups_[root].size; }
  void link(int child, int parent, int64_t factor);
  void block_root(int root, const std::string& why);
  void unify_segments(const Segment& a, const Segment& b, const std::string& why);
  int64_t seg_len(const Segment& s) const;

  const core::Graph& g_;
  std::set<std::string> exclude_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::vector<Layout>> layouts_;  // value -> layout per axis
  std::map<std::pair<std::string, int64_t>, Layout> init_dims_;  // tied initializer dims
  std::vector<Group> groups_;
  std::vector<Member> members_;
};

}  // namespace pare::prune
