#include "core/op_registry.h"
#include "core/ops_util.h"

#include <algorithm>
#include <mutex>

namespace pare::core {

const AttrSpec* OpDef::find_attr(const std::string& key) const {
  for (auto& a : attrs)
    if (a.name == key) return &a;
  return nullptr;
}

const WeightInput* OpDef::weight(int input) const {
  for (const auto& w : weights)
    if (w.input == input) return &w;
  return nullptr;
}

std::vector<int> OpDef::weight_inputs() const {
  std::vector<int> r;
  for (const auto& w : weights)
    if (!w.is_state()) r.push_back(w.input);
  std::sort(r.begin(), r.end());
  return r;
}

std::vector<int> OpDef::state_inputs() const {
  std::vector<int> r;
  for (const auto& w : weights)
    if (w.is_state()) r.push_back(w.input);
  std::sort(r.begin(), r.end());
  return r;
}

WeightInput WeightInput::fixed(int input, WeightRole role, int64_t out, int64_t in) {
  WeightInput w{input, role, {}};
  if (out >= 0 || in >= 0) w.axes = [out, in](const Node&, int64_t) { return WeightAxes{out, in}; };
  return w;
}

WeightAxes weight_axes(const Node& n, int input, int64_t rank) {
  const OpDef* op = OpRegistry::global().find(n.op_type);
  const WeightInput* w = op ? op->weight(input) : nullptr;
  return w ? w->axes_on(n, rank) : WeightAxes{};
}

OpRegistry& OpRegistry::global() {
  static OpRegistry reg;
  static std::once_flag once;
  std::call_once(once, [] { register_core_ops(reg); });
  return reg;
}

OpDef& OpRegistry::add(OpDef def) {
  PARE_ASSERT(!def.name.empty(), "op registered without a name");
  PARE_ASSERT(def.forward != nullptr, "op '", def.name, "' registered without a forward");
  auto name = def.name;
  auto [it, inserted] = ops_.emplace(name, std::move(def));
  PARE_ASSERT(inserted, "op '", name, "' registered twice");
  for (const auto& provider : providers_) provider(it->second);
  return it->second;
}

void OpRegistry::add_facet_provider(FacetProvider provider) {
  for (auto& [name, op] : ops_) provider(op);
  providers_.push_back(std::move(provider));
}

const OpDef* OpRegistry::find(const std::string& op_type) const {
  auto it = ops_.find(op_type);
  return it == ops_.end() ? nullptr : &it->second;
}

const OpDef& OpRegistry::get(const std::string& op_type) const {
  const OpDef* op = find(op_type);
  PARE_CHECK(op != nullptr, "unknown op '", op_type, "'");
  return *op;
}

OpDef& OpRegistry::mutable_get(const std::string& op_type) {
  return const_cast<OpDef&>(get(op_type));
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> r;
  for (auto& [k, v] : ops_) r.push_back(k);
  return r;
}

void register_core_ops(OpRegistry& reg) {
  register_elementwise_ops(reg);
  register_nn_ops(reg);
  register_tensor_ops(reg);
  register_quant_ops(reg);
  register_loss_ops(reg);
  register_index_ops(reg);
  register_resize_ops(reg);
  register_rnn_ops(reg);
  register_transformer_ops(reg);
}

std::vector<int64_t> to_int_vector(const at::Tensor& t) {
  if (!t.defined()) return {};
  at::Tensor c = t.detach().to(at::kCPU, at::kLong).contiguous().reshape({-1});
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

}  // namespace pare::core
