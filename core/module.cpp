#include "core/module.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

#include "core/dtype.h"
#include "core/error.h"

namespace pare::core {

Module::Module(Graph graph, Use use) : graph_(std::move(graph)), use_(use) {
  graph_.topo_sort();
  graph_.verify();
  compile();
}

void Module::train(bool on) {
  PARE_ASSERT(!on || use_ == Use::kTrainable, "a frozen module of '", graph_.name, "' cannot train");
  ctx_.training = on;
}

int Module::slot_of(const std::string& name) const {
  auto it = slot_.find(name);
  return it == slot_.end() ? -1 : it->second;
}

void Module::compile() {
  const auto& reg = OpRegistry::global();
  auto add_slot = [&](const std::string& name) {
    auto [it, inserted] = slot_.emplace(name, static_cast<int>(slot_.size()));
    return it->second;
  };
  for (auto& in : graph_.inputs) input_slots_.push_back(add_slot(in.name));
  for (auto& [k, t] : graph_.initializers) add_slot(k);
  for (auto& n : graph_.nodes)
    for (auto& o : n.outputs)
      if (!o.empty()) add_slot(o);

  // Which initializers are trainable weights / running state, by how the ops read them.
  std::set<std::string> weights, state;
  for (auto& n : graph_.nodes) {
    const OpDef& op = reg.get(n.op_type);
    for (int i : op.weight_inputs())
      if (n.has_input(i)) weights.insert(n.inputs[i]);
    for (int i : op.state_inputs())
      if (n.has_input(i)) state.insert(n.inputs[i]);
  }
  consts_.assign(slot_.size(), at::Tensor());
  // A tied weight is a view of its base, never a parameter of its own: training moves both.
  const auto tied = graph_.tied_initializers();
  for (auto& [view, base] : tied) {
    const at::Tensor &v = graph_.initializers.at(view), &b = graph_.initializers.at(base);
    ties_.push_back({view, base, slot_of(view), slot_of(base), v.sizes().vec(), v.strides().vec(),
                     v.storage_offset() - b.storage_offset()});
  }
  std::set<std::string> seen;
  for (auto& n : graph_.nodes) {
    Step s{&reg.get(n.op_type), &n, {}, {}};
    for (auto& in : n.inputs) {
      s.in.push_back(in.empty() ? -1 : slot_of(in));
      auto it = graph_.initializers.find(in);
      if (in.empty() || it == graph_.initializers.end() || !seen.insert(in).second) continue;
      at::Tensor t = it->second;
      bool floating = at::isFloatingType(t.scalar_type()) && use_ == Use::kTrainable;
      if (floating && state.count(in) && !weights.count(in)) {
        t = t.clone();  // running statistics are updated in place during training
        buffer_names_.push_back(in);
      } else if (floating && weights.count(in) && t.dim() > 0 && !graph_.find_input(in) && !tied.count(in)) {
        t = t.detach().clone().set_requires_grad(true);
        params_.push_back(t);
        param_names_.push_back(in);
      }
      consts_[slot_of(in)] = t;
    }
    for (auto& o : n.outputs) s.out.push_back(o.empty() ? -1 : slot_of(o));
    steps_.push_back(std::move(s));
  }
  for (auto& [k, t] : graph_.initializers)
    if (!consts_[slot_of(k)].defined()) consts_[slot_of(k)] = t;
  for (auto& o : graph_.outputs) output_slots_.push_back(slot_of(o.name));
  // Each intermediate value's last reader drops it: a forward holds the live values, not all of them.
  std::vector<int> last_reader(slot_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i)
    for (int in : steps_[i].in)
      if (in >= 0) last_reader[in] = static_cast<int>(i);
  for (int o : output_slots_) last_reader[o] = -1;
  for (size_t v = 0; v < last_reader.size(); ++v)
    if (last_reader[v] >= 0 && !consts_[v].defined()) steps_[last_reader[v]].release.push_back(static_cast<int>(v));
  refresh_ties();
}

void Module::refresh_ties() {
  for (const Tie& t : ties_) {
    const at::Tensor& base = consts_[t.base];
    PARE_ASSERT(base.is_contiguous(), "the tied weight '", graph_.name, "' slot ", t.base, " is no longer contiguous");
    consts_[t.view] = t.of(base.detach());
  }
}

void Module::run(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& slots, size_t steps,
                 const std::unordered_set<int>* keep) {
  PARE_CHECK(inputs.size() == graph_.inputs.size(), "model '", graph_.name, "' takes ",
             graph_.inputs.size(), " input(s), got ", inputs.size());
  slots = consts_;
  // A tied weight's view is made anew each run from the parameter, so that its gradient reaches it.
  for (const Tie& t : ties_) slots[t.view] = t.of(consts_[t.base]);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo& info = graph_.inputs[i];
    const at::Tensor& x = inputs[i];
    PARE_CHECK(x.defined(), "input '", info.name, "' is missing");
    if (info.has_shape) {
      PARE_CHECK(x.dim() == static_cast<int64_t>(info.shape.size()), "input '", info.name,
                 "' must have shape ", shape_str(info.shape), ", got ", x.sizes());
      for (size_t d = 0; d < info.shape.size(); ++d)
        PARE_CHECK(!info.shape[d].is_fixed() || info.shape[d].value == x.size(d), "input '",
                   info.name, "' must have shape ", shape_str(info.shape), ", got ", x.sizes(),
                   " (dim ", d, ")");
    }
    bool both_float = at::isFloatingType(x.scalar_type()) && at::isFloatingType(info.dtype);
    bool both_int = at::isIntegralType(x.scalar_type(), false) && at::isIntegralType(info.dtype, false);
    PARE_CHECK(x.scalar_type() == info.dtype || both_float || both_int, "input '", info.name,
               "' must be ", dtype_name(info.dtype), ", got ", dtype_name(x.scalar_type()));
    at::Tensor v = x.scalar_type() == info.dtype ? x : x.to(info.dtype);
    if (memory_format_ != at::MemoryFormat::Contiguous && v.dim() == 4) v = v.contiguous(memory_format_);
    slots[input_slots_[i]] = v;
  }
  std::vector<at::Tensor> args;
  for (size_t i = 0; i < std::min(steps, steps_.size()); ++i) {
    const Step& s = steps_[i];
    args.clear();
    for (int in : s.in) args.push_back(in < 0 ? at::Tensor() : slots[in]);
    std::vector<at::Tensor> outs;
    try {
      outs = s.op->forward(*s.node, args, ctx_);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // libtorch's c10::Error: say which node failed and with which input shapes.
      std::string shapes;
      for (auto& a : args) {
        std::ostringstream os;
        if (a.defined()) os << a.sizes(); else os << "none";
        shapes += (shapes.empty() ? "" : ", ") + os.str();
      }
      std::string what = e.what();
      auto nl = what.find('\n');
      throw InputError(s.node->describe() + " failed on inputs of shape " + shapes + ": " +
                       what.substr(0, nl));
    }
    for (size_t i = 0; i < s.out.size() && i < outs.size(); ++i) {
      if (s.out[i] < 0) continue;
      at::Tensor& o = outs[i];
      // A one-channel input (a grayscale image) is channels-last and channels-first at once, and
      // libtorch 2.x gives the first convolution of such a tensor a channels-first output: laid
      // out again here, or every later layer runs channels-first (the channels-first max-pool
      // took a quarter of a KD step's time on PyTorch 2.11).
      if (memory_format_ != at::MemoryFormat::Contiguous && o.dim() == 4 && o.size(1) > 1 &&
          at::isFloatingType(o.scalar_type()) && !o.is_contiguous(memory_format_))
        o = o.contiguous(memory_format_);
      slots[s.out[i]] = std::move(o);
    }
    for (int r : s.release)
      if (!keep || !keep->count(r)) slots[r].reset();
  }
}

