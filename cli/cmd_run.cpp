// pare run MODEL --input [NAME=]FILE.npy ... [--output [NAME=]FILE.npy ...] [--engine torch|rt]
#include <ATen/core/grad_mode.h>

#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "dist/shard.h"
#include "export/rt_bridge.h"

namespace pare::cli {

namespace {

struct RunOpts {
  std::string model;
  std::vector<std::string> inputs, outputs;
  std::string parallel = "none", engine = "torch", device = "auto";
  int threads = 0;
  bool verbose = false;
};

// "name=path" -> {name, path}; "path" -> {"", path}.
std::pair<std::string, std::string> split_binding(const std::string& s) {
  auto eq = s.find('=');
  if (eq == std::string::npos) return {"", s};
  return {s.substr(0, eq), s.substr(eq + 1)};
}

// One tensor per model input from --input bindings (by name, or in order where NAME is left out).
std::vector<at::Tensor> read_inputs(const std::vector<std::string>& names, const std::vector<std::string>& specs) {
  std::vector<at::Tensor> feeds(names.size());
  size_t next = 0;
  for (auto& spec : specs) {
    auto [name, path] = split_binding(spec);
    size_t idx = next;
    if (!name.empty()) {
      idx = names.size();
      for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) idx = i;
      std::string all;
      for (auto& n : names) all += " " + n;
      PARE_CHECK(idx < names.size(), "--input ", spec, ": the model has no input '", name, "' (inputs:", all, ")");
    }
    PARE_CHECK(idx < names.size(), "--input ", spec, ": the model takes only ", names.size(), " input(s)");
    PARE_CHECK(!feeds[idx].defined(), "--input ", spec, ": input '", names[idx], "' is given twice");
    try {
      // .pb: an ONNX TensorProto, as in ONNX's test data sets (onnx_test_runner reads those too).
      const bool pb = path.size() > 3 && path.compare(path.size() - 3, 3, ".pb") == 0;
      feeds[idx] = pb ? core::load_tensor_pb(path) : core::load_npy(path);
    } catch (const Error& e) {
      throw InputError(std::string(e.what()) + " (for input '" + names[idx] + "')");
    }
    next = idx + 1;
  }
  for (size_t i = 0; i < feeds.size(); ++i)
    PARE_CHECK(feeds[i].defined(), "no --input given for model input '", names[i], "'");
  return feeds;
}

// (value name, path) per --output; a binding without NAME is the first graph output.
std::vector<std::pair<std::string, std::string>> output_bindings(const std::vector<std::string>& specs,
                                                                 const std::string& first_output) {
  std::vector<std::pair<std::string, std::string>> outs;
  for (auto& spec : specs) {
    auto [name, path] = split_binding(spec);
    outs.emplace_back(name.empty() ? first_output : name, path);
  }
  return outs;
}

void run_rt(const RunOpts& o) {
  // Graph outputs come first; other values asked for become extra outputs of the runtime model.
  rt::Model probe = exporter::load_rt_model(o.model, rt::Options().threads(o.threads));
  std::vector<std::string> extra;
  const auto outs = output_bindings(o.outputs, probe.outputs().at(0).name);
  for (auto& [name, path] : outs) {
    bool is_output = false;
    for (auto& s : probe.outputs()) is_output = is_output || s.name == name;
    if (!is_output) extra.push_back(name);
  }
  rt::Model m = extra.empty() ? std::move(probe)
                              : exporter::load_rt_model(o.model, rt::Options().threads(o.threads).extra_outputs(extra));
  if (o.verbose) std::cerr << m.report().to_text();
  std::vector<std::string> names;
  for (auto& s : m.inputs()) names.push_back(s.name);
  std::vector<at::Tensor> feeds = read_inputs(names, o.inputs);
  std::vector<rt::TensorView> views;
  for (size_t i = 0; i < feeds.size(); ++i) {
    // float64 .npy files feed float32 models, as in the torch engine.
    if (feeds[i].is_floating_point() && m.inputs()[i].dtype == rt::DType::kFloat32) feeds[i] = feeds[i].to(at::kFloat);
    feeds[i] = feeds[i].contiguous();
    views.push_back(exporter::rt_view(feeds[i]));
  }
  const std::vector<rt::TensorView> ys = m.run(views);
  for (auto& [name, path] : outs)
    for (size_t k = 0; k < m.outputs().size(); ++k)
      if (m.outputs()[k].name == name) {
        core::save_npy(exporter::from_rt(ys[k]), path);
        break;
      }
}

void run_torch(const RunOpts& o) {
  train::set_threads(o.threads);
  core::Graph g = core::load_model(o.model);
  std::vector<std::string> names;
  for (auto& in : g.inputs) names.push_back(in.name);
  std::vector<at::Tensor> feeds = read_inputs(names, o.inputs);
  const auto outs = output_bindings(o.outputs, g.outputs.at(0).name);
  const auto mode = dist::parse_teacher_parallel(o.parallel, "parallel");
  if (mode != dist::TeacherParallel::kNone) {
    PARE_CHECK(mode != dist::TeacherParallel::kAuto, "--parallel takes tp or pp");
    PARE_CHECK(outs.size() == 1 && outs[0].first == g.outputs.at(0).name, "--parallel ", o.parallel,
               " writes the model's first output only");
    const dist::World world = dist::World::from_env();
    PARE_CHECK(world.distributed(), "--parallel ", o.parallel, " needs more than one process: start it "
               "with pare launch --nproc-per-node N -- pare run ...");
    dist::ShardedModel sm(g, mode, dist::ProcessGroup::connect(world));
    at::Tensor y = sm.forward(feeds.at(0));
    if (world.rank != 0) return;
    std::cerr << sm.report().to_text();
    core::save_npy(y, outs[0].second);
    return;
  }
  std::vector<std::string> extra;
  for (auto& [name, path] : outs) extra.push_back(name);
  core::Module m(std::move(g), core::Module::Use::kFrozen);
  m.eval();
  const at::Device device = resolve_device(o.device);
  m.to(device);
  for (auto& f : feeds) f = f.to(device);
  at::NoGradGuard no_grad;
  auto values = m.forward_values(feeds, extra);
  for (auto& [name, path] : outs) core::save_npy(values.at(name).cpu(), path);
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "Run a model on inputs from .npy (or ONNX .pb) files");
  auto o = std::make_shared<RunOpts>();
  cmd->add_option("model", o->model, "ONNX file or zoo spec")->required();
  cmd->add_option("--input,-i", o->inputs, "[NAME=]FILE.npy (or FILE.pb, an ONNX TensorProto) for each graph input (in order when NAME is left out)")
      ->required();
  cmd->add_option("--output,-o", o->outputs,
                  "[NAME=]FILE.npy: where to write outputs (the first graph output when NAME is left out; any "
                  "intermediate value can be named)")
      ->required();
  cmd->add_option("--engine", o->engine,
                  "torch: pare's libtorch interpreter (every op; QDQ simulated exactly in float); rt: pare_rt, "
                  "the oneDNN edge runtime (QDQ lowered to int8 kernels)")
      ->check(CLI::IsMember({"torch", "rt"}))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: every core)");
  add_device_option(cmd, o->device, "the model (--engine torch)");
  cmd->add_flag("--verbose,-v", o->verbose, "--engine rt: print how the nodes were lowered (int8, fused, folded)");
  cmd->add_option("--parallel", o->parallel,
                  "Under pare launch or torchrun: run the model sharded over the ranks, tensor (tp) or "
                  "pipeline (pp) parallel, each rank on its own --input; rank 0 writes the first output")
      ->capture_default_str();
  cmd->callback([&action, o] {
    action = [o] {
      PARE_CHECK(o->engine == "torch" || o->parallel == "none", "--parallel runs on --engine torch");
      check_engine_device(o->engine, o->device);
      PARE_CHECK(o->parallel == "none" || o->device == "cpu" || o->device == "auto", "--parallel ", o->parallel,
                 " runs on the CPU (a sharded model does not run on GPUs yet); drop --device ", o->device);
      if (o->engine == "rt") run_rt(*o);
      else run_torch(*o);
    };
  });
}

}  // namespace pare::cli
