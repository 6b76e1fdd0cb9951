// pare::rt::Model: load (read, check, lower, plan batch 1), run (check the inputs, pick or build the
// plan of their shapes, execute).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "core/file_util.h"
#include "rt/internal.h"

namespace pare::rt {

struct Model::Impl {
  Graph graph;
  LoweringReport report;
  std::vector<std::pair<std::string, std::string>> metadata;
  int threads = 0;
  bool profile = false;
  Plan* last = nullptr;
  dnnl::stream stream{cpu_engine()};
  WeightCache weights;
  std::map<std::pair<std::vector<std::vector<int64_t>>, int>, std::unique_ptr<Plan>> plans;
  std::mutex mu;

  // Sets OpenMP's thread count for the calling thread while in scope (oneDNN and the reference
  // kernels read it), restoring the caller's afterwards.
  struct Threads {
    int before;
    explicit Threads(int n) : before(omp_get_max_threads()) {
      if (n > 0) omp_set_num_threads(n);
    }
    ~Threads() { omp_set_num_threads(before); }
  };

  /// The input dims after checking dtypes, ranks, fixed and symbolic dims; throws InputError.
  std::vector<std::vector<int64_t>> check_inputs(const std::vector<TensorView>& inputs) const;

  Plan& plan_for(const std::vector<std::vector<int64_t>>& dims) {
    auto key = std::make_pair(dims, omp_get_max_threads());
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    std::unique_ptr<Plan> p;
    try {
      p = build_plan(graph, dims, cpu_engine(), stream, weights);
    } catch (const InputError& e) {
      throw InputError("'" + graph.origin + "': " + e.what());
    }
    Plan& ref = *p;
    // Kernel refusals join the report, once each (plans at other shapes refuse alike).
    for (auto& f : ref.fallbacks)
      if (std::find(report.fallbacks.begin(), report.fallbacks.end(), f) == report.fallbacks.end())
        report.fallbacks.push_back(f);
    ref.threads = omp_get_max_threads();
    ref.input_dims = dims;
    for (int v : ref.outputs) {
      const PValue& pv = ref.values[static_cast<size_t>(v)];
      ref.out_views.push_back(TensorView{pv.dtype, pv.dims, ref.ptrs[static_cast<size_t>(v)]});
    }
    // Extra outputs learn their dtype and dims from the first plan.
    for (size_t k = 0; k < graph.output_specs.size(); ++k) {
      ValueSpec& s = graph.output_specs[k];
      const PValue& v = ref.values[static_cast<size_t>(ref.outputs[k])];
      if (s.dims.empty() && s.symbols.empty()) {
        s.dtype = v.dtype;
        s.dims = v.dims;
        s.symbols.assign(v.dims.size(), "");
      }
    }
    plans.emplace(key, std::move(p));
    return ref;
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path, const Options& opts) {
  return load_bytes(read_file(path), path, opts);
}

Model Model::load_bytes(const std::string& bytes, const std::string& origin, const Options& opts) {
  PARE_CHECK(opts.threads_ >= 0, "threads must be >= 0, got ", opts.threads_);
  const reader::Model m = reader::parse_model(bytes, origin);
  Options o = opts;
  // PARE_RT_INT8=0 runs QDQ models as the exact float simulation (for checking the int8 kernels).
  if (const char* e = std::getenv("PARE_RT_INT8"); e && std::string(e) == "0") o.int8(false);
  auto impl = std::make_unique<Impl>();
  impl->threads = opts.threads_;
  impl->profile = opts.profile_;
  impl->metadata = m.metadata;
  try {
    impl->graph = build_graph(m, o, impl->report);
  } catch (const InputError& e) {
    throw InputError("'" + origin + "': " + e.what());
  }
  // Plan batch 1 now: shape and type errors surface at load, and the first run is quick.
  std::vector<std::vector<int64_t>> dims;
  for (auto& s : impl->graph.input_specs) {
    std::vector<int64_t> d;
    for (int64_t x : s.dims) d.push_back(x >= 0 ? x : 1);
    dims.push_back(d);
  }
  Impl::Threads t(impl->threads);
  try {
    impl->plan_for(dims);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (planning the inputs' symbolic dims as 1, at load)");
  }
  return Model(std::move(impl));
}

const std::vector<ValueSpec>& Model::inputs() const { return impl_->graph.input_specs; }
const std::vector<ValueSpec>& Model::outputs() const { return impl_->graph.output_specs; }
const std::vector<std::pair<std::string, std::string>>& Model::metadata() const { return impl_->metadata; }
const LoweringReport& Model::report() const { return impl_->report; }
bool Model::has_value(const std::string& name) const { return !name.empty() && impl_->graph.by_name.count(name); }

void Model::set_threads(int threads) {
  PARE_CHECK(threads >= 0, "threads must be >= 0, got ", threads);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->threads = threads;
}

int Model::threads() const { return impl_->threads; }

std::vector<StepProfile> Model::profile() const {
  std::vector<StepProfile> r;
  if (!impl_->profile || !impl_->last) return r;
  for (auto& s : impl_->last->steps) r.push_back({s.what, s.op, s.calls, s.ms, s.macs});
  return r;
}

int64_t Model::arena_bytes() const {
  int64_t n = 0;
  for (auto& [k, p] : impl_->plans) n += p->arena_bytes;
  return n;
}

int64_t Model::weight_bytes() const {
  int64_t n = impl_->weights.bytes();
  for (auto& v : impl_->graph.values)
    if (v.constant) n += v.constant->nbytes();
  return n;
}

std::vector<std::vector<int64_t>> Model::Impl::check_inputs(const std::vector<TensorView>& inputs) const {
  const auto& specs = graph.input_specs;
  const std::string& origin = graph.origin;
  PARE_CHECK(inputs.size() == specs.size(), "'", origin, "' takes ", specs.size(), " input(s), got ", inputs.size());
  std::map<std::string, int64_t> symbols;
  std::vector<std::vector<int64_t>> dims;
  for (size_t k = 0; k < specs.size(); ++k) {
    const ValueSpec& s = specs[k];
    const TensorView& x = inputs[k];
    PARE_CHECK(x.dtype == s.dtype, "input '", s.name, "' of '", origin, "' must be ", dtype_name(s.dtype), ", got ",
               dtype_name(x.dtype));
    PARE_CHECK(x.dims.size() == s.dims.size(), "input '", s.name, "' of '", origin, "' must have rank ", s.dims.size(),
               ", got ", dims_str(x.dims));
    for (size_t d = 0; d < s.dims.size(); ++d) {
      PARE_CHECK(x.dims[d] >= 0, "input '", s.name, "' has negative dim ", x.dims[d]);
      if (s.dims[d] >= 0) {
        PARE_CHECK(x.dims[d] == s.dims[d], "input '", s.name, "' of '", origin, "' must have dim ", d, " = ",
                   s.dims[d], ", got ", dims_str(x.dims));
      } else if (!s.symbols[d].empty()) {
        auto [it, fresh] = symbols.emplace(s.symbols[d], x.dims[d]);
        PARE_CHECK(fresh || it->second == x.dims[d], "inputs of '", origin, "' disagree on dim '", s.symbols[d],
                   "': ", it->second, " and ", x.dims[d]);
      }
    }
    PARE_CHECK(x.data || x.numel() == 0, "input '", s.name, "' has no data");
    dims.push_back(x.dims);
  }
  return dims;
}

const std::vector<TensorView>& Model::run(const std::vector<TensorView>& inputs) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  Impl::Threads t(m.threads);
  // The shapes of the last run at the same thread count: no lookup and no allocation, only the
  // checks that keep the plan valid.
  Plan* p = m.last;
  bool same = p && p->threads == omp_get_max_threads() && inputs.size() == p->input_dims.size();
  for (size_t k = 0; same && k < inputs.size(); ++k)
    same = inputs[k].dtype == m.graph.input_specs[k].dtype && inputs[k].dims == p->input_dims[k] &&
           (inputs[k].data || p->values[static_cast<size_t>(m.graph.inputs[k])].md.get_size() == 0);
  if (!same) p = &m.plan_for(m.check_inputs(inputs));
  run_plan(*p, inputs, m.stream, m.profile);
  m.last = p;
  return p->out_views;
}

std::string backend_version() {
  load_dnnl();
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream os;
  os << "oneDNN " << v->major << "." << v->minor << "." << v->patch;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_vnni: os << " (avx512_core_vnni)"; break;
    case dnnl::cpu_isa::avx512_core_bf16: os << " (avx512_core_bf16)"; break;
    case dnnl::cpu_isa::avx512_core_amx: os << " (avx512_core_amx)"; break;
    case dnnl::cpu_isa::avx512_core: os << " (avx512_core)"; break;
    case dnnl::cpu_isa::avx2_vnni: os << " (avx2_vnni)"; break;
    case dnnl::cpu_isa::avx2: os << " (avx2)"; break;
    default: os << " (" << static_cast<int>(dnnl::get_effective_cpu_isa()) << ")"; break;
  }
  return os.str();
}

}  // namespace pare::rt
