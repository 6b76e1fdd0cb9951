// pare run MODEL --input [NAME=]FILE.npy ... [--output [NAME=]FILE.npy ...]
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "dist/shard.h"

namespace pare::cli {

namespace {
// "name=path" -> {name, path}; "path" -> {"", path}.
std::pair<std::string, std::string> split_binding(const std::string& s) {
  auto eq = s.find('=');
  if (eq == std::string::npos) return {"", s};
  return {s.substr(0, eq), s.substr(eq + 1)};
}
}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "Run a model on inputs from .npy files");
  struct Opts {
    std::string model;
    std::vector<std::string> inputs, outputs;
    std::string parallel = "none";
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "ONNX file or zoo spec")->required();
  cmd->add_option("--input,-i", o->inputs, "[NAME=]FILE.npy for each graph input (in order when NAME is left out)")
      ->required();
  cmd->add_option("--output,-o", o->outputs,
                  "[NAME=]FILE.npy: where to write outputs (the first graph output when NAME is left out)")
      ->required();
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_option("--parallel", o->parallel,
                  "Under pare launch or torchrun: run the model sharded over the ranks, tensor (tp) or "
                  "pipeline (pp) parallel, each rank on its own --input; rank 0 writes the first output")
      ->capture_default_str();
  cmd->callback([&action, o] {
    action = [o] {
      set_threads(o->threads);
      core::Graph g = core::load_model(o->model);
      std::vector<at::Tensor> feeds(g.inputs.size());
      size_t next = 0;
      for (auto& spec : o->inputs) {
        auto [name, path] = split_binding(spec);
        size_t idx = next;
        if (!name.empty()) {
          idx = g.inputs.size();
          for (size_t i = 0; i < g.inputs.size(); ++i)
            if (g.inputs[i].name == name) idx = i;
          std::string names;
          for (auto& in : g.inputs) names += " " + in.name;
          PARE_CHECK(idx < g.inputs.size(), "--input ", spec, ": the model has no input '", name,
                     "' (inputs:", names, ")");
        }
        PARE_CHECK(idx < g.inputs.size(), "--input ", spec, ": the model takes only ",
                   g.inputs.size(), " input(s)");
        PARE_CHECK(!feeds[idx].defined(), "--input ", spec, ": input '", g.inputs[idx].name,
                   "' is given twice");
        try {
          feeds[idx] = core::load_npy(path);
        } catch (const Error& e) {
          throw InputError(std::string(e.what()) + " (for input '" + g.inputs[idx].name + "')");
        }
        next = idx + 1;
      }
      for (size_t i = 0; i < feeds.size(); ++i)
        PARE_CHECK(feeds[i].defined(), "no --input given for model input '", g.inputs[i].name, "'");
      std::vector<std::pair<std::string, std::string>> outs;
      for (auto& spec : o->outputs) {
        auto [name, path] = split_binding(spec);
        outs.emplace_back(name.empty() ? g.outputs.at(0).name : name, path);
      }
      const auto mode = dist::parse_teacher_parallel(o->parallel, "--parallel");
      if (mode != dist::TeacherParallel::kNone) {
        PARE_CHECK(mode != dist::TeacherParallel::kAuto, "--parallel takes tp or pp");
        PARE_CHECK(outs.size() == 1 && outs[0].first == g.outputs.at(0).name,
                   "--parallel ", o->parallel, " writes the model's first output only");
        const dist::World world = dist::World::from_env();
        PARE_CHECK(world.distributed(), "--parallel ", o->parallel, " needs more than one process: start it "
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
      at::NoGradGuard no_grad;
      auto values = m.forward_values(feeds, extra);
      for (auto& [name, path] : outs) core::save_npy(values.at(name), path);
    };
  });
}

}  // namespace pare::cli
