// pare distill --teacher T [--teacher T2 --teacher-weights 0.7,0.3] --student S --data D [loss and
// training options] --out student.onnx
// pare distill --teacher hf:DIR|gguf:FILE --student llama:...|hf:DIR|from-teacher:layers=0,2 --data text:FILE
//              [--loss fkl|rkl|jsd:B|skl:A|topk:K -T 1 --alpha 0.5 --chunk-tokens auto] --out DIR
//              (a language model: token-level KD, a Hugging Face folder out)
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/data.h"
#include "core/error.h"
#include "core/onnx_io.h"
#include "dist/shard.h"
#include "distill/distiller.h"
#include "distill/student.h"
#include "distill/teacher_cache.h"
#include "lm/hf_export.h"
#include "lm/model.h"
#include "lm/spec.h"
#include "lm/text.h"
#include "train/trainer.h"

namespace pare::cli {

namespace {
// "teacher_value:student_value[:weight]"
distill::ValuePair parse_pair(const std::string& s, const char* option) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  PARE_CHECK((parts.size() == 2 || parts.size() == 3) && !parts[0].empty() && !parts[1].empty(),
             option, " expects TEACHER_VALUE:STUDENT_VALUE[:WEIGHT], got '", s, "'");
  distill::ValuePair v{parts[0], parts[1], 1.0};
  if (parts.size() == 3) {
    try {
      v.weight = std::stod(parts[2]);
    } catch (const std::exception&) {
      PARE_CHECK(false, option, " ", s, ": the weight '", parts[2], "' is not a number");
    }
  }
  return v;
}

struct DistillOpts {
  std::vector<std::string> teachers, hints, attentions;
  std::vector<double> teacher_weights;
  std::string student, out;
  TeacherSharding sharding;
  TrainingRun run;
  distill::DistillLossOptions loss;
  // Language models
  std::string divergence = "fkl", tokenizer, sequence_kd;
  int64_t chunk_tokens = distill::LmDistillOptions::kAutoChunk, seq_len = 0, max_new_tokens = 0;
  double gen_temperature = 1.0, on_policy = 0;
  bool temperature_given = false, alpha_given = false;
};

// The student of a language-model teacher: its layers (from-teacher:), a new model of a spec, or a
// checkpoint; trained in fp32, with the teacher's tokenizer unless it has its own.
lm::LmModel lm_student(const DistillOpts& o, const lm::LmModel& teacher, uint64_t seed) {
  lm::BuildOptions fp32;
  fp32.dtype = at::kFloat;
  const std::string& spec = o.student;
  const std::string tname = "teacher " + o.teachers[0];
  const auto given = o.tokenizer.empty() ? nullptr
                                         : std::make_shared<const lm::Tokenizer>(lm::Tokenizer::from_file(o.tokenizer));
  lm::LmModel m;
  if (distill::is_derived_spec(spec)) {
    PARE_CHECK(teacher.graph.nodes.size() > 0, "--student ", spec, " takes the teacher's layers, and ", tname,
               " holds its outputs, not its weights: prune the teacher first (pare prune) and give the student as "
               "hf:DIR");
    m = lm::keep_layers(teacher, distill::derived_layers(spec), tname, fp32);
  } else if (lm::is_new_lm_spec(spec)) {
    PARE_CHECK(given || teacher.tok, "--student ", spec, " is a new language model and ", tname,
               " has no tokenizer: give --tokenizer tokenizer.json");
    m = given ? lm::new_model(spec, given, o.tokenizer, seed)
              : lm::new_model(spec, teacher.tok, teacher.tokenizer, seed, teacher.config.vocab);
  } else {
    PARE_CHECK(lm::is_lm_spec(spec), "--student ", spec, ": a language-model teacher needs a language-model student "
               "(llama:..., hf:DIR, gguf:FILE or from-teacher:layers=...)");
    m = lm::load_lm(spec, fp32);
    if (given) m.tok = given, m.tokenizer = o.tokenizer;
  }
  if (!m.tok) m.tok = teacher.tok, m.tokenizer = teacher.tokenizer;
  PARE_CHECK(m.tok != nullptr, "neither the student ", spec, " nor ", tname, " has a tokenizer: give --tokenizer");
  if (teacher.tok && !lm::same_vocabulary(*teacher.tok, *m.tok))
    throw InputError(pare::detail::concat(
        "the student ", spec, " and ", tname, " have different tokenizers (", m.tok->vocab_size(), " and ",
        teacher.tok->vocab_size(), " tokens, not the same token for every id): token-level distillation compares "
        "their distributions over one vocabulary"));
  PARE_CHECK(m.config.vocab == teacher.config.vocab, "the student ", spec, " has a vocabulary of ", m.config.vocab,
             " and ", tname, " of ", teacher.config.vocab, ": token-level distillation needs the same");
  return m;
}

// Token-level distillation of a language model on text: windows of --seq-len tokens, --loss over
// the vocabulary (chunked), a Hugging Face folder out.
// The teacher of a language model: loaded, or (cache:DIR) its cache, with a model that has the
// cache's tokenizer and vocabulary and no graph.
lm::LmModel lm_teacher(const std::string& spec, std::shared_ptr<const engine::LmTeacherCacheFile>& cache) {
  if (spec.rfind("cache:", 0) != 0) return lm::load_lm(spec);
  cache = std::make_shared<const engine::LmTeacherCacheFile>(engine::LmTeacherCacheFile::read(spec.substr(6)));
  lm::LmModel t;
  t.config.vocab = cache->vocab;
  t.config.max_positions = cache->seq;
  t.tokenizer = cache->tokenizer;
  t.tok = std::make_shared<const lm::Tokenizer>(lm::Tokenizer::from_file(cache->tokenizer));
  return t;
}

void report_lm(const DistillOpts& o, const distill::LmDistillOptions& lopts,
               const std::vector<train::EpochStats>& history, double teacher_loss) {
  const TrainingRun& run = o.run;
  const auto& last = history.back();
  nlohmann::json j = {{"student", o.student}, {"teacher", o.teachers[0]}, {"out", o.out},
                      {"loss", lopts.divergence.str()}, {"temperature", lopts.temperature}, {"alpha", lopts.alpha},
                      {"epochs", history.size()}, {"train_loss", last.train_loss},
                      {"tokens_per_s", last.samples_per_s}};
  if (last.val_loss >= 0) j["student_perplexity"] = std::exp(last.val_loss);
  if (teacher_loss >= 0) j["teacher_perplexity"] = std::exp(teacher_loss);
  if (run.json) {
    std::cout << j.dump() << "\n";
  } else if (!run.quiet) {
    if (last.val_loss >= 0)
      std::fprintf(stderr, "%s perplexity: teacher %s, student %.2f\n", run.val_split.c_str(),
                   teacher_loss >= 0 ? std::to_string(std::exp(teacher_loss)).c_str()
                   : lopts.sharded  ? "- (sharded)"
                                    : "- (cached)",
                   std::exp(last.val_loss));
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
}

// --teacher-parallel for a language-model teacher: null for none (or auto's none), else the teacher
// sharded over the job's ranks, a tensor-parallel one keeping its logits split by vocabulary.
std::shared_ptr<dist::ShardedModel> shard_lm_teacher(const DistillOpts& o, const lm::LmModel& teacher,
                                                     const train::TrainerOptions& topts, bool talk) {
  if (o.sharding.mode == "none") return nullptr;
  PARE_CHECK_OPTION(teacher.graph.nodes.size() > 0, "teacher_parallel", o.sharding.mode, " shards a teacher that "
                    "runs; ", o.teachers[0], " is a cache of its outputs");
  std::string why;
  const auto mode = o.sharding.resolve(teacher.graph, &why);
  if (talk && o.sharding.mode == "auto")
    std::fprintf(stderr, "--teacher-parallel auto: %s, because %s\n", dist::teacher_parallel_name(mode), why.c_str());
  if (mode == dist::TeacherParallel::kNone) return nullptr;
  PARE_CHECK_OPTION(topts.process_group_ != nullptr, "teacher_parallel", o.sharding.mode, " needs more than one "
                    "process: start the job with pare launch --nproc-per-node N -- pare ...");
  auto sharded = std::make_shared<dist::ShardedModel>(teacher.graph, mode, topts.process_group_->new_group("teacher"),
                                                      o.sharding.stage_limit(), mode == dist::TeacherParallel::kTensor);
  if (talk) std::fprintf(stderr, "%s", sharded->report().to_text().c_str());
  return sharded;
}

// Token-level distillation of a language model on text: windows of --seq-len tokens, --loss over
// the vocabulary (chunked), a Hugging Face folder out.
void distill_lm(DistillOpts& o) {
  const TrainingRun& run = o.run;
  PARE_CHECK(o.teachers.size() == 1, "a language model distills from one teacher; got ", o.teachers.size());
  PARE_CHECK(o.hints.empty() && o.attentions.empty() && o.loss.mse_weight_ == 0 && o.loss.cosine_weight_ == 0,
             "--hint, --attention, --mse and --cosine apply to classifiers; a language model takes --loss");
  PARE_CHECK(run.normalize.empty() && run.augment.empty(), "--normalize and --augment apply to images, not to text");
  PARE_CHECK(lm::is_text_spec(run.data), "--data ", run.data, ": a language model distills on text:FILE or jsonl:FILE");
  train::TrainerOptions topts = run.start();
  distill::LmDistillOptions lopts;
  lm::LmModel teacher = lm_teacher(o.teachers[0], lopts.cache);
  lopts.divergence = distill::TokenDivergence::parse(o.divergence);
  lopts.temperature = o.temperature_given ? o.loss.temperature_ : lopts.cache ? lopts.cache->temperature : 1.0;
  lopts.alpha = o.alpha_given ? o.loss.alpha_ : 0.5;
  lopts.chunk_tokens = o.chunk_tokens;
  const bool talk = !run.quiet && topts.is_writer();
  lm::LmModel m = lm_student(o, teacher, topts.seed_);
  const int64_t ctx = std::min(m.config.max_positions, teacher.config.max_positions);
  const int64_t seq = o.seq_len > 0 ? o.seq_len : lopts.cache ? lopts.cache->seq : std::min<int64_t>(256, ctx);
  PARE_CHECK(seq <= ctx, "--seq-len ", seq, " is longer than the context of the student or the teacher (", ctx, ")");
  core::TensorDataset train = run.text_windows(*m.tok, "train", seq, talk);
  core::TensorDataset val;
  if (!run.no_val) val = run.text_windows(*m.tok, run.val_split, seq, talk);
  lm::SamplingOptions sampling;  // of --sequence-kd's teacher and --on-policy's student
  sampling.temperature = o.gen_temperature;
  sampling.seed = topts.seed_;
  if (m.config.eos >= 0) sampling.stop = {m.config.eos};
  PARE_CHECK_OPTION(o.max_new_tokens >= 0 && o.max_new_tokens < seq, "max_new_tokens", "must leave a prompt of at "
                    "least one of the window's ", seq, " tokens, got ", o.max_new_tokens);
  const int64_t prompt = seq - (o.max_new_tokens > 0 ? o.max_new_tokens : seq / 2);
  if (!o.sequence_kd.empty())  // the teacher's continuations of the windows, not the text's
    train = sequence_kd_windows(o.sequence_kd, o.teachers[0], teacher, run.data, train, sampling, prompt,
                                topts.process_group_.get(), talk);
  if (o.on_policy > 0) {
    lopts.on_policy = o.on_policy;
    const int rank = topts.process_group_ ? topts.process_group_->rank() : 0;
    sampling.seed = topts.seed_ * 1000003ULL + static_cast<uint64_t>(rank) * 7919ULL;  // each rank its draws
    lopts.student_windows = lm::student_windows(m, prompt, sampling);
  }
  topts.eval_batch_size_ = lm_eval_batch_size(topts.batch_size_, seq, m.config.vocab);
  lopts.sharded = shard_lm_teacher(o, teacher, topts, talk);
  core::Module student(m.graph);
  std::unique_ptr<core::Module> tmod;
  if (lopts.sharded)
    teacher.graph = core::Graph{};  // each rank keeps its shard, not the whole teacher
  else if (!lopts.cache)
    tmod = std::make_unique<core::Module>(teacher.graph, core::Module::Use::kFrozen);
  if (lopts.chunk_tokens != 0 || lopts.sharded) {
    const auto [sh, sw] = lm::head_of(m.graph, "the student " + o.student);
    lopts.student_head = {sh, sw};
    if (!lopts.cache && !lopts.sharded) {
      const auto [th, tw] = lm::head_of(teacher.graph, "teacher " + o.teachers[0]);
      lopts.teacher_head = {th, tw};
    }
  }
  const std::string logits =
      lopts.sharded ? (lopts.sharded->report().mode == "tp" ? "over the teacher's vocabulary blocks" : "whole logits")
      : lopts.chunk_tokens != 0 ? "vocabulary in chunks of " + std::to_string(lopts.chunk_for(m.config.vocab)) + " tokens"
                                : "whole logits";
  if (talk)
    std::fprintf(stderr, "distilling %s (%lld parameters) from %s (%s) on %lld windows of %lld tokens: --loss %s "
                 "T=%g alpha=%g, %s\n", o.student.c_str(), (long long)student.parameter_count(), o.teachers[0].c_str(),
                 lopts.cache ? (std::to_string(lopts.cache->entries) + " tokens a row").c_str()
                             : (std::to_string(teacher.config.parameter_count()) + " parameters").c_str(),
                 (long long)train.size(), (long long)seq, lopts.divergence.str().c_str(), lopts.temperature,
                 lopts.alpha, logits.c_str());
  const auto history = distill::distill_lm(student, tmod.get(), lopts, topts, train, run.no_val ? nullptr : &val);
  double teacher_loss = -1;
  if (!run.no_val && topts.is_writer() && !lopts.cache && !lopts.sharded)
    teacher_loss = train::evaluate([&](const at::Tensor& x) { return tmod->forward({x})[0]; }, val,
                                   topts.eval_batch_size_, "teacher " + o.teachers[0]).loss;
  if (!topts.is_writer()) return;  // rank 0 writes the model and reports
  m.graph = student.to_graph();
  lm::save_hf(m, o.out, lm::HfExportOptions().metadata("pare.distilled_from", o.teachers[0]));
  report_lm(o, lopts, history, teacher_loss);
}

// Distillation of a classifier (or any model with labels): an ONNX student out.
void distill_classifier(DistillOpts& o) {
  const TrainingRun& run = o.run;
  PARE_CHECK(o.sequence_kd.empty() && o.on_policy == 0 && o.seq_len == 0 && o.max_new_tokens == 0 &&
                 o.tokenizer.empty(),
             "--sequence-kd, --on-policy, --seq-len, --max-new-tokens and --tokenizer apply to language models (an "
             "hf: or gguf: teacher on text: data)");
  train::TrainerOptions topts = run.start();
  distill::DistillLossOptions lopts = o.loss;
  lopts.seed(topts.seed_);
  for (auto& h : o.hints) {
    auto p = parse_pair(h, "--hint");
    lopts.hint(p.teacher_value, p.student_value, p.weight);
  }
  for (auto& a : o.attentions) {
    auto p = parse_pair(a, "--attention");
    lopts.attention(p.teacher_value, p.student_value, p.weight);
  }
  lopts.validate();
  auto teacher = o.sharding.load(o.teachers, o.teacher_weights, topts.seed_, topts.process_group_, run.quiet);
  const bool sharded = dynamic_cast<engine::ShardedEngine*>(teacher.get()) != nullptr;
  core::Graph g = [&] {
    if (!distill::is_derived_spec(o.student)) return core::load_model(o.student, topts.seed_);
    PARE_CHECK(o.teachers.size() == 1, "--student ", o.student, " derives the student from one teacher, but ",
               o.teachers.size(), " teachers were given");
    return distill::derive_student(core::load_model(o.teachers[0], topts.seed_), o.student, o.teachers[0]);
  }();
  core::TensorDataset train, val;
  const core::TensorDataset* val_ptr = run.load_data(train, val, g, topts);
  core::Module student(std::move(g));
  if (!run.quiet && topts.is_writer())
    std::fprintf(stderr, "distilling %s (%lld parameters) from %s on %s: T=%g alpha=%g\n",
                 o.student.c_str(), (long long)student.parameter_count(),
                 teacher->describe().c_str(), train.name.c_str(), lopts.temperature_, lopts.alpha_);
  auto history = distill::distill(student, *teacher, lopts, topts, train, val_ptr);
  core::Graph trained = student.to_graph();
  trained.metadata["pare.distilled_from"] = [&] {
    std::string s;
    for (auto& t : o.teachers) s += (s.empty() ? "" : ",") + t;
    return s;
  }();
  // The teacher's accuracy on the same split, for the side-by-side report (a cache holds only
  // the training rows). A sharded teacher's forward is collective: every rank takes part.
  double teacher_acc = -1;
  const bool cached = dynamic_cast<engine::CachedEngine*>(teacher.get()) != nullptr;
  if (!run.no_val && !cached && (topts.is_writer() || sharded))
    teacher_acc = train::evaluate([&](const at::Tensor& x) { return teacher->logits(x); }, val, 512,
                                  teacher->describe()).accuracy;
  if (!topts.is_writer()) return;  // rank 0 writes the model and reports
  core::save_onnx(trained, o.out);
  nlohmann::json j = {{"student", o.student}, {"out", o.out}, {"epochs", history.size()},
                      {"train_loss", history.back().train_loss}};
  if (!run.no_val) {
    j["student_accuracy"] = history.back().val_accuracy;
    std::string teacher_part = "teacher (cached) -";
    if (teacher_acc >= 0) {
      j["teacher_accuracy"] = teacher_acc;
      char buf[64];
      std::snprintf(buf, sizeof(buf), "teacher %.2f%%", teacher_acc * 100);
      teacher_part = buf;
    }
    if (!run.quiet)
      std::fprintf(stderr, "%s accuracy: %s, student %.2f%%\n", run.val_split.c_str(), teacher_part.c_str(),
                   history.back().val_accuracy * 100);
  }
  if (run.json) std::cout << j.dump() << "\n";
  else if (!run.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

}  // namespace

void add_distill(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("distill", "Distill a student from one or more teachers (classifiers, or language models "
                                            "token by token)");
  using Opts = DistillOpts;
  auto o = std::make_shared<Opts>();
  cmd->add_option("--teacher,-t", o->teachers, "Teacher: ONNX file, zoo spec, TorchScript (.pt) or cache:DIR (pare teacher-cache); a language model: hf:DIR or gguf:FILE; repeat for an ensemble (loading TorchScript runs the code in the file, as torch.load of a pickle does: only files you trust)")
      ->required();
  cmd->add_option("--teacher-weights", o->teacher_weights, "Ensemble weights, e.g. 0.7,0.3 (default: equal)")
      ->delimiter(',');
  o->sharding.add_options(cmd);
  cmd->add_option("--student,-s", o->student, "Student: zoo spec, ONNX file, or from-teacher:layers=0,2,4 (the teacher's "
                  "layers 0, 2 and 4, with its weights); of a language model also llama:..., qwen2:..., gpt2:... (a new "
                  "model, the teacher's tokenizer and vocabulary), hf:DIR or gguf:FILE")->required();
  cmd->add_option("--out,-o", o->out, "Where to write the student (.onnx; a language model: a Hugging Face folder)")
      ->required();
  auto g = "Distillation";
  cmd->add_option("--temperature,-T", o->loss.temperature_, "Softmax temperature of the KD term (default 4; 1 for a "
                  "language model)")->group(g)->each([o](const std::string&) { o->temperature_given = true; });
  cmd->add_option("--alpha", o->loss.alpha_, "Weight of the KD term (times T*T); labels' cross entropy gets 1 - alpha "
                  "(default 0.9; 0.5 for a language model)")->group(g)->each([o](const std::string&) { o->alpha_given = true; });
  cmd->add_option("--mse", o->loss.mse_weight_, "Weight of an MSE term on the logits")->group(g);
  cmd->add_option("--cosine", o->loss.cosine_weight_, "Weight of a cosine term on the logits")->group(g);
  cmd->add_option("--hint", o->hints, "Feature hint TEACHER_VALUE:STUDENT_VALUE[:WEIGHT] (repeatable)")->group(g);
  cmd->add_option("--attention", o->attentions, "Attention transfer TEACHER_VALUE:STUDENT_VALUE[:WEIGHT]")->group(g);
  auto lmg = "Language models";
  cmd->add_option("--loss", o->divergence, "Token-level divergence: fkl (forward KL), rkl (reverse KL), jsd:BETA "
                  "(generalized JSD, TRL's GKD), skl:ALPHA (skew KL), topk:K (the teacher's K likeliest tokens and a "
                  "tail bucket)")->capture_default_str()->group(lmg);
  cmd->add_option("--chunk-tokens", o->chunk_tokens, "Tokens whose [tokens, vocabulary] logits exist at once (the LM "
                  "heads applied chunk by chunk); auto: 2^22 logits, 16 MB (32 tokens at a vocabulary of 128,256, 512 at 8,192); 0: the "
                  "whole batch's")
      ->transform(CLI::Validator(
          [](std::string& v) {
            if (v == "auto") v = std::to_string(distill::LmDistillOptions::kAutoChunk);
            else if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
              return std::string("expected auto or a number of tokens >= 0, got '") + v + "'";
            return std::string();
          },
          ""))
      ->type_name("auto|N")->default_str("auto")->group(lmg);
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json of a new student (default: the teacher's; another "
                  "vocabulary is refused)")->group(lmg);
  cmd->add_option("--seq-len", o->seq_len, "Tokens per training window (default 256, at most the context)")->group(lmg);
  cmd->add_option("--sequence-kd", o->sequence_kd, "Sequence-level KD: train on the teacher's own continuations of "
                  "each window's first tokens (generated once into this folder, reused by later runs that ask the "
                  "same; only the continuations count; --alpha 0 is Kim and Rush's, without token-level KD)")
      ->group(lmg);
  cmd->add_option("--on-policy", o->on_policy, "On-policy KD (GKD): in this share of the batches (0 to 1) the student "
                  "continues each window's first tokens itself and the teacher scores its tokens; only those count")
      ->check(CLI::Range(0.0, 1.0))->group(lmg);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "With --sequence-kd or --on-policy: tokens the teacher or the "
                  "student writes after each prompt (default half the window)")->group(lmg);
  cmd->add_option("--gen-temperature", o->gen_temperature, "With --sequence-kd or --on-policy: the sampling "
                  "temperature of the generating model (0: greedy)")->capture_default_str()->group(lmg);
  o->run.add_options(cmd);
  cmd->get_option("--data")->description("fashion-mnist[:DIR] or npy:X.npy,Y.npy; for a language model text:FILE[,FILE...] "
                                         "or jsonl:FILE[:FIELD] (every 10th document is --val-split test)");
  cmd->callback([&action, o] {
    action = [o] {
      if (lm::is_lm_spec(o->teachers.at(0)) || lm::is_text_spec(o->run.data)) return distill_lm(*o);
      distill_classifier(*o);
    };
  });
}

}  // namespace pare::cli
