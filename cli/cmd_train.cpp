// pare train --model SPEC|FILE.onnx --data D --epochs N --batch-size B --lr X --out FILE.onnx
// pare train --model llama:layers=4,dim=256,...|hf:DIR --tokenizer tokenizer.json --data text:FILE
//            --seq-len 256 --out DIR      (a language model: next-token loss, a Hugging Face folder out)
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "lm/hf_export.h"
#include "lm/model.h"
#include "lm/spec.h"
#include "lm/text.h"

namespace pare::cli {

namespace {

struct TrainOpts {
  std::string model, out, tokenizer;
  int64_t seq_len = 0;
  TrainingRun run;
};

// The model to train: a new one from a spec (its vocabulary the tokenizer's), or a checkpoint.
lm::LmModel lm_to_train(const TrainOpts& o, uint64_t seed) {
  std::shared_ptr<const lm::Tokenizer> tok;
  if (!o.tokenizer.empty()) tok = std::make_shared<const lm::Tokenizer>(lm::Tokenizer::from_file(o.tokenizer));
  lm::LmModel m;
  if (lm::is_new_lm_spec(o.model)) {
    PARE_CHECK(tok != nullptr, "--model ", o.model, " is a new language model: give its --tokenizer tokenizer.json");
    m = lm::new_model(o.model, tok, o.tokenizer, seed);
  } else {
    lm::BuildOptions b;
    b.dtype = at::kFloat;  // trained in fp32
    m = lm::load_lm(o.model, b);
  }
  if (tok) m.tok = tok, m.tokenizer = o.tokenizer;
  PARE_CHECK(m.tok != nullptr, o.model, " has no tokenizer: give --tokenizer tokenizer.json");
  PARE_CHECK(m.tok->vocab_size() <= m.config.vocab, "the tokenizer's ", m.tok->vocab_size(), " tokens do not fit the model's "
             "vocabulary of ", m.config.vocab);
  return m;
}

// A language model on text: windows of --seq-len tokens, next-token loss, a Hugging Face folder out.
void train_lm(TrainOpts& o) {
  const TrainingRun& run = o.run;
  PARE_CHECK(run.normalize.empty() && run.augment.empty(), "--normalize and --augment apply to images, not to text");
  train::TrainerOptions opts = run.start();
  lm::LmModel m = lm_to_train(o, opts.seed_);
  const int64_t seq = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(256, m.config.max_positions);
  PARE_CHECK(seq <= m.config.max_positions, "--seq-len ", seq, " is longer than the model's context (",
             m.config.max_positions, ")");
  const bool talk = !run.quiet && opts.is_writer();
  opts.eval_batch_size_ = lm_eval_batch_size(opts.batch_size_, seq, m.config.vocab);
  const core::TensorDataset train = run.text_windows(*m.tok, "train", seq, talk);
  core::TensorDataset val;
  if (!run.no_val) val = run.text_windows(*m.tok, run.val_split, seq, talk);
  core::Module model(m.graph);
  if (talk)
    std::fprintf(stderr, "training %s (%lld parameters) on %lld windows of %lld tokens, %lld epochs\n", o.model.c_str(),
                 (long long)model.parameter_count(), (long long)train.size(), (long long)seq, (long long)opts.epochs_);
  const auto history = train::Trainer(model, opts).fit(train, run.no_val ? nullptr : &val);
  if (!opts.is_writer()) return;  // rank 0 writes the model and reports
  m.graph = model.to_graph();
  lm::save_hf(m, o.out);
  const auto& last = history.back();
  nlohmann::json j = {{"model", o.model}, {"out", o.out}, {"epochs", history.size()}, {"train_loss", last.train_loss},
                      {"train_perplexity", std::exp(last.train_loss)}, {"tokens_per_s", last.samples_per_s}};
  if (last.val_loss >= 0) j["val_loss"] = last.val_loss, j["val_perplexity"] = std::exp(last.val_loss);
  if (run.json) std::cout << j.dump() << "\n";
  else if (!run.quiet)
    std::fprintf(stderr, "wrote %s (train perplexity %.2f%s)\n", o.out.c_str(), std::exp(last.train_loss),
                 last.val_loss >= 0 ? (", " + run.val_split + " perplexity " + std::to_string(std::exp(last.val_loss))).c_str() : "");
}

}  // namespace

void add_train(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("train", "Train a model with labels (how teachers are made), or a language model on text");
  using Opts = TrainOpts;
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model,-m", o->model,
                  "Zoo spec (mlp:784-300-100-10, lenet5, cnn, resnet:N, transformer:...) or ONNX file; a language "
                  "model: llama:layers=L,dim=D,heads=H,kv-heads=K,ff=F,ctx=C (also qwen2:, qwen3:, gpt2:), hf:DIR or gguf:FILE")
      ->required();
  cmd->add_option("--out,-o", o->out, "Where to write the trained model (.onnx; a language model: a Hugging Face folder)")
      ->required();
  o->run.add_options(cmd);
  cmd->get_option("--data")->description("fashion-mnist[:DIR] or npy:X.npy,Y.npy; for a language model "
                                         "text:FILE[,FILE...] or jsonl:FILE[:FIELD] (every 10th document is --val-split test)");
  auto lmg = "Language models";
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (required for a new model from a spec)")->group(lmg);
  cmd->add_option("--seq-len", o->seq_len, "Tokens per training window (default 256, at most the context)")->group(lmg);
  cmd->callback([&action, o] {
    action = [o] {
      if (lm::is_new_lm_spec(o->model) || lm::is_lm_spec(o->model) || lm::is_text_spec(o->run.data)) return train_lm(*o);
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
