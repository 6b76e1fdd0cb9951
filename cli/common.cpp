// Helpers shared by the subcommands.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "dist/shard.h"
#include "dist/world.h"
#include "lm/data.h"
#include "lm/text.h"

namespace pare::cli {

// "a,b" and repeated flags both give lists.
std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (auto& s : in) {
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) out.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  return out;
}

void add_commands(CLI::App& app, Action& action) {
  add_inspect(app, action);
  add_run(app, action);
  add_train(app, action);
  add_distill(app, action);
  add_launch(app, action);
  add_teacher_cache(app, action);
  add_prune(app, action);
  add_eval(app, action);
  add_generate(app, action);
  add_quantize(app, action);
  add_bench(app, action);
  add_export(app, action);
  add_pipeline(app, action);
  add_report(app, action);
  add_tokenize(app, action);
#ifdef PARE_WITH_FEDERATED  // a build without gRPC has no federate command (CMakeLists.txt, PARE_FEDERATED)
  add_federate(app, action);
#endif
}

CLI::Option* add_device_option(CLI::App* cmd, std::string& device, const std::string& what) {
  return cmd->add_option("--device", device,
                         "Where " + what + " runs: cpu, cuda (under pare launch or torchrun: GPU LOCAL_RANK), "
                         "cuda:N, or auto (the GPU when this pare's libtorch has CUDA and one is present)")
      ->capture_default_str();
}

at::Device resolve_device(const std::string& spec) {
  return core::parse_device(spec, dist::World::from_env().local_rank);
}

void check_engine_device(const std::string& engine, const std::string& device) {
  PARE_CHECK(engine != "rt" || device == "cpu" || device == "auto", "--device ", device,
             ": --engine rt (pare_rt) runs on the CPU; use --engine torch for a GPU");
}

void TeacherSharding::add_options(CLI::App* cmd) {
  cmd->add_option("--teacher-engine", engine,
                  "torch: the teacher runs in pare's libtorch interpreter; rt: on pare_rt, the oneDNN inference "
                  "runtime (faster; int8 kernels for a quantized teacher from pare quantize)")
      ->check(CLI::IsMember({"torch", "rt"}))
      ->capture_default_str();
  cmd->add_option("--teacher-parallel", mode,
                  "Under pare launch or torchrun: shard the teacher over the ranks, tensor (tp) or pipeline "
                  "(pp) parallel, or let auto pick from its size, the memory and the world")
      ->capture_default_str();
  cmd->add_option("--teacher-memory", memory_mb,
                  "Memory per process (MB): --teacher-parallel auto plans with it (default: RAM / local ranks), "
                  "and a pipeline stage's weights take at most half of it");
}

std::unique_ptr<distill::Teacher> TeacherSharding::load(const std::vector<std::string>& specs,
                                                        const std::vector<double>& weights, uint64_t seed,
                                                        const std::shared_ptr<dist::ProcessGroup>& pg,
                                                        bool quiet) const {
  distill::PlacedTeacher placed = place(specs, weights, seed, pg);
  if (!quiet && dist::World::from_env().rank == 0) {
    if (!placed.auto_choice.empty()) std::fprintf(stderr, "--teacher-parallel auto: %s\n", placed.auto_choice.c_str());
    std::fprintf(stderr, "%s", placed.shard_report.c_str());
  }
  return std::move(placed.teacher);
}

