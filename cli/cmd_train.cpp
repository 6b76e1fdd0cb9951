// pare train --model SPEC|FILE.onnx --data D --epochs N --batch-size B --lr X --out FILE.onnx
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/data.h"
#include "core/error.h"
#include "core/module.h"
#include "core/onnx_io.h"

namespace pare::cli {

void add_train(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("train", "Train a model with labels (how teachers are made)");
  struct Opts {
    std::string model, data, out, normalize, val_split = "test";
    distill::TrainerOptions trainer = distill::TrainerOptions().batch_size(128).epochs(5);
    bool quiet = false, json = false, no_val = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model,-m", o->model,
                  "Zoo spec (mlp:784-300-100-10, lenet5, cnn, resnet:N, transformer:...) or ONNX file")
      ->required();
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR] or npy:X.npy,Y.npy")->required();
  cmd->add_option("--out,-o", o->out, "Where to write the trained model (.onnx)")->required();
  add_trainer_options(cmd, o->trainer);
  cmd->add_option("--normalize", o->normalize, "MEAN,STD applied to inputs (recorded in the model's metadata)");
  cmd->add_option("--val-split", o->val_split, "Split evaluated after each epoch")->capture_default_str();
  cmd->add_flag("--no-val", o->no_val, "Skip evaluation after each epoch");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
  cmd->add_flag("--json", o->json, "Print a JSON summary of the run on stdout");
  cmd->callback([&action, o] {
    action = [o] {
      set_threads(o->threads);
      distill::TrainerOptions opts = o->trainer;
      opts.progress(!o->quiet);
      opts.validate();
      core::Graph g = core::load_model(o->model, opts.seed_);
      core::TensorDataset train = core::load_dataset(o->data, "train");
      core::TensorDataset val;
      if (!o->no_val) val = core::load_dataset(o->data, o->val_split);
      if (!o->normalize.empty()) {
        core::normalize(train, o->normalize);
        if (!o->no_val) core::normalize(val, o->normalize);
        g.metadata["pare.normalize"] = o->normalize;
      }
      core::Module model(std::move(g));
      if (!o->quiet)
        std::fprintf(stderr, "training %s (%lld parameters) on %s: %lld samples, %lld epochs\n",
                     o->model.c_str(), (long long)model.parameter_count(), train.name.c_str(),
                     (long long)train.size(), (long long)opts.epochs_);
      distill::Trainer trainer(model, opts);
      auto history = trainer.fit(train, o->no_val ? nullptr : &val);
      core::Graph trained = model.to_graph();
      trained.metadata["pare.trained_on"] = o->data;
      core::save_onnx(trained, o->out);
      const auto& last = history.back();
      if (o->json) {
        double secs = 0;
        for (auto& h : history) secs += h.seconds;
        nlohmann::json j = {{"model", o->model}, {"out", o->out}, {"epochs", history.size()},
                            {"train_loss", last.train_loss}, {"train_accuracy", last.train_accuracy},
                            {"samples_per_s", last.samples_per_s}, {"seconds", secs}};
        if (last.val_accuracy >= 0) {
          j["val_accuracy"] = last.val_accuracy;
          j["val_loss"] = last.val_loss;
        }
        std::cout << j.dump() << "\n";
      } else if (!o->quiet) {
        std::fprintf(stderr, "wrote %s\n", o->out.c_str());
      }
    };
  });
}

}  // namespace pare::cli
