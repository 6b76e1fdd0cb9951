// What a federated round exchanges: the model's state (its parameters and running statistics,
// float32, by name) and updates to it (trained state minus the round's global state). The server
// checks every update against the global model's layout before it enters an aggregator.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::federated {

using Tensors = std::map<std::string, at::Tensor>;

/// The names and shapes of a model's state, in name order; `size` is the total element count
/// (the length of a flattened update).
struct Layout {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  int64_t size = 0;
};

/// The float32 initializers of `g` that training changes: core::Module's parameters and buffers.
/// Throws InputError when `g` has none (nothing to federate).
Layout state_layout(const core::Graph& g);
/// Those initializers of `g`, by name.
Tensors state_of(const core::Graph& g, const Layout& layout);
/// `after - before` for every name of the layout.
Tensors difference(const Tensors& after, const Tensors& before, const Layout& layout);

/// The tensors in layout order as one float32 vector [layout.size].
at::Tensor flatten(const Tensors& tensors, const Layout& layout);
/// The inverse of flatten: `flat` [layout.size] cut into the layout's tensors.
Tensors unflatten(const at::Tensor& flat, const Layout& layout);
/// Adds `scale * delta` (a flattened update [layout.size]) to `g`'s initializers.
void apply_update(core::Graph& g, const at::Tensor& delta, const Layout& layout, double scale = 1.0);

/// Why `update` cannot be used with `layout` ("" when it can): a missing or unexpected name, a
/// dtype other than float32, a shape that differs, a NaN or an Inf (naming the tensor and the
/// count).
std::string check_update(const Tensors& update, const Layout& layout);

}  // namespace pare::federated