void TrainingRun::add_options(CLI::App* cmd, bool data_optional, const std::set<std::string>& skip) {
  auto* d = cmd->add_option("--data,-d", data, "fashion-mnist[:DIR] or npy:X.npy,Y.npy");
  if (data_optional) d->description("fashion-mnist[:DIR] or npy:X.npy,Y.npy: to train, score or --analyze");
  else d->required();
  add_training_options(cmd, "Training", nullptr, skip);
  cmd->add_option("--normalize", normalize, "MEAN,STD applied to inputs (recorded in the model's metadata)");
  cmd->add_option("--val-split", val_split, "Split evaluated after each epoch")->capture_default_str();
  cmd->add_flag("--no-val", no_val, "Skip evaluation after each epoch");
  cmd->add_option("--threads", threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--quiet,-q", quiet, "No progress output");
  cmd->add_flag("--json", json, "Print a JSON summary of the run on stdout");
}

void TrainingRun::add_training_options(CLI::App* cmd, const std::string& group, CLI::Option* needs,
                                       const std::set<std::string>& skip) {
  auto& o = trainer;
  auto add = [&](CLI::Option* opt) {
    opt->group(group);
    if (needs) opt->needs(needs);
  };
  auto option = [&](const std::string& name, auto& value, const std::string& help, bool show_default = false) {
    if (skip.count(name.substr(0, name.find(',')))) return;
    CLI::Option* opt = cmd->add_option(name, value, help);
    if (show_default) opt->capture_default_str();
    add(opt);
  };
  option("--epochs", o.epochs_, "Passes over the training set", true);
  option("--batch-size,-b", o.batch_size_, "Samples per step", true);
  option("--lr", o.lr_, "Peak learning rate", true);
  option("--optimizer", o.optimizer_, "adam, adamw or sgd", true);
  option("--momentum", o.momentum_, "SGD momentum", true);
  add(cmd->add_flag("--nesterov", o.nesterov_, "Nesterov momentum (SGD)"));
  option("--weight-decay", o.weight_decay_, "Weight decay (not applied to biases and norms)", true);
  option("--schedule", o.schedule_, "Learning-rate schedule: constant, step or cosine", true);
  option("--step-epochs", o.step_epochs_, "step schedule: epochs between decays");
  option("--gamma", o.gamma_, "step schedule: decay factor");
  option("--warmup-steps", o.warmup_steps_, "Linear learning-rate warmup steps");
  option("--clip-grad-norm", o.clip_grad_norm_, "Clip the gradient norm (0: off)");
  option("--accumulate", o.accumulate_, "Batches per optimizer step");
  option("--seed", o.seed_, "Seed for weights, data order and dropout", true);
  if (!skip.count("--device")) add(add_device_option(cmd, device, "training"));
  option("--precision", precision,
         "fp32, or bf16 / fp16: teacher and student forward under autocast, weights and optimizer state in fp32 "
         "(fp16 scales the loss; CUDA only)",
         true);
  option("--backend", backend,
         "Under pare launch or torchrun: the c10d backend, auto (NCCL on CUDA when built with it, else Gloo), "
         "gloo or nccl",
         true);
  option("--timeout", timeout,
         "Under pare launch or torchrun: seconds a rank waits for the others, to join or inside a collective, "
         "before it fails naming the wait (a dead or hung rank then ends the job)",
         true);
  option("--max-steps", o.max_steps_, "Stop after this many optimizer steps (0: no limit)");
  option("--patience", o.patience_, "Stop after this many epochs without a better validation accuracy");
  option("--keep-best", o.best_path_, "Write the best epoch's model (by validation accuracy) here");
  option("--metrics", o.metrics_path_, "Write per-epoch metrics as JSON lines to this file");
  option("--checkpoint", o.checkpoint_, "Checkpoint file, written at each epoch end (atomically)");
  option("--checkpoint-every", o.checkpoint_every_, "Also checkpoint every N steps");
  add(cmd->add_flag("--resume", o.resume_, "Continue from --checkpoint if it exists (bit-exact on the CPU)"));
  option("--augment", augment,
         "Random views of each training image: flip, shift=PIXELS or both (flip,shift=2); a teacher sees the "
         "same view");
}

core::TensorDataset TrainingRun::text_windows(const lm::Tokenizer& tok, const std::string& split, int64_t seq_len,
                                              bool talk) const {
  return cli::text_windows(data, tok, split, seq_len, talk);
}

core::TensorDataset text_windows(const std::string& data, const lm::Tokenizer& tok, const std::string& split,
                                 int64_t seq_len, bool talk) {
  bool hit = false;
  const std::vector<int64_t> ids = lm::cached_tokens(tok, data, split, lm::cache_dir(), &hit);
  if (talk)
    std::fprintf(stderr, "%s (%s): %zu tokens%s\n", lm::short_text_spec(data).c_str(), split.c_str(), ids.size(),
                 hit ? " (from the token cache)" : ", tokenized and cached");
  return lm::token_windows(ids, seq_len, data + " (" + split + ")");
}

int64_t lm_eval_batch_size(int64_t batch, int64_t seq_len, int64_t vocab) {
  const int64_t fits = (int64_t{256} << 20) / 4 / std::max<int64_t>(1, seq_len * vocab);
  return std::max<int64_t>(1, std::min(batch, fits));
}

}  // namespace pare::cli
