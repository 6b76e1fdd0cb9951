// core::Module: the trainable view of a Graph. Floating-point initializers that feed an op's
// weight inputs become parameters (requires_grad); BatchNorm running statistics become buffers;
// the rest stay constants. forward() runs a plan compiled once at construction (values resolved to
// slots), so the hot path does no name lookups.
//
//   Module m(load_model("cnn"));
//   m.train();
//   auto out = m.forward({x});                          // graph outputs
//   auto vals = m.forward_values({x}, {"relu_2"});      // plus named intermediate values
//   ... optimizer over m.parameters() ...
//   Graph trained = m.to_graph();                       // weights written back
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::core {

class Module {
 public:
  /// kTrainable: weights are copied into parameters that require grad, running statistics into
  /// buffers. kFrozen: inference only (teachers, probes); the module reads the graph's tensors as
  /// they are (no copy, so weights mapped from external data stay on disk until used), has no
  /// parameters and cannot train.
  enum class Use { kTrainable, kFrozen };

  /// Verifies and topologically sorts `graph`, then compiles the execution plan.
  /// Throws InputError for a malformed graph.
  explicit Module(Graph graph, Use use = Use::kTrainable);

  /// Graph outputs for the given graph inputs (in graph input order).
  /// Throws InputError naming the input when a rank, fixed dim or dtype does not match.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs);

  /// Like forward, but also returns the named intermediate values (feature distillation).
  /// The map holds every graph output and every name in `extra`; throws InputError for a name
  /// the graph does not define.
  std::unordered_map<std::string, at::Tensor> forward_values(const std::vector<at::Tensor>& inputs,
                                                             const std::vector<std::string>& extra);

  /// Only the named values (intermediates or initializers as this run reads them: a tied weight's
  /// view is the one gradients flow through), running the plan no further than the last step that
  /// makes one of them: a language model's last hidden state without its [tokens, vocabulary]
  /// logits. Throws InputError for a name the graph does not define.
  std::unordered_map<std::string, at::Tensor> forward_until(const std::vector<at::Tensor>& inputs,
                                                            const std::vector<std::string>& names);

  /// Throws InternalError for a frozen module.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return ctx_.training; }

  /// Moves parameters, buffers and constants to `device`.
  void to(const at::Device& device);
  /// Runs the graph's AllReduce / AllGather nodes (a tensor-parallel shard, dist/shard.h).
  void set_collective(CollectiveFn fn) { ctx_.collective = std::move(fn); }
  /// Lays out 4-D weights and 4-D inputs in `fmt` (ChannelsLast makes libtorch's CPU convolution
  /// and pooling kernels much faster for inference). Same values, possibly other rounding in the
  /// last bits. Call it before handing parameters() to an optimizer.
  void set_memory_format(at::MemoryFormat fmt);
  at::Device device() const { return device_; }

  /// Trainable tensors, in the order the graph first uses them.
  const std::vector<at::Tensor>& parameters() const { return params_; }
  const std::vector<std::string>& parameter_names() const { return param_names_; }
  /// Running statistics (updated in training mode) and other non-trainable float state.
  const std::vector<std::string>& buffer_names() const { return buffer_names_; }
  /// Every initializer by name (parameters, buffers, constants) as the module now holds it.
  at::Tensor initializer(const std::string& name) const;

  /// The graph with the current weights written back (on the CPU, detached).
  Graph to_graph() const;
  const Graph& graph() const { return graph_; }

  /// Sum of numel over parameters.
  int64_t parameter_count() const;

 private:
  struct Step {
    const OpDef* op;
    const Node* node;
    std::vector<int> in;   // slot per input, -1 for omitted
    std::vector<int> out;  // slot per output, -1 for omitted
    std::vector<int> release;  // values no later step reads (nor the graph outputs): dropped after it
  };
  void compile();
  // Replaces the constants `select` picks by `convert(constant)`, keeping requires_grad, and
  // refreshes parameters() (they are among the constants).
  void replace_consts(const std::function<bool(const at::Tensor&)>& select,
                      const std::function<at::Tensor(const at::Tensor&)>& convert);
  // Runs the plan's first `steps` steps (all by default). Each intermediate value is dropped after
  // the last step that reads it (autograd keeps what backward needs), except the slots in `keep`.
  void run(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& slots, size_t steps = SIZE_MAX,
           const std::unordered_set<int>* keep = nullptr);
  int slot_of(const std::string& name) const;

  // A tied initializer (Graph::tied_initializers): the view's geometry over its base's storage.
  struct Tie {
    std::string view_name, base_name;
    int view, base;  // slots
    std::vector<int64_t> sizes, strides;
    int64_t offset;  // in elements, from the base's first
    at::Tensor of(const at::Tensor& base) const {
      return base.as_strided(sizes, strides, base.storage_offset() + offset);
    }
  };
  // consts_[view] = the view of consts_[base], after the base changed (device, dtype, layout).
  void refresh_ties();

  Graph graph_;
  Use use_;
  RunContext ctx_;
  at::Device device_ = at::kCPU;
  at::MemoryFormat memory_format_ = at::MemoryFormat::Contiguous;
  std::unordered_map<std::string, int> slot_;
  std::vector<at::Tensor> consts_;          // slot -> initializer tensor (undefined for others)
  std::vector<Step> steps_;
  std::vector<int> input_slots_, output_slots_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> param_names_, buffer_names_;
  std::vector<Tie> ties_;
};

}  // namespace pare::core
