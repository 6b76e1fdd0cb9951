// The pare command line: one file per subcommand, each adding itself to the app. The commands
// only fill the options structs of the library and print; the work happens below cli/.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cli/schema.h"
#include "core/data.h"
#include "core/graph.h"
#include "distill/teacher_placement.h"
#include "lm/generate.h"
#include "lm/tokenizer.h"
#include "train/run.h"
#include "train/trainer.h"

namespace pare::cli {

/// A subcommand's action; throws pare::Error (exit code from the error) on failure.
using Action = std::function<void()>;

void add_inspect(CLI::App& app, Action& action);
void add_run(CLI::App& app, Action& action);
void add_train(CLI::App& app, Action& action);
void add_eval(CLI::App& app, Action& action);
void add_distill(CLI::App& app, Action& action);
void add_launch(CLI::App& app, Action& action);
void add_teacher_cache(CLI::App& app, Action& action);
void add_prune(CLI::App& app, Action& action);
void add_quantize(CLI::App& app, Action& action);
void add_bench(CLI::App& app, Action& action);
void add_export(CLI::App& app, Action& action);
void add_pipeline(CLI::App& app, Action& action);
void add_report(CLI::App& app, Action& action);
void add_federate(CLI::App& app, Action& action);
void add_generate(CLI::App& app, Action& action);
void add_tokenize(CLI::App& app, Action& action);

/// Adds every subcommand above to `app` (main, and the pipeline to check a recipe's stages).
void add_commands(CLI::App& app, Action& action);

/// "a,b" and repeated flags both give lists: every comma-separated piece of every value.
std::vector<std::string> split_commas(const std::vector<std::string>& in);

/// Adds --device to `cmd` (cpu, cuda, cuda:N or auto; `what` says what runs there).
CLI::Option* add_device_option(CLI::App* cmd, std::string& device, const std::string& what);
/// The device --device names for this process: cuda and auto take GPU LOCAL_RANK under a launcher.
/// Throws InputError (exit 2) when CUDA is asked for and this libtorch or machine has none.
at::Device resolve_device(const std::string& spec);
/// Throws InputError when --engine rt (pare_rt, CPU only) is given a --device other than cpu/auto.
void check_engine_device(const std::string& engine, const std::string& device);

/// What train and distill share: the run's set-up (train::RunSetup: data, validation, trainer
/// options, device, ranks) and its flags, plus output control.
struct TrainingRun : train::RunSetup {
  bool json = false;

  /// Adds --data (required unless `data_optional`: a command that can work without data checks
  /// what needs it), the trainer's options (epochs, lr, schedule, checkpoints, ...), --normalize,
  /// --val-split, --no-val, --threads, --quiet and --json to `cmd` (but the flags named in `skip`).
  void add_options(CLI::App* cmd, bool data_optional = false, const std::set<std::string>& skip = {});
  /// Adds the trainer's options (epochs, lr, schedule, checkpoints, device, precision, backend, ...)
  /// and --augment alone, in help group `group`, each needing `needs` when given; flags named in
  /// `skip` are left to the command (which declares them for a purpose of its own).
  void add_training_options(CLI::App* cmd, const std::string& group, CLI::Option* needs = nullptr,
                            const std::set<std::string>& skip = {});
  /// text_windows of --data.
  core::TensorDataset text_windows(const lm::Tokenizer& tok, const std::string& split, int64_t seq_len,
                                   bool talk) const;
};

/// A language model's windows of `seq_len` tokens of `data`'s `split` (lm::cached_tokens, then
/// lm::token_windows), saying on stderr when `talk` how many tokens and whether the cache answered:
/// what pare train, pare distill and pare teacher-cache train or cache on.
core::TensorDataset text_windows(const std::string& data, const lm::Tokenizer& tok, const std::string& split,
                                 int64_t seq_len, bool talk);

/// Sequence-level KD's training windows (pare distill --sequence-kd DIR, cli/sequence_kd.cpp): the
/// windows of `train` cut to `prompt` tokens and continued by the teacher (`model`, loaded from the
/// hf:/gguf: spec `teacher`, rebuilt with a KV cache) with `sampling`, S tokens in all
/// (lm::continue_windows), generated into `dir` once (each rank of `pg` its slice, written whole
/// through dist::StagedDir) and read back, checked, by a later run that asks for the same teacher,
/// data, windows, prompt and sampling. Throws InputError when `dir` holds another set, a malformed
/// one, or the teacher is a cache.
core::TensorDataset sequence_kd_windows(const std::string& dir, const std::string& teacher, const lm::LmModel& model,
                                        const std::string& data, const core::TensorDataset& train,
                                        const lm::SamplingOptions& sampling, int64_t prompt, dist::ProcessGroup* pg,
                                        bool talk);

/// Windows per validation batch of a language model, whose logits [windows, seq_len, vocab] are all
/// formed at once: the training batch, fewer when their logits would pass 256 MB (at least one).
int64_t lm_eval_batch_size(int64_t batch, int64_t seq_len, int64_t vocab);

/// How teachers are run (distill::TeacherPlacement) and its flags: --teacher-engine (libtorch or
/// pare_rt), and --teacher-parallel / --teacher-memory for a teacher sharded over the ranks.
struct TeacherSharding : distill::TeacherPlacement {
  void add_options(CLI::App* cmd);
  /// place(), printing auto's choice and the shard report on rank 0 unless `quiet`.
  std::unique_ptr<distill::Teacher> load(const std::vector<std::string>& specs, const std::vector<double>& weights,
                                         uint64_t seed, const std::shared_ptr<dist::ProcessGroup>& pg,
                                         bool quiet) const;
};

}  // namespace pare::cli