std::vector<at::Tensor> Module::forward(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> slots;
  run(inputs, slots);
  std::vector<at::Tensor> r;
  for (int s : output_slots_) r.push_back(slots[s]);
  return r;
}

std::unordered_map<std::string, at::Tensor> Module::forward_values(
    const std::vector<at::Tensor>& inputs, const std::vector<std::string>& extra) {
  std::vector<std::string> names = extra;
  for (auto& o : graph_.outputs) names.push_back(o.name);
  return forward_until(inputs, names);
}

std::unordered_map<std::string, at::Tensor> Module::forward_until(const std::vector<at::Tensor>& inputs,
                                                                  const std::vector<std::string>& names) {
  std::unordered_set<int> wanted;
  for (auto& n : names) {
    PARE_CHECK(slot_.count(n), "model '", graph_.name, "' has no value named '", n, "'");
    wanted.insert(slot_of(n));
  }
  size_t last = 0;  // steps to run: up to the last one making a wanted value
  for (size_t i = 0; i < steps_.size(); ++i)
    for (int o : steps_[i].out)
      if (wanted.count(o)) last = i + 1;
  std::vector<at::Tensor> slots;
  run(inputs, slots, last, &wanted);
  std::unordered_map<std::string, at::Tensor> r;
  for (auto& n : names) r[n] = slots[slot_of(n)];
  return r;
}

void Module::replace_consts(const std::function<bool(const at::Tensor&)>& select,
                            const std::function<at::Tensor(const at::Tensor&)>& convert) {
  at::NoGradGuard no_grad;
  for (auto& t : consts_)
    if (t.defined() && select(t)) {
      bool grad = t.requires_grad();
      t = convert(t.detach());
      if (grad) t.set_requires_grad(true);
    }
  params_.clear();
  for (auto& n : param_names_) params_.push_back(consts_[slot_of(n)]);
  refresh_ties();
}

void Module::to(const at::Device& device) {
  // Shape-like integer constants stay on the CPU where shape ops read them.
  replace_consts(
      [&](const at::Tensor& t) {
        return t.device() != device && (at::isFloatingType(t.scalar_type()) || t.numel() > 64);
      },
      [&](const at::Tensor& t) { return t.to(device); });
  device_ = device;
}

void Module::set_memory_format(at::MemoryFormat fmt) {
  replace_consts([](const at::Tensor& t) { return t.dim() == 4 && at::isFloatingType(t.scalar_type()); },
                 [&](const at::Tensor& t) { return t.contiguous(fmt); });
  memory_format_ = fmt;
}

at::Tensor Module::initializer(const std::string& name) const {
  int s = slot_of(name);
  PARE_CHECK(s >= 0 && consts_[s].defined(), "model '", graph_.name, "' has no initializer '", name, "'");
  return consts_[s];
}

Graph Module::to_graph() const {
  Graph g = graph_;
  for (auto& [k, t] : g.initializers) t = consts_[slot_of(k)].detach().to(at::kCPU).clone();
  for (const Tie& t : ties_) g.initializers[t.view_name] = t.of(g.initializers.at(t.base_name));  // views still
  return g;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& p : params_) n += p.numel();
  return n;
}

}  // namespace pare::core
