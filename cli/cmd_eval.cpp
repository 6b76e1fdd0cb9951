// pare eval MODEL --data D [--split test] [--json]
// pare eval LM --data text:FILE|jsonl:FILE[:FIELD] [--seq-len N] [--split test] [--json]: perplexity
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/data.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "distill/teacher.h"
#include "lm/eval.h"
#include "lm/model.h"
#include "lm/text.h"
#include "train/trainer.h"

namespace pare::cli {

namespace {

struct EvalOpts {
  std::string model, data, split = "test", normalize, engine = "torch", device = "auto";
  int64_t batch_size = 512, seq_len = 0, max_windows = 0;
  bool json = false, quiet = false;
  int threads = 0;
};

// A language model on text: the perplexity of the held-out documents (--split test: every 10th).
void eval_lm(const EvalOpts& o, int64_t batch_size) {
  PARE_CHECK(o.engine == "torch", "--engine ", o.engine, " does not run language models yet; use --engine torch");
  const lm::LmModel m = lm::load_lm(o.model);
  PARE_CHECK(m.tok != nullptr, o.model, ": perplexity on text needs the model's tokenizer, and it has none");
  const std::vector<int64_t> stream = lm::token_stream(*m.tok, lm::load_text(o.data, o.split == "test" ? "test" : o.split));
  core::Module model(m.graph, core::Module::Use::kFrozen);
  model.to(resolve_device(o.device));
  lm::PerplexityOptions popts;
  popts.seq_len = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(512, m.config.max_positions);
  PARE_CHECK(popts.seq_len <= m.config.max_positions, "--seq-len ", popts.seq_len, " is longer than the model's context (",
             m.config.max_positions, ")");
  popts.batch_size = batch_size;
  popts.max_windows = o.max_windows;
  if (!o.quiet)
    popts.progress = [](int64_t done, int64_t total) { std::fprintf(stderr, "\r  windows %lld/%lld", (long long)done, (long long)total); };
  const lm::PerplexityResult r = lm::perplexity(model, stream, popts);
  if (!o.quiet) std::fprintf(stderr, "\n");
  if (o.json) {
    std::cout << nlohmann::json{{"model", o.model}, {"data", o.data}, {"split", o.split}, {"perplexity", r.perplexity()},
                                {"nll_per_token", r.nll / static_cast<double>(r.tokens)}, {"tokens", r.tokens},
                                {"windows", r.windows}, {"seq_len", r.seq_len}, {"seconds", r.seconds},
                                {"tokens_per_s", r.tokens_per_second()}}
                     .dump()
              << "\n";
  } else {
    std::printf("%s on %s (%s, %lld tokens predicted in %lld windows of %lld): perplexity %.3f, %.4f nats/token, "
                "%.0f tokens/s\n", o.model.c_str(), lm::short_text_spec(o.data).c_str(), o.split.c_str(), (long long)r.tokens,
                (long long)r.windows, (long long)r.seq_len, r.perplexity(), r.nll / static_cast<double>(r.tokens),
                r.tokens_per_second());
  }
}

}  // namespace

void add_eval(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("eval", "Accuracy, loss and throughput of a classifier on a dataset, or the "
                                         "perplexity of a language model on text");
  auto o = std::make_shared<EvalOpts>();
  cmd->add_option("model", o->model, "ONNX file, zoo spec, or language model (hf:DIR, gguf:FILE)")->required();
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR] or npy:X.npy,Y.npy; for a language model text:FILE[,FILE...] "
                  "(paragraphs) or jsonl:FILE[:FIELD]")->required();
  cmd->add_option("--split", o->split, "train or test (text: every 10th document is test), or all")->capture_default_str();
  auto* batch = cmd->add_option("--batch-size,-b", o->batch_size, "Samples per forward (language models: windows, default 1)")
                    ->capture_default_str();
  cmd->add_option("--seq-len", o->seq_len, "Language models: tokens per window (default: 512 or the context)");
  cmd->add_option("--max-windows", o->max_windows, "Language models: evaluate at most this many windows (0: all)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
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
  cmd->callback([&action, o, batch] {
    action = [o, batch] {
      train::set_threads(o->threads);
      PARE_CHECK(o->batch_size >= 1, "--batch-size must be at least 1, got ", o->batch_size);
      if (lm::is_lm_spec(o->model) || lm::is_text_spec(o->data)) return eval_lm(*o, batch->count() ? o->batch_size : 1);
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
