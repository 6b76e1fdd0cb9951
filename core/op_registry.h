// The op registry: every op pare knows is declared here once, with its arity, attributes, a
// libtorch forward that works under autograd, and a FLOP count. Other modules attach their own
// facets to the same entry (quantize/ its policy, prune/ its weight roles and channel
// propagation) and look them up by name; a missing facet throws an error that names the op and
// the facet. (pare_rt, in rt/, has its own kernel table: it links no libtorch.)
//
//   auto& reg = OpRegistry::global();          // core ops registered on first use
//   const OpDef& conv = reg.get("Conv");
//   auto y = conv.forward(node, {x, w, b}, ctx);
//   reg.add_facet_provider([](OpDef& op) { if (op.name == "Conv") op.set_facet("my.rule", MyRule{...}); });
#pragma once

#include <ATen/ATen.h>

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/graph.h"

namespace pare::core {

/// A collective across the ranks that run shards of one graph (dist/shard.h): the forward of the
/// com.microsoft AllReduce / AllGather nodes a tensor-parallel shard holds.
using CollectiveFn = std::function<at::Tensor(const Node&, const at::Tensor&)>;

/// What a forward needs besides its inputs.
struct RunContext {
  bool training = false;  ///< BatchNorm uses batch statistics and updates running ones; Dropout drops
  CollectiveFn collective;  ///< empty outside a sharded run
};

/// An attribute an op accepts. verify() rejects attributes that are not declared.
struct AttrSpec {
  std::string name;
  AttrKind kind;
  bool required = false;
};

/// Forward: inputs in node order (an omitted optional input is an undefined tensor); returns one
/// tensor per node output (an output the op does not produce may be undefined).
using ForwardFn = std::function<std::vector<at::Tensor>(const Node&, const std::vector<at::Tensor>&,
                                                        const RunContext&)>;

/// FLOPs of one application with the given concrete input and output sizes
/// (multiply-add counts as 2; elementwise ops count one per output element).
using FlopsFn = std::function<int64_t(const Node&, const std::vector<std::vector<int64_t>>& in,
                                      const std::vector<std::vector<int64_t>>& out)>;

/// How an op's output elements relate to its inputs' elements. Passes that follow dimensions
/// through a graph (channel pruning, tensor parallelism) read these instead of lists of op names.
struct OpTraits {
  enum class Elementwise {
    kNo,
    kUnary,      ///< output 0 [i] = f(input 0 [i]); other inputs are scalars (Clip, Dropout)
    kBroadcast,  ///< output [i] = f(a[i], b[i], ...), every input numpy-broadcast (Add, Where, Sum)
  };
  enum class Reduction {
    kNo,
    kAxes,  ///< Reduce*: over `axes` (attribute, or input 1), `keepdims`
    kAxis,  ///< ArgMax/ArgMin: over `axis`, `keepdims`
  };
  Elementwise elementwise = Elementwise::kNo;
  Reduction reduction = Reduction::kNo;
  bool spatial_pool = false;  ///< [N, C, spatial...] -> [N, C, spatial'...]: channels untouched
  /// Channels cannot be followed through it (it picks, places or generates by index, mixes
  /// channels in blocks, or is itself a quantization op): channel pruning keeps every dimension
  /// it touches and tensor parallelism runs it whole.
  bool opaque_channels = false;
};

/// What a weight input is to its op (OpDef::weights). prune, quantize and dist read the roles
/// and axes declared here instead of keeping their own lists of op names.
enum class WeightRole {
  kWeight,    ///< the kernel or matrix that mixes channels (Conv W, Gemm B, a constant MatMul operand)
  kBias,      ///< added per output channel (Conv B, Gemm C, a recurrent cell's B)
  kScale,     ///< multiplies per channel (a normalization's scale, FakeQuantize's scale)
  kShift,     ///< added per channel after a normalization (BatchNorm and LayerNorm B)
  kMean,      ///< running mean: state, not trained
  kVariance,  ///< running variance: state, not trained
  kTable,     ///< rows looked up by index (Gather's data: embeddings)
  kOperand,   ///< a learned constant operand of an elementwise op (Add, Mul, PRelu's slope)
};

/// The channel axes of one weight tensor on one node: `out` runs along the op's output channels,
/// `in` along its input (reduction) channels; -1 where the tensor has no such axis or pare does
/// not follow it (a MatMul weight that is not 2-D).
struct WeightAxes {
  int64_t out = -1;
  int64_t in = -1;
};

/// One weight input of an op.
struct WeightInput {
  int input = 0;
  WeightRole role = WeightRole::kWeight;
  /// The axes on node `n` of a weight tensor of rank `rank` (attributes such as Gemm's transB
  /// decide them); empty: no channel axes.
  std::function<WeightAxes(const Node& n, int64_t rank)> axes;

