// The engines (engine.h): libtorch graphs (core::Module), pare_rt, sharded graphs, TorchScript
// black boxes, plus the spec loader; the cache engine is in cache.cpp.
#include "engine/engine.h"

#include <ATen/core/grad_mode.h>
#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "engine/cache.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/zoo.h"
#include "export/rt_bridge.h"

namespace pare::engine {

namespace {

std::string sizes_str(const at::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
  os << "]";
  return os.str();
}

// libtorch messages carry a backtrace and several lines of context; keep the line that says what
// failed: the first, or for the TorchScript interpreter (a header, two tracebacks, then
// "RuntimeError: ...") the last.
std::string brief(const std::exception& e) {
  std::string msg;
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e))
    msg = c10e->what_without_backtrace();
  else
    msg = e.what();
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (msg.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    auto nl = msg.rfind('\n');
    return nl == std::string::npos ? msg : msg.substr(nl + 1);
  }
  auto nl = msg.find('\n');
  return nl == std::string::npos ? msg : msg.substr(0, nl);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  return std::equal(suffix.rbegin(), suffix.rend(), s.rbegin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

bool is_torchscript_path(const std::string& s) {
  return ends_with(s, ".pt") || ends_with(s, ".ts") || ends_with(s, ".torchscript");
}

// TorchScript archives are zip files; ONNX files are protobuf, which never starts with "PK".
bool looks_like_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

// The batch as a graph expects it: on the module's device, and cast when both the batch and the
// graph input are floating point but differ (a float64 .npy fed to a float32 model).
at::Tensor prepare_graph_input(const at::Tensor& x, const core::Module& m, const std::string& who) {
  PARE_CHECK(x.defined(), who, ": the input batch is an undefined tensor");
  const auto& inputs = m.graph().inputs;
  at::Tensor in = x;
  if (inputs.size() == 1 && at::isFloatingType(in.scalar_type()) &&
      at::isFloatingType(inputs[0].dtype) && in.scalar_type() != inputs[0].dtype)
    in = in.to(inputs[0].dtype);
  if (in.device() != m.device()) in = in.to(m.device());
  return in;
}

int64_t classes_of(const at::Tensor& logits, const std::string& who, const at::Tensor& example) {
  PARE_CHECK(logits.dim() >= 2, who, " gives an output of shape ", sizes_str(logits),
             " on an input of shape ", sizes_str(example), "; expected logits [N, ..., classes]");
  return logits.size(-1);
}

// The first row of a batch, for probe forwards.
at::Tensor probe_row(const at::Tensor& example, const std::string& who) {
  PARE_CHECK(example.defined() && example.dim() >= 1 && example.size(0) >= 1, who,
             ": the example input must be a batch [N, ...] with N >= 1, got ",
             example.defined() ? sizes_str(example) : std::string("an undefined tensor"));
  return example.slice(0, 0, 1);
}

// ", such as 'conv1', 'bn1', 'relu1'": a few value names for messages.
std::string some_values(const core::Graph& g) {
  std::string r;
  int shown = 0;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) {
      if (o.empty() || shown == 4) continue;
      r += (shown++ ? ", '" : ", such as '") + o + "'";
    }
  return r;
}

// Restores a module's train/eval mode when a scope ends (also on an exception).
struct ModeGuard {
  core::Module& m;
  bool was_training;
  explicit ModeGuard(core::Module& mod) : m(mod), was_training(mod.is_training()) {}
  ~ModeGuard() { m.train(was_training); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// TorchEngine

TorchEngine::TorchEngine(core::Graph g, std::string name)
    : module_(std::move(g), core::Module::Use::kFrozen), name_(std::move(name)) {
  PARE_CHECK(module_.graph().inputs.size() == 1, describe(), " must have exactly one input, has ",
             module_.graph().inputs.size());
  PARE_CHECK(!module_.graph().outputs.empty(), describe(), " has no outputs");
  module_.eval();
  // A frozen teacher runs channels-last: libtorch's CPU conv and max-pool kernels are 1.5-2x
  // faster that way (bench/kd_step.sh), and the teacher's forward dominates a KD step.
  module_.set_memory_format(at::MemoryFormat::ChannelsLast);
}

std::unordered_map<std::string, at::Tensor> TorchEngine::forward(const at::Tensor& x,
                                                                  const std::vector<std::string>& values) {
  std::vector<std::string> extra;
  for (const auto& v : values) {
    if (v == "logits") continue;
    PARE_CHECK(has_value(v), describe(), " has no value named '", v, "' (values are node outputs",
               some_values(module_.graph()), "; `pare inspect` lists them all)");
    extra.push_back(v);
  }
  at::NoGradGuard no_grad;
  module_.eval();
  at::Tensor in = prepare_graph_input(x, module_, describe());
  std::unordered_map<std::string, at::Tensor> vals;
  try {
    vals = module_.forward_values({in}, extra);
  } catch (const InputError& e) {
    throw InputError(describe() + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // an op's libtorch kernel refused the input
    throw InputError(describe() + " failed on an input of shape " + sizes_str(x) + ": " + brief(e));
  }
  std::unordered_map<std::string, at::Tensor> r;
  auto put = [&](const std::string& key, const at::Tensor& t) {
    r[key] = t.device() == x.device() ? t : t.to(x.device());
  };
  put("logits", vals.at(module_.graph().outputs.front().name));
  for (const auto& v : extra) put(v, vals.at(v));
  return r;
}

bool TorchEngine::has_value(const std::string& name) const {
  if (name == "logits") return true;
  const auto& g = module_.graph();
  if (g.is_initializer(name) || g.find_input(name)) return true;
  for (const auto& n : g.nodes)
    if (std::find(n.outputs.begin(), n.outputs.end(), name) != n.outputs.end()) return true;
  return false;
}

int64_t Engine::num_classes(const at::Tensor& example) {
  if (!classes_) {
    at::Tensor row = probe_row(example, describe());
    classes_ = classes_of(logits(row), describe(), row);
  }
  return *classes_;
}

std::string TorchEngine::describe() const { return "graph teacher '" + name_ + "'"; }

void TorchEngine::to(const at::Device& d) { module_.to(d); }

// ---------------------------------------------------------------------------------------------
// RtEngine

RtEngine::RtEngine(const std::string& spec, uint64_t seed) : spec_(spec), seed_(seed) {
  model_ = std::make_unique<rt::Model>(exporter::load_rt_model(spec, rt::Options(), seed));
  PARE_CHECK(model_->inputs().size() == 1, describe(), " must have exactly one input, has ", model_->inputs().size());
  PARE_CHECK(!model_->outputs().empty(), describe(), " has no outputs");
}

RtEngine::~RtEngine() = default;

std::unordered_map<std::string, at::Tensor> RtEngine::forward(const at::Tensor& x,
                                                               const std::vector<std::string>& values) {
  PARE_CHECK(x.defined(), describe(), ": the input batch is an undefined tensor");
  std::vector<std::string> extra;
  for (const auto& v : values) {
    if (v == "logits") continue;
    PARE_CHECK(has_value(v), describe(), " has no value named '", v, "' (`pare inspect` lists the node outputs)");
    extra.push_back(v);
  }
  if (extra != extra_) {  // hints ask for other values: the runtime keeps them as outputs
    model_ = std::make_unique<rt::Model>(exporter::load_rt_model(spec_, rt::Options().extra_outputs(extra), seed_));
    extra_ = extra;
  }
  at::Tensor in = x.device().is_cpu() ? x : x.cpu();  // pare_rt runs on the CPU whatever the student's device
  if (at::isFloatingType(in.scalar_type()) && model_->inputs()[0].dtype == rt::DType::kFloat32) in = in.to(at::kFloat);
  in = in.contiguous();
  std::vector<rt::TensorView> out;
  try {
    out = model_->run({exporter::rt_view(in)});
  } catch (const InputError& e) {
    throw InputError(describe() + ": " + e.what());
  }
  const size_t n_outputs = model_->outputs().size() - extra_.size();
  std::unordered_map<std::string, at::Tensor> r;
  r["logits"] = exporter::from_rt(out.at(0)).to(x.device());
  for (size_t k = 0; k < extra_.size(); ++k) r[extra_[k]] = exporter::from_rt(out.at(n_outputs + k)).to(x.device());
  return r;
}

bool RtEngine::has_value(const std::string& name) const { return name == "logits" || model_->has_value(name); }

std::string RtEngine::describe() const { return "pare_rt teacher '" + spec_ + "'"; }

// pare_rt runs on the CPU; a student on another device gets the logits copied to its device.
void RtEngine::to(const at::Device&) {}

Kind parse_kind(const std::string& s, const std::string& option) {
  if (s == "torch") return Kind::kTorch;
  if (s == "rt") return Kind::kRt;
  throw InputError(option + " must be torch or rt, got '" + s + "'").about(option);
}

// ---------------------------------------------------------------------------------------------
// ShardedEngine

ShardedEngine::ShardedEngine(const core::Graph& g, std::string name, dist::TeacherParallel mode,
                               std::shared_ptr<dist::ProcessGroup> pg, int64_t max_stage_bytes)
    : model_(std::make_unique<dist::ShardedModel>(g, mode, std::move(pg), max_stage_bytes)), name_(std::move(name)) {
  const auto& out = model_->output_sizes();
  PARE_CHECK(out.size() == 2, "teacher '", name_, "' yields logits of shape ", c10::IntArrayRef(out), " at batch 1; a sharded "
             "teacher must yield [N, classes]");
  classes_ = out[1];
  input_dtype_ = g.inputs[0].dtype;  // one input: ShardedModel checked
}

ShardedEngine::~ShardedEngine() = default;

std::unordered_map<std::string, at::Tensor> ShardedEngine::forward(const at::Tensor& x,
                                                                    const std::vector<std::string>& values) {
  for (const auto& v : values)
    PARE_CHECK(v == "logits", describe(), " provides logits only, not '", v, "' (hint and attention "
               "losses need a whole teacher)");
  at::Tensor in = x.device().is_cpu() ? x : x.cpu();
  if (at::isFloatingType(in.scalar_type()) && at::isFloatingType(input_dtype_) && in.scalar_type() != input_dtype_)
    in = in.to(input_dtype_);
  return {{"logits", model_->forward(in).to(x.device())}};
}

int64_t ShardedEngine::num_classes(const at::Tensor&) { return classes_; }

std::string ShardedEngine::describe() const {
  const auto& r = model_->report();
  return std::string(r.mode == "tp" ? "tensor-parallel" : "pipeline") + " graph teacher '" + name_ + "' (" +
         std::to_string(r.ranks) + " ranks)";
}

// The shards run on the CPU (not on GPUs yet); a student on another device gets the logits copied
// to its device.
void ShardedEngine::to(const at::Device&) {}

// ---------------------------------------------------------------------------------------------
// TorchScriptEngine

struct TorchScriptEngine::Impl {
  torch::jit::Module module;
};

TorchScriptEngine::TorchScriptEngine(const std::string& path) : impl_(new Impl), path_(path) {
  PARE_CHECK(file_exists(path), "TorchScript teacher '", path, "' does not exist");
  try {
    impl_->module = torch::jit::load(path, at::Device(at::kCPU));
  } catch (const std::exception& e) {
    throw InputError("cannot load TorchScript teacher '" + path + "': " + brief(e) +
                     " (expected an archive written by torch.jit.script(model).save() or "
                     "torch.jit.trace(model, x).save(); a torch.save()d state_dict or pickled model "
                     "is not TorchScript)");
  }
  impl_->module.eval();
  // pare feeds float32 batches: cast floating-point weights saved as float64 / float16 to match.
  // Integer buffers (BatchNorm's num_batches_tracked, position ids) keep their dtype.
  at::NoGradGuard no_grad;
  auto cast = [](at::Tensor t) {
    if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat) t.set_data(t.to(at::kFloat));
  };
  for (const auto& p : impl_->module.parameters(/*recurse=*/true)) cast(p);
  for (const auto& b : impl_->module.buffers(/*recurse=*/true)) cast(b);
}

TorchScriptEngine::~TorchScriptEngine() = default;

std::unordered_map<std::string, at::Tensor> TorchScriptEngine::forward(
    const at::Tensor& x, const std::vector<std::string>& values) {
  for (const auto& v : values)
    PARE_CHECK(v == "logits", describe(), " is a black box: it provides logits only, not value '", v,
               "' (hint and attention losses need an ONNX or zoo teacher)");
  PARE_CHECK(x.defined(), describe(), ": the input batch is an undefined tensor");
  at::NoGradGuard no_grad;
  impl_->module.eval();
  at::Tensor in = x;
  if (at::isFloatingType(in.scalar_type()) && in.scalar_type() != at::kFloat) in = in.to(at::kFloat);
  if (in.device() != device_) in = in.to(device_);
  c10::IValue out;
  try {
    out = impl_->module.forward({in});
  } catch (const std::exception& e) {
    throw InputError(describe() + " failed on an input of shape " + sizes_str(x) + " (" +
                     std::string(c10::toString(in.scalar_type())) + "): " + brief(e));
  }
  if (out.isTuple() && !out.toTupleRef().elements().empty()) {
    out = out.toTupleRef().elements()[0];
  } else if (out.isList() && !out.toListRef().empty()) {
    out = out.toListRef()[0];
  }
  PARE_CHECK(out.isTensor(), describe(), " returned ", out.tagKind(),
             "; expected the logits tensor, or a tuple or list whose first element is the logits");
  at::Tensor logits = out.toTensor().detach();
  if (logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);
  if (logits.device() != x.device()) logits = logits.to(x.device());
  return {{"logits", logits}};
}

bool TorchScriptEngine::has_value(const std::string& name) const { return name == "logits"; }

std::string TorchScriptEngine::describe() const { return "TorchScript teacher '" + path_ + "'"; }

void TorchScriptEngine::to(const at::Device& d) {
  impl_->module.to(d);
  device_ = d;
}

// ---------------------------------------------------------------------------------------------
// Loading and checking

namespace {
void check_teacher_spec(const std::string& spec) {
  PARE_CHECK(!spec.empty(), "empty teacher spec: expected an ONNX file, a TorchScript file or a zoo model");
}
bool is_graph_spec(const std::string& spec) {
  return spec.rfind("cache:", 0) != 0 && !is_torchscript_path(spec) && !(file_exists(spec) && looks_like_zip(spec));
}
}  // namespace

core::Graph load_graph(const std::string& spec, uint64_t seed) {
  check_teacher_spec(spec);
  PARE_CHECK(is_graph_spec(spec), "teacher '", spec, "' is ",
             spec.rfind("cache:", 0) == 0 ? "a cache of outputs" : "a TorchScript module",
             ", not a graph (ONNX file or zoo model)");
  try {
    if (core::is_zoo_spec(spec)) return core::build_zoo_model(spec, seed);
    PARE_CHECK(file_exists(spec) || !ends_with(spec, ".onnx"), "teacher file '", spec, "' does not exist");
    if (file_exists(spec)) return core::load_onnx(spec);
    core::load_model(spec, seed);  // throws the "neither a file nor a zoo model" message with the zoo list
  } catch (const InputError& e) {
    std::string msg = e.what();
    throw msg.find(spec) != std::string::npos ? InputError(msg) : InputError("teacher '" + spec + "': " + msg);
  }
  throw InputError("teacher '" + spec + "' is neither a file nor a zoo model");
}

std::unique_ptr<Engine> load(const std::string& spec, uint64_t seed, Kind kind) {
  check_teacher_spec(spec);
  const bool cache = spec.rfind("cache:", 0) == 0;
  if (kind == Kind::kRt) {
    if (cache || !is_graph_spec(spec))
      throw InputError(pare::detail::concat("teacher_engine rt runs ONNX and zoo teachers on pare_rt; '", spec, "' is ",
                                      cache ? "a teacher cache" : "TorchScript", " (use the torch engine)"))
          .about("teacher_engine");
    return std::make_unique<RtEngine>(spec, seed);
  }
  if (cache) return std::make_unique<CachedEngine>(spec.substr(6));
  if (!is_graph_spec(spec)) return std::make_unique<TorchScriptEngine>(spec);
  return std::make_unique<TorchEngine>(load_graph(spec, seed), spec);
}

void check_compatible(Engine& teacher, core::Module& student, const at::Tensor& example) {
  const std::string student_name = "student '" + student.graph().name + "'";
  int64_t k = teacher.num_classes(example);
  at::Tensor row = probe_row(example, student_name);
  at::Tensor out;
  {
    ModeGuard mode(student);
    student.eval();
    at::NoGradGuard no_grad;
    auto outs = student.forward({prepare_graph_input(row, student, student_name)});
    PARE_CHECK(!outs.empty(), student_name, " has no outputs");
    out = outs.front();
  }
  int64_t m = classes_of(out, student_name, row);
  PARE_CHECK(k == m, teacher.describe(), " has ", k, " classes but ", student_name, " has ", m,
             " (the logits' last dim on an example input of shape ", sizes_str(row), ")");
}

}  // namespace pare::engine
