// pare train --model SPEC|FILE.onnx --data D --epochs N --batch-size B --lr X --out FILE.onnx
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/module.h"
#include "core/onnx_io.h"

namespace pare::cli {

void add_train(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("train", "Train a model with labels (how teachers are made)");
  struct Opts {
    std::string model, out;
    TrainingRun run;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model,-m", o->model,
                  "Zoo spec (mlp:784-300-100-10, lenet5, cnn, resnet:N, transformer:...) or ONNX file")
      ->required();
  cmd->add_option("--out,-o", o->out, "Where to write the trained model (.onnx)")->required();
  o->run.add_options(cmd);
  cmd->callback([&action, o] {
    action = [o] {
      const TrainingRun& run = o->run;
      train::TrainerOptions opts = run.start();
      core::Graph g = core::load_model(o->model, opts.seed_);
      core::TensorDataset train, val;
      const core::TensorDataset* val_ptr = run.load_data(train, val, g, opts);
      core::Module model(std::move(g));
      if (!run.quiet && opts.is_writer())
        std::fprintf(stderr, "training %s (%lld parameters) on %s: %lld samples, %lld epochs\n",
                     o->model.c_str(), (long long)model.parameter_count(), train.name.c_str(),
                     (long long)train.size(), (long long)opts.epochs_);
      auto history = train::Trainer(model, opts).fit(train, val_ptr);
      core::Graph trained = model.to_graph();
      trained.metadata["pare.trained_on"] = run.data;
      if (!opts.is_writer()) return;  // rank 0 writes the model and reports
      core::save_onnx(trained, o->out);
      const auto& last = history.back();
      if (run.json) {
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
      } else if (!run.quiet) {
        std::fprintf(stderr, "wrote %s\n", o->out.c_str());
      }
    };
  });
}

}  // namespace pare::cli
