// Plans a graph at one set of input shapes: output shapes, folded shape values, each node's steps,
// and one arena where values whose lives do not overlap share bytes. Runs plans.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"

namespace pare::rt {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine eng = [] {
    load_dnnl();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return eng;
}

// ---------------------------------------------------------------------------------------------
// The op table

const OpTable& OpTable::get() {
  static const OpTable table = [] {
    OpTable t;
    register_tensor_ops(t);
    register_math_ops(t);
    register_nn_ops(t);
    register_quant_ops(t);
    return t;
  }();
  return table;
}

void OpTable::add(OpImpl impl) {
  auto key = std::make_pair(impl.op, impl.domain);
  PARE_ASSERT(!ops_.count(key), "op ", impl.op, " registered twice in pare_rt");
  ops_.emplace(key, std::move(impl));
}

const OpImpl* OpTable::find(const std::string& op, const std::string& domain) const {
  auto it = ops_.find({op, domain == "ai.onnx" ? "" : domain});
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpTable::names() const {
  std::vector<std::string> r;
  for (auto& [k, v] : ops_)
    if (k.second != "pare_rt") r.push_back(k.second.empty() ? k.first : k.second + ":" + k.first);
  return r;
}

std::vector<std::string> supported_ops() { return OpTable::get().names(); }

std::string why_unsupported(const std::string& op, const std::string& domain) {
  if (domain == "pare_rt") return "domain pare_rt is pare_rt's own";
  if (OpTable::get().find(op, domain)) return "";
  if (op == "If" || op == "Loop" || op == "Scan") return "control flow is not supported";
  std::string d = domain.empty() ? "" : " of domain '" + domain + "'";
  return "op '" + op + "'" + d + " is not implemented (pare_rt runs " +
         std::to_string(OpTable::get().names().size()) + " ops: pare run --engine torch runs more)";
}

// ---------------------------------------------------------------------------------------------
// Inference and evaluation helpers

const HTensor& InferCtx::known(size_t i) const {
  check(i < in.size() && in[i].present, "input ", i, " is missing");
  check(in[i].known != nullptr, "input ", i, " must be known before the model runs (a constant or computed from "
        "shapes only); pare_rt does not support data-dependent shapes here");
  return *in[i].known;
}

std::vector<HTensor> eval_node(const OpImpl& impl, const Node& n, const std::vector<const HTensor*>& in) {
  InferCtx ic{n, {}, {}, {}};
  for (auto* t : in) {
    VInfo vi;
    if (t) {
      vi.present = true;
      vi.dtype = t->dtype;
      vi.dims = t->dims;
      vi.known = t;
    }
    ic.in.push_back(vi);
  }
  ic.out.resize(n.out.size());
  ic.computed.resize(n.out.size());
  impl.infer(ic);
  std::vector<HTensor> out;
  for (size_t k = 0; k < n.out.size(); ++k) {
    if (ic.computed[k]) out.push_back(*ic.computed[k]);
    else out.push_back(HTensor::zeros(ic.out[k].dtype, ic.out[k].dims));
  }
  bool need_ref = false;
  for (size_t k = 0; k < n.out.size(); ++k) need_ref = need_ref || (!ic.computed[k] && n.out[k] >= 0);
  if (need_ref) {
    RefCtx rc{n, {}, {}};
    for (auto* t : in) rc.in.push_back(t ? View{t->dtype, t->dims, t->data} : View{});
    for (auto& t : out) rc.out.push_back(View{t.dtype, t.dims, t.data});
    impl.ref(rc);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Weights

const HTensor& WeightCache::get(const HTensor& t, const dnnl::memory::desc& src, const dnnl::memory::desc& md,
                                const dnnl::engine& eng, dnnl::stream& s) {
  auto key = std::make_pair(static_cast<const void*>(t.data), compat::md_key(md));
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  auto h = std::make_shared<HTensor>(HTensor::zeros(DType::kUInt8, {static_cast<int64_t>(md.get_size())}));
  dnnl::memory from(src, eng, t.data), to(md, eng, h->data);
  dnnl::reorder(from, to).execute(s, from, to);
  s.wait();
  bytes_ += static_cast<int64_t>(md.get_size());
  cache_.emplace(key, h);
  return *h;
}

// ---------------------------------------------------------------------------------------------
// Building steps

int BuildCtx::temp(DType t, std::vector<int64_t> dims, const dnnl::memory::desc& md) {
  PValue p;
  p.dtype = t;
  p.dims = std::move(dims);
  p.md = md;
  plan.values.push_back(std::move(p));
  return static_cast<int>(plan.values.size()) - 1;
}

int BuildCtx::constant(HTensor t) {
  auto h = std::make_shared<HTensor>(std::move(t));
  plan.owned.push_back(h);
  const int id = temp(h->dtype, h->dims, plain_md(h->dtype, h->dims));
  plan.values[static_cast<size_t>(id)].known = h.get();
  return id;
}

int BuildCtx::weight(const HTensor& t, const dnnl::memory::desc& md) {
  return weight(t, plain_md(t.dtype, md.dims()), md);
}

int BuildCtx::weight(const HTensor& t, const dnnl::memory::desc& src, const dnnl::memory::desc& md) {
  const int id = temp(t.dtype, md.dims(), md);
  if (src == md) {
    plan.values[static_cast<size_t>(id)].known = &t;
  } else {
    plan.values[static_cast<size_t>(id)].known = &weights.get(t, src, md, eng, stream);
  }
  return id;
}

int BuildCtx::as(int id, const dnnl::memory::desc& md) {
  const PValue& src = v(id);
  if (src.md == md) return id;
  if (src.known) return weight(*src.known, src.md, md);
  for (auto& [from, to] : plan.reorders)
    if (from == id && v(to).md == md) return to;
  const int t = temp(src.dtype, src.dims, md);
  dnnl::reorder::primitive_desc pd(eng, v(id).md, eng, md);
  prim(dnnl::reorder(pd), {{DNNL_ARG_SRC, id}, {DNNL_ARG_DST, t}}, "reorder for " + node.label());
  plan.reorders.emplace_back(id, t);
  return t;
}

void BuildCtx::prim(dnnl::primitive p, std::unordered_map<int, int> args, std::string what, int64_t macs) {
  Plan::Step s;
  s.prim = std::move(p);
  s.op = what == node.label() ? node.op : "Reorder";  // reorders name themselves otherwise
  s.macs = macs;
  for (auto& [arg, val] : args) s.uses.push_back(val);
  s.args = std::move(args);
  s.what = std::move(what);
  plan.steps.push_back(std::move(s));
}

void BuildCtx::fn(std::function<void(RunCtx&)> f, std::vector<int> uses) {
  Plan::Step s;
  s.fn = std::move(f);
  s.uses = std::move(uses);
  s.what = node.label();
  s.op = node.op;
  plan.steps.push_back(std::move(s));
}

void BuildCtx::alias(size_t i, int src) {
  PValue& o = v(out[i]);
  PARE_ASSERT(v(src).plain(), "alias of a blocked value in ", node.label());
  o.md = plain_md(o.dtype, o.dims);
  o.alias = src;
}

namespace {

int root_of(const Plan& p, int v) {
  while (p.values[static_cast<size_t>(v)].alias >= 0) v = p.values[static_cast<size_t>(v)].alias;
  return v;
}

// A reference step: inputs made plain, outputs plain, `impl.ref` on views.
void build_ref(BuildCtx& b, const OpImpl& impl) {
  std::vector<int> in;
  for (int id : b.in) in.push_back(id < 0 ? -1 : b.plain(id));
  std::vector<int> uses;
  for (int id : in)
    if (id >= 0) uses.push_back(id);
  for (int id : b.out) {
    b.v(id).md = plain_md(b.v(id).dtype, b.v(id).dims);
    uses.push_back(id);
  }
  // The kernel's views are made once; each run only points them at this run's bytes.
  auto rc = std::make_shared<RefCtx>(RefCtx{b.node, {}, {}});
  for (int id : in) rc->in.push_back(id < 0 ? View{} : View{b.v(id).dtype, b.v(id).dims, nullptr});
  for (int id : b.out) rc->out.push_back(View{b.v(id).dtype, b.v(id).dims, nullptr});
  const std::vector<int> out = b.out;
  b.fn(
      [&impl, rc, in, out](RunCtx& ctx) {
        for (size_t k = 0; k < in.size(); ++k)
          if (in[k] >= 0) rc->in[k].data = ctx.ptr[static_cast<size_t>(in[k])];
        for (size_t k = 0; k < out.size(); ++k) rc->out[k].data = ctx.ptr[static_cast<size_t>(out[k])];
        impl.ref(*rc);
      },
      uses);
}

// Lays out the arena: every value that needs bytes of its own gets an offset; values whose lives
// (first to last step that uses them, through their views) do not overlap may share bytes.
void lay_out(Plan& p) {
  const size_t n = p.values.size();
  std::vector<int> first(n, -1), last(n, -1);
  auto use = [&](int v, int step) {
    const int r = root_of(p, v);
    if (first[static_cast<size_t>(r)] < 0) first[static_cast<size_t>(r)] = step;
    last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], step);
  };
  for (size_t s = 0; s < p.steps.size(); ++s)
    for (int v : p.steps[s].uses) use(v, static_cast<int>(s));
  const int end = static_cast<int>(p.steps.size());
  for (int v : p.outputs) {
    use(v, end);
    last[static_cast<size_t>(root_of(p, v))] = end;
  }
  std::vector<int> order;
  for (size_t v = 0; v < n; ++v) {
    const PValue& pv = p.values[v];
    if (pv.alias >= 0 || pv.known || pv.input >= 0 || first[v] < 0) continue;
    order.push_back(static_cast<int>(v));
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });
  struct Block {
    int64_t offset, size;
    int last;
  };
  std::vector<Block> live;
  int64_t top = 0;
  for (int v : order) {
    live.erase(std::remove_if(live.begin(), live.end(), [&](const Block& b) { return b.last < first[v]; }),
               live.end());
    std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
    const int64_t size = (static_cast<int64_t>(p.values[static_cast<size_t>(v)].md.get_size()) + 63) / 64 * 64;
    int64_t at = 0;
    for (auto& b : live) {
      if (b.offset >= at + size) break;
      at = std::max(at, b.offset + b.size);
    }
    p.values[static_cast<size_t>(v)].offset = at;
    live.push_back({at, std::max<int64_t>(size, 64), last[v]});
    top = std::max(top, at + std::max<int64_t>(size, 64));
  }
  p.arena_bytes = top;
  static const int64_t ram = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  PARE_CHECK(top <= ram, "the plan needs ", top, " bytes of buffers, more than this machine's ", ram);
  void* mem = std::aligned_alloc(64, static_cast<size_t>(std::max<int64_t>(top, 64)));
  if (!mem) throw Error("out of memory: cannot allocate a " + std::to_string(top) + "-byte arena");
  p.arena = std::shared_ptr<void>(mem, [](void* q) { std::free(q); });

  p.ptrs.assign(n, nullptr);
  p.root_input.assign(n, -1);
  for (size_t v = 0; v < n; ++v) {
    const int r = root_of(p, static_cast<int>(v));
    const PValue& rv = p.values[static_cast<size_t>(r)];
    if (rv.known) p.ptrs[v] = rv.known->data;
    else if (rv.input >= 0) p.root_input[v] = rv.input;
    else if (rv.offset >= 0) p.ptrs[v] = static_cast<char*>(mem) + rv.offset;
  }
}

// Memory objects for every primitive argument, made once.
void make_memories(Plan& p, const dnnl::engine& eng) {
  for (auto& s : p.steps) {
    if (s.fn) continue;
    for (auto& [arg, v] : s.args) {
      const PValue& pv = p.values[static_cast<size_t>(v)];
      void* ptr = p.root_input[static_cast<size_t>(v)] >= 0 ? nullptr : p.ptrs[static_cast<size_t>(v)];
      PARE_ASSERT(ptr || p.root_input[static_cast<size_t>(v)] >= 0 || pv.md.get_size() == 0,
                  "value without bytes in ", s.what);
      s.mems.emplace(arg, dnnl::memory(pv.md, eng, ptr ? ptr : DNNL_MEMORY_NONE));
    }
  }
  for (auto& s : p.steps)
    for (auto& [arg, m] : s.mems) {
      const int v = s.args.at(arg);
      if (p.root_input[static_cast<size_t>(v)] >= 0) p.external_mems.emplace_back(v, &m);
      s.c_args.push_back({arg, m.get()});
    }
}

}  // namespace

void check_size(DType t, const std::vector<int64_t>& dims, const std::string& what) {
  static const int64_t ram = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  int64_t bytes = dtype_size(t);
  for (int64_t d : dims) {
    PARE_CHECK(d >= 0, what, " has a negative dim in ", dims_str(dims));
    PARE_CHECK(d == 0 || bytes <= ram / d, what, " of shape ", dims_str(dims), " (", dtype_name(t), ") would need more "
               "than this machine's ", ram, " bytes of memory");
    bytes *= d;
  }
}

namespace {

// A node's steps: its oneDNN kernel when `impl.build` takes the node, else its reference kernel (the
// build's refusal, which says why, goes to p.fallbacks).
void build_steps(const Graph& g, const Node& n, const OpImpl& impl, const InferCtx& ic, Plan& p,
                 const dnnl::engine& eng, dnnl::stream& stream, WeightCache& weights) {
  BuildCtx b{g, n, p, eng, stream, weights, {}, {}};
  for (int v : n.in) b.in.push_back(v);
  for (int v : n.out) b.out.push_back(v < 0 ? b.temp(DType::kFloat32, {}, plain_md(DType::kFloat32, {})) : v);
  for (size_t k = 0; k < n.out.size(); ++k)
    if (n.out[k] < 0) {  // an omitted output still gets a scratch value of the right size
      b.v(b.out[k]).dtype = ic.out[k].dtype;
      b.v(b.out[k]).dims = ic.out[k].dims;
      b.v(b.out[k]).md = plain_md(ic.out[k].dtype, ic.out[k].dims);
    }
  bool built = false;
  try {
    built = impl.build && impl.build(b);
    if (!built) {
      PARE_ASSERT(!impl.build || !b.refusal.empty(), n.label(), ": its oneDNN builder declined without a reason "
                  "(a builder refuses with `return b.refuse(why)`)");
      PARE_CHECK(impl.ref != nullptr, n.label(), ": no kernel for these inputs",
                 b.refusal.empty() ? "" : ": " + b.refusal);
      if (!b.refusal.empty()) p.fallbacks.push_back(n.label() + ": reference kernel: " + b.refusal);
      build_ref(b, impl);
    }
  } catch (const dnnl::error& e) {
    throw Error(n.label() + ": oneDNN refused the primitive (" + e.what() + ")");
  }
  for (int v : b.out) PARE_ASSERT(!b.v(v).md.is_zero() || b.v(v).dims.empty(), "output layout unset by ", n.label());
}

}  // namespace

std::unique_ptr<Plan> build_plan(const Graph& g, const std::vector<std::vector<int64_t>>& input_dims,
                                 const dnnl::engine& eng, dnnl::stream& stream, WeightCache& weights) {
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.values.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (const HTensor* c = g.constant(static_cast<int>(v))) {
      p.values[v].dtype = c->dtype;
      p.values[v].dims = c->dims;
      p.values[v].known = c;
      p.values[v].md = plain_md(c->dtype, c->dims);
    }
  }
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    PValue& pv = p.values[static_cast<size_t>(g.inputs[k])];
    pv.dtype = g.input_specs[k].dtype;
    pv.dims = input_dims[k];
    check_size(pv.dtype, pv.dims, "input '" + g.input_specs[k].name + "'");
    pv.input = static_cast<int>(k);
    pv.md = plain_md(pv.dtype, pv.dims);
  }
  const OpTable& table = OpTable::get();
  for (const Node& n : g.nodes) {
    const OpImpl* impl = table.find(n.op, n.domain);
    PARE_ASSERT(impl, "no op ", n.op);
    InferCtx ic{n, {}, {}, {}};
    bool all_known = !n.in.empty();
    for (int v : n.in) {
      VInfo vi;
      if (v >= 0) {
        const PValue& pv = p.values[static_cast<size_t>(v)];
        vi.present = true;
        vi.dtype = pv.dtype;
        vi.dims = pv.dims;
        vi.known = pv.known;
        all_known = all_known && pv.known;
      }
      ic.in.push_back(vi);
    }
    ic.out.resize(n.out.size());
    ic.computed.resize(n.out.size());
    impl->infer(ic);
    for (size_t k = 0; k < n.out.size(); ++k) {
      if (n.out[k] < 0) continue;
      PValue& o = p.values[static_cast<size_t>(n.out[k])];
      o.dtype = ic.out[k].dtype;
      o.dims = ic.out[k].dims;
      check_size(o.dtype, o.dims, n.label() + ": output " + std::to_string(k));
    }
    // Values that follow from shapes alone are computed now, once per plan.
    bool all_computed = true;
    for (size_t k = 0; k < n.out.size(); ++k)
      if (n.out[k] >= 0 && !ic.computed[k]) all_computed = false;
    if (all_computed || (all_known && impl->ref && n.domain != "pare_rt")) {
      std::vector<const HTensor*> in;
      for (int v : n.in) in.push_back(v < 0 ? nullptr : p.values[static_cast<size_t>(v)].known);
      std::vector<HTensor> vals = all_computed ? std::vector<HTensor>{} : eval_node(*impl, n, in);
      for (size_t k = 0; k < n.out.size(); ++k) {
        if (n.out[k] < 0) continue;
        auto h = std::make_shared<HTensor>(all_computed ? *ic.computed[k] : vals[k]);
        p.owned.push_back(h);
        PValue& o = p.values[static_cast<size_t>(n.out[k])];
        o.known = h.get();
        o.md = plain_md(o.dtype, o.dims);
      }
      continue;
    }
    build_steps(g, n, *impl, ic, p, eng, stream, weights);
  }

  // Outputs: plain, in bytes of their own.
  const Node copy_node{"output", "", "output", 0, {}, {}, {}, {}, {}, false};
  BuildCtx b{g, copy_node, p, eng, stream, weights, {}, {}};
  for (int v : g.outputs) {
    int id = v;
    const PValue& pv = p.values[static_cast<size_t>(v)];
    const bool own = !pv.known && root_of(p, v) >= 0 && p.values[static_cast<size_t>(root_of(p, v))].input < 0;
    if (own) {
      id = b.plain(v);
    } else {  // a constant or an input passed through: copied into the arena at each run
      const int src = pv.known ? b.constant(*pv.known) : v;
      id = b.temp(pv.dtype, pv.dims, plain_md(pv.dtype, pv.dims));
      const int64_t bytes = numel_of(pv.dims) * dtype_size(pv.dtype);
      b.fn([src, id, bytes](RunCtx& ctx) { std::memcpy(ctx.ptr[id], ctx.ptr[src], static_cast<size_t>(bytes)); },
           {src, id});
    }
    p.outputs.push_back(id);
  }
  lay_out(p);
  make_memories(p, eng);
  return plan;
}

void run_plan(Plan& p, const std::vector<TensorView>& inputs, dnnl::stream& s, bool profile) {
  if (p.run_ptrs.size() != p.ptrs.size()) p.run_ptrs = p.ptrs;
  for (size_t v = 0; v < p.run_ptrs.size(); ++v)
    if (p.root_input[v] >= 0) p.run_ptrs[v] = inputs[static_cast<size_t>(p.root_input[v])].data;
  RunCtx ctx{p.run_ptrs};
  for (auto& [v, m] : p.external_mems) m->set_data_handle(ctx.ptr[static_cast<size_t>(v)]);
  for (auto& step : p.steps) {
    const auto t0 = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (step.fn) {
      step.fn(ctx);
    } else {
      // The C call with the arguments prepared at plan time: the C++ execute() builds a vector of
      // them on every call.
      const dnnl_status_t st = dnnl_primitive_execute(step.prim.get(), s.get(), static_cast<int>(step.c_args.size()),
                                                      step.c_args.data());
      if (st != dnnl_success) throw Error(step.what + ": oneDNN failed to run (status " + std::to_string(st) + ")");
    }
    if (profile) {
      s.wait();
      step.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      step.calls++;
    }
  }
  s.wait();
}

}  // namespace pare::rt
