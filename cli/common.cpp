// Helpers shared by the subcommands.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "dist/shard.h"
#include "dist/world.h"

namespace pare::cli {

void add_commands(CLI::App& app, Action& action) {
  add_inspect(app, action);
  add_run(app, action);
  add_train(app, action);
  add_distill(app, action);
  add_launch(app, action);
  add_teacher_cache(app, action);
  add_prune(app, action);
  add_eval(app, action);
  add_quantize(app, action);
  add_bench(app, action);
  add_export(app, action);
  add_pipeline(app, action);
  add_report(app, action);
#ifdef PARE_WITH_FEDERATED  // a build without gRPC has no federate command (CMakeLists.txt, PARE_FEDERATED)
  add_federate(app, action);
#endif
}

void set_threads(int threads) {
  PARE_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  if (threads > 0) at::set_num_threads(threads);
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
  auto chosen = dist::parse_teacher_parallel(mode, "--teacher-parallel");
  const auto eng = distill::parse_teacher_engine(engine, "--teacher-engine");
  if (chosen == dist::TeacherParallel::kNone) return distill::load_teachers(specs, weights, seed, eng);
  PARE_CHECK(eng == distill::TeacherEngine::kTorch, "--teacher-parallel ", mode, " shards the teacher in the libtorch "
             "interpreter; it does not combine with --teacher-engine rt");
  PARE_CHECK(specs.size() == 1, "--teacher-parallel ", mode, " shards one teacher, got ", specs.size());
  distill::normalize_teacher_weights(weights, 1);  // checked as for a whole teacher
  const std::string& spec = specs[0];
  core::Graph g = distill::load_teacher_graph(spec, seed);
  const dist::World world = dist::World::from_env();
  const bool talk = !quiet && world.rank == 0;
  if (chosen == dist::TeacherParallel::kAuto) {
    const int64_t memory = memory_mb > 0 ? static_cast<int64_t>(memory_mb * 1e6)
                                         : static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) /
                                               std::max(1, world.local_world_size);
    auto choice = dist::choose_teacher_parallel(g, world, memory);
    if (talk)
      std::fprintf(stderr, "--teacher-parallel auto: %s, because %s\n", dist::teacher_parallel_name(choice.mode),
                   choice.why.c_str());
    chosen = choice.mode;
    if (chosen == dist::TeacherParallel::kNone) return std::make_unique<distill::GraphTeacher>(std::move(g), spec);
  }
  PARE_CHECK(pg != nullptr, "--teacher-parallel ", mode, " needs more than one process: "
             "start the job with pare launch --nproc-per-node N -- pare ...");
  // With --teacher-memory a pipeline stage's weights take at most half of it (the rest is for
  // activations), as auto assumes.
  const int64_t stage_limit = memory_mb > 0 ? static_cast<int64_t>(memory_mb * 1e6 / 2) : 0;
  auto teacher = std::make_unique<distill::ShardedTeacher>(g, spec, chosen, pg->new_group("teacher"), stage_limit);
  if (talk) std::fprintf(stderr, "%s", teacher->report().to_text().c_str());
  return teacher;
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

distill::TrainerOptions TrainingRun::start() const {
  set_threads(threads);
  distill::TrainerOptions opts = trainer;
  opts.progress(!quiet);
  const dist::World world = dist::World::from_env();
  opts.device(core::parse_device(device, world.local_rank));
  opts.precision(core::parse_precision(precision));
  opts.validate();
  const dist::Backend be = dist::parse_backend(backend, opts.device_);
  PARE_CHECK_OPTION(timeout > 0, "timeout", "must be > 0 seconds, got ", timeout);
  // Under pare launch or torchrun (WORLD_SIZE > 1): data parallel over the ranks.
  if (world.distributed()) {
    opts.process_group(dist::ProcessGroup::connect(
        world, be, opts.device_, std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000))));
    if (!quiet && world.rank == 0)
      std::fprintf(stderr, "data parallel over %d ranks (%s, %s): global batch %lld, %lld per rank\n",
                   world.world_size, dist::backend_name(be), opts.device_.str().c_str(), (long long)opts.batch_size_,
                   (long long)(opts.batch_size_ / world.world_size));
  }
  if (!quiet && world.rank == 0 && (!opts.device_.is_cpu() || opts.precision_ != core::Precision::kFp32))
    std::fprintf(stderr, "device %s, precision %s\n", opts.device_.str().c_str(), core::precision_name(opts.precision_));
  return opts;
}

const core::TensorDataset* TrainingRun::load_data(core::TensorDataset& train, core::TensorDataset& val,
                                                  core::Graph& model, distill::TrainerOptions& opts) const {
  if (!augment.empty()) opts.augment(core::parse_augment(augment));
  train = core::load_dataset(data, "train");
  if (!no_val) val = core::load_dataset(data, val_split);
  PARE_CHECK(!opts.augment_.any() || (train.x.dim() == 4 && train.x.is_floating_point()), "--augment ",
             augment, ": the training set '", data, "' is not images [N, C, H, W] but ",
             train.x.scalar_type(), " ", train.x.sizes());
  if (!normalize.empty()) {
    core::normalize(train, normalize);
    if (!no_val) core::normalize(val, normalize);
    model.metadata["pare.normalize"] = normalize;
    if (opts.augment_.any()) {
      // Pixels shifted in are black (0) before normalization.
      core::TensorDataset black{at::zeros({1, train.x.size(1), 1, 1}), at::zeros({1}, at::kLong), "fill"};
      core::normalize(black, normalize);
      at::Tensor f = black.x.flatten().contiguous();
      opts.augment_.fill.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    }
  }
  return no_val ? nullptr : &val;
}

}  // namespace pare::cli
