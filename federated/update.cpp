#include "federated/update.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/module.h"

namespace pare::federated {

Layout state_layout(const core::Graph& g) {
  // Module decides which initializers train (weight inputs) and which are running statistics.
  const core::Module trainable(g);
  std::vector<std::string> names = trainable.parameter_names();
  for (const std::string& b : trainable.buffer_names()) names.push_back(b);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  Layout l;
  for (const std::string& n : names) {
    const at::Tensor& t = g.initializers.at(n);
    if (t.scalar_type() != at::kFloat) continue;
    l.names.push_back(n);
    l.shapes.push_back(t.sizes().vec());
    l.size += t.numel();
  }
  PARE_CHECK(!l.names.empty(), "model '", g.name, "' has no float32 parameters to train: nothing to federate");
  return l;
}

Tensors state_of(const core::Graph& g, const Layout& layout) {
  Tensors out;
  for (const std::string& n : layout.names) out[n] = g.initializers.at(n);
  return out;
}

Tensors difference(const Tensors& after, const Tensors& before, const Layout& layout) {
  Tensors out;
  for (const std::string& n : layout.names) out[n] = after.at(n).to(at::kFloat) - before.at(n).to(at::kFloat);
  return out;
}

at::Tensor flatten(const Tensors& tensors, const Layout& layout) {
  std::vector<at::Tensor> parts;
  parts.reserve(layout.names.size());
  for (const std::string& n : layout.names) parts.push_back(tensors.at(n).reshape({-1}).to(at::kFloat));
  return at::cat(parts);
}

Tensors unflatten(const at::Tensor& flat, const Layout& layout) {
  PARE_ASSERT(flat.numel() == layout.size, "update of ", flat.numel(), " values for a layout of ", layout.size);
  Tensors out;
  int64_t at = 0;
  for (size_t i = 0; i < layout.names.size(); ++i) {
    const int64_t k = c10::multiply_integers(layout.shapes[i]);
    out[layout.names[i]] = flat.narrow(0, at, k).reshape(layout.shapes[i]).contiguous();
    at += k;
  }
  return out;
}

void apply_update(core::Graph& g, const at::Tensor& delta, const Layout& layout, double scale) {
  for (const auto& [name, d] : unflatten(delta, layout)) {
    at::Tensor& t = g.initializers.at(name);
    t = t + d * scale;
  }
}

std::string check_update(const Tensors& update, const Layout& layout) {
  std::ostringstream why;
  for (const auto& [name, t] : update)
    if (!std::binary_search(layout.names.begin(), layout.names.end(), name))
      return "unexpected tensor '" + name + "' (the global model has no such parameter)";
  for (size_t i = 0; i < layout.names.size(); ++i) {
    const std::string& n = layout.names[i];
    auto it = update.find(n);
    if (it == update.end()) return "tensor '" + n + "' is missing";
    const at::Tensor& t = it->second;
    if (t.scalar_type() != at::kFloat) return "tensor '" + n + "' is " + std::string(c10::toString(t.scalar_type())) + ", not float32";
    if (t.sizes().vec() != layout.shapes[i]) {
      why << "tensor '" << n << "' has shape " << t.sizes() << ", the global model's is " << at::IntArrayRef(layout.shapes[i]);
      return why.str();
    }
    const int64_t bad = (~at::isfinite(t)).sum().item<int64_t>();
    if (bad > 0) {
      why << "tensor '" << n << "' has " << bad << " NaN or Inf value" << (bad == 1 ? "" : "s");
      return why.str();
    }
  }
  return "";
}

}  // namespace pare::federated
