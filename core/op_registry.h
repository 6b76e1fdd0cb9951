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
};

/// One registered op.
struct OpDef {
  std::string name;
  int inputs_min = 1, inputs_max = 1;    ///< arity of inputs (max -1: variadic)
  int outputs_min = 1, outputs_max = 1;  ///< arity of outputs
  std::vector<AttrSpec> attrs;
  ForwardFn forward;
  FlopsFn flops;                          ///< may be empty: counted as 0
  std::vector<int> weight_inputs;        ///< inputs that hold trainable weights when initializers
  std::vector<int> state_inputs;         ///< inputs that hold running state (BatchNorm mean/var)
  std::string doc;                        ///< one line for `pare ops` and errors
  OpTraits traits;                        ///< elementwise, reduction, pooling

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

/// Reads a small integer tensor (shape, axes, indices) into a vector, wherever it lives.
std::vector<int64_t> to_int_vector(const at::Tensor& t);

}  // namespace pare::core