  /// A weight whose axes do not depend on the node (-1: none).
  static WeightInput fixed(int input, WeightRole role, int64_t out = -1, int64_t in = -1);
  /// The axes on `n` ({-1, -1} without a rule).
  WeightAxes axes_on(const Node& n, int64_t rank) const { return axes ? axes(n, rank) : WeightAxes{}; }
  /// Running statistics (kMean, kVariance) are state, not trained.
  bool is_state() const { return role == WeightRole::kMean || role == WeightRole::kVariance; }
};

/// One registered op.
struct OpDef {
  std::string name;
  int inputs_min = 1, inputs_max = 1;    ///< arity of inputs (max -1: variadic)
  int outputs_min = 1, outputs_max = 1;  ///< arity of outputs
  std::vector<AttrSpec> attrs;
  ForwardFn forward;
  FlopsFn flops;                          ///< may be empty: counted as 0
  /// Inputs that hold weights or running state when they are initializers, with their roles and
  /// channel axes: the one place that says so (prune, quantize and dist read it).
  std::vector<WeightInput> weights;
  std::string doc;                        ///< one line for `pare ops` and errors
  OpTraits traits;                        ///< elementwise, reduction, pooling, opaque channels
  /// The first default-domain opset with this op's meaning (0: older than any pare reads); a model
  /// that uses it is written with at least this opset.
  int64_t since_opset = 0;

  /// The declaration of input `input`, or nullptr when it is no weight.
  const WeightInput* weight(int input) const;
  /// Inputs that hold trainable weights (every declared one but the running statistics), ascending.
  std::vector<int> weight_inputs() const;
  /// Inputs that hold running state (BatchNorm mean and variance), ascending.
  std::vector<int> state_inputs() const;

  /// Attaches a facet under `key` ("quantize.policy", "prune.channels", ...), replacing any earlier one.
  template <class T>
  void set_facet(const std::string& key, T value) {
    facets_[key] = std::make_shared<std::any>(std::move(value));
  }
  bool has_facet(const std::string& key) const { return facets_.count(key) != 0; }
  /// The facet `key` as a T. Throws Error naming the op and the facet if it is missing or of
  /// another type.
  template <class T>
  const T& facet(const std::string& key) const {
    auto it = facets_.find(key);
    if (it == facets_.end())
      throw Error("op '" + name + "' has no facet '" + key + "'");
    const T* v = std::any_cast<T>(it->second.get());
    PARE_ASSERT(v != nullptr, "facet '", key, "' of op '", name, "' has another type");
    return *v;
  }

  const AttrSpec* find_attr(const std::string& key) const;

 private:
  std::map<std::string, std::shared_ptr<std::any>> facets_;
};

/// Attaches one module's facets to one op, from its name and traits (see add_facet_provider).
using FacetProvider = std::function<void(OpDef&)>;

/// All ops by name.
class OpRegistry {
 public:
  /// The process-wide registry; the core ops are registered on first call.
  static OpRegistry& global();

  /// Adds an op, with the facets of every provider added so far; throws InternalError if the
  /// name is taken.
  OpDef& add(OpDef def);
  /// Attaches facets with `provider` to every op registered now and to every op added later:
  /// the order in which modules and ops register does not matter. A module adds its provider
  /// once, when it is first used (prune::prune_registry(), quantize::policy_of()).
  void add_facet_provider(FacetProvider provider);
  /// The op named `op_type`; throws InputError "unknown op" otherwise.
  const OpDef& get(const std::string& op_type) const;
  OpDef& mutable_get(const std::string& op_type);
  const OpDef* find(const std::string& op_type) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, OpDef> ops_;
  std::vector<FacetProvider> providers_;
};

/// Registers every core op (explicitly, not by static initializers, whose order across
/// translation units is unspecified and which a static library's linker may drop).
void register_core_ops(OpRegistry& reg);

// The core op families, each in its own file (core/ops_*.cpp).
void register_elementwise_ops(OpRegistry& reg);
void register_nn_ops(OpRegistry& reg);
void register_tensor_ops(OpRegistry& reg);
void register_quant_ops(OpRegistry& reg);
void register_loss_ops(OpRegistry& reg);

/// The channel axes of a weight of rank `rank` at input `input` of node `n`, as its op declares
/// them in the global registry ({-1, -1} for an input that is no declared weight or has no axes).
WeightAxes weight_axes(const Node& n, int input, int64_t rank);

/// Reads a small integer tensor (shape, axes, indices) into a vector, wherever it lives.
std::vector<int64_t> to_int_vector(const at::Tensor& t);

}  // namespace pare::core
