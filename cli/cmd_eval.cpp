// pare eval MODEL --data D [--split test] [--json]
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/data.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "distill/teacher.h"
#include "train/trainer.h"

namespace pare::cli {

void add_eval(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("eval", "Accuracy, loss and throughput of a classifier on a dataset");
  struct Opts {
    std::string model, data, split = "test", normalize, engine = "torch", device = "auto";
    int64_t batch_size = 512;
    bool json = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "ONNX file or zoo spec")->required();
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR] or npy:X.npy,Y.npy")->required();
  cmd->add_option("--split", o->split, "train or test")->capture_default_str();
  cmd->add_option("--batch-size,-b", o->batch_size, "Samples per forward")->capture_default_str();
  cmd->add_option("--normalize", o->normalize,
                  "MEAN,STD applied to inputs (default: what the model's metadata records)");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: every core)");
  cmd->add_option("--engine", o->engine,
                  "torch: pare's libtorch interpreter (QDQ simulated exactly); rt: pare_rt, the oneDNN edge "
                  "runtime (QDQ on int8 kernels): the accuracy a deployed model has")
      ->check(CLI::IsMember({"torch", "rt"}))
      ->capture_default_str();
  add_device_option(cmd, o->device, "the model (--engine torch)");
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  cmd->callback([&action, o] {
    action = [o] {
      train::set_threads(o->threads);
      PARE_CHECK(o->batch_size >= 1, "--batch-size must be at least 1, got ", o->batch_size);
      core::Graph g = core::load_model(o->model);
      core::TensorDataset ds = core::load_dataset(o->data, o->split);
      std::string norm = o->normalize;
      if (norm.empty() && g.metadata.count("pare.normalize")) norm = g.metadata["pare.normalize"];
      if (!norm.empty()) core::normalize(ds, norm);
      train::EvalResult r;
      check_engine_device(o->engine, o->device);
      if (o->engine == "rt") {
        engine::RtEngine rt(o->model);  // a model run by pare_rt, as a teacher is
        r = train::evaluate([&](const at::Tensor& x) { return rt.logits(x); }, ds, o->batch_size, rt.describe());
      } else {
        core::Module model(std::move(g));
        model.to(resolve_device(o->device));
        r = train::evaluate(model, ds, o->batch_size);
      }
      if (o->json) {
        std::cout << nlohmann::json{{"model", o->model}, {"data", o->data}, {"split", o->split}, {"engine", o->engine},
                                    {"accuracy", r.accuracy}, {"loss", r.loss},
                                    {"samples", r.samples}, {"seconds", r.seconds},
                                    {"samples_per_s", r.samples_per_s}}
                         .dump()
                  << "\n";
      } else {
        std::printf("%s on %s (%s, %lld samples): accuracy %.2f%%, loss %.4f, %.0f samples/s\n",
                    o->model.c_str(), ds.name.c_str(), o->split.c_str(), (long long)r.samples,
                    r.accuracy * 100, r.loss, r.samples_per_s);
      }
    };
  });
}

}  // namespace pare::cli
