// pare teacher-cache --teacher T --data D [--top-k K | --sample K] [-T 4] --out DIR
// pare teacher-cache --teacher hf:DIR|gguf:FILE --data text:FILE [--seq-len N] [--top-k 64 | --sample K] [-T 1]
//                   --out DIR
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/module.h"
#include "dist/world.h"
#include "distill/teacher_cache.h"
#include "lm/model.h"
#include "lm/text.h"
#include "lm/tokenizer.h"

namespace pare::cli {

namespace {

struct TeacherCacheOpts {
  std::vector<std::string> teachers;
  std::vector<double> weights;
  std::string data, normalize, out, device = "auto";
  distill::TeacherCacheOptions cache;
  TeacherSharding sharding;
  int threads = 0;
  bool quiet = false, json = false;
  uint64_t seed = 0;
  int64_t seq_len = 0;
  bool top_k_given = false, temperature_given = false, batch_given = false;
};

// A language model's cache: the teacher over the windows pare distill makes of the same text.
void cache_lm(TeacherCacheOpts& o, dist::ProcessGroup* pg, int rank) {
  PARE_CHECK(o.teachers.size() == 1 && o.weights.empty(), "a language model's cache holds one teacher; got ",
             o.teachers.size());
  PARE_CHECK(lm::is_lm_spec(o.teachers[0]) && lm::is_text_spec(o.data), "--teacher ", o.teachers[0], " --data ",
             o.data, ": a language model's cache needs a language model (hf:DIR, gguf:FILE) and text (text:FILE, "
             "jsonl:FILE)");
  PARE_CHECK(o.sharding.mode == "none" && o.sharding.engine == "torch" && o.normalize.empty(), "--teacher-parallel, "
             "--teacher-engine and --normalize do not apply to a language model's cache (yet: issue 39)");
  if (!o.top_k_given) o.cache.top_k = 64;
  if (!o.temperature_given) o.cache.temperature = 1.0;
  if (!o.batch_given) o.cache.batch_size = 4;
  const lm::LmModel teacher = lm::load_lm(o.teachers[0]);
  PARE_CHECK(teacher.tok != nullptr, "--teacher ", o.teachers[0], " has no tokenizer: its cache keeps the "
             "tokenizer its student must share");
  const int64_t seq = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(256, teacher.config.max_positions);
  PARE_CHECK(seq <= teacher.config.max_positions, "--seq-len ", seq, " is longer than the teacher's context (",
             teacher.config.max_positions, ")");
  const core::TensorDataset windows = text_windows(o.data, *teacher.tok, "train", seq, !o.quiet && rank == 0);
  core::Module tmod(teacher.graph, core::Module::Use::kFrozen);
  tmod.to(resolve_device(o.device));
  const auto r = distill::write_lm_teacher_cache(tmod, o.teachers[0], lm::tokenizer_json(teacher.tok->model()),
                                                 windows, o.data, o.cache, o.out, pg);
  if (rank != 0) return;
  if (o.json) {
    std::cout << nlohmann::json{{"out", o.out}, {"windows", r.samples}, {"tokens", r.samples * seq},
                                {"vocab", r.classes}, {"entries", r.entries}, {"bytes_per_token", r.bytes_per_sample},
                                {"seconds", r.seconds}}.dump()
              << "\n";
  } else if (!o.quiet) {
    std::fprintf(stderr, "wrote %s: %lld tokens x %lld %s of a vocabulary of %lld, %.1f bytes a token (fp32 logits: "
                 "%lld), %.0f s\n", o.out.c_str(), (long long)(r.samples * seq), (long long)r.entries,
                 o.cache.sample > 0 ? "draws" : "tokens", (long long)r.classes, r.bytes_per_sample,
                 (long long)(4 * r.classes), r.seconds);
  }
}

}  // namespace

void add_teacher_cache(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "teacher-cache", "Run a teacher once over the training set and keep its top-k (or sampled) outputs "
                       "for `pare distill --teacher cache:DIR`; of a language model, every token's next-token "
                       "distribution");
  auto o = std::make_shared<TeacherCacheOpts>();
  cmd->add_option("--teacher,-t", o->teachers, "Teacher: ONNX file, zoo spec or TorchScript (.pt), or a language "
                  "model (hf:DIR, gguf:FILE); repeat for an ensemble (loading TorchScript runs the code in the file, "
                  "as torch.load of a pickle does: only files you trust)")
      ->required();
  cmd->add_option("--teacher-weights", o->weights, "Ensemble weights (default: equal)")->delimiter(',');
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR], npy:X.npy,Y.npy or npy:X.npy (its train split is "
                  "cached; labels are not read); for a language model text:FILE[,FILE...] or jsonl:FILE[:FIELD] (its "
                  "train split, in the windows pare distill makes)")->required();
  o->sharding.add_options(cmd);
  cmd->add_option("--normalize", o->normalize, "MEAN,STD applied to inputs (distill with the same)");
  cmd->add_option("--out,-o", o->out, "Cache folder (index.json and per-rank shards)")->required();
  cmd->add_option("--top-k", o->cache.top_k, "Classes kept per sample, the tail mass too (default 10; 64 tokens for "
                  "a language model: 153 bytes a token at SmolLM2's vocabulary of 49,152, 281 at K=128; Rice-coded "
                  "token ids and 8-bit log-probabilities)")
      ->each([o](const std::string&) { o->top_k_given = true; });
  cmd->add_option("--sample", o->cache.sample,
                  "Instead of top-k: draw this many classes per sample from the teacher's distribution "
                  "(sparse logit sampling; unbiased; of a language model the distinct tokens and their counts: "
                  "37 bytes a token for 64 draws from SmolLM2)");
  cmd->add_option("--temperature,-T", o->cache.temperature, "Temperature of the cached distribution, distill with the "
                  "same (default 4; 1 for a language model)")
      ->each([o](const std::string&) { o->temperature_given = true; });
  cmd->add_option("--seq-len", o->seq_len, "Tokens per window of a language model's text (default 256, at most the "
                  "context; pare distill takes the cache's)");
  cmd->add_option("--batch-size,-b", o->cache.batch_size, "Teacher batch (default 512 samples; 4 windows of a "
                  "language model)")
      ->each([o](const std::string&) { o->batch_given = true; });
  cmd->add_option("--seed", o->seed, "Seed of the sampled draws and zoo teachers")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  add_device_option(cmd, o->device, "the teacher");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
  cmd->add_flag("--json", o->json, "Print a JSON summary on stdout");
  cmd->footer("Under pare launch or torchrun every rank caches its slice of the rows; rank 0 writes the index.");
  cmd->callback([&action, o] {
    action = [o] {
      train::set_threads(o->threads);
      o->cache.seed = o->seed;
      o->cache.progress = !o->quiet && ::isatty(2);
      const dist::World world = dist::World::from_env();
      std::shared_ptr<dist::ProcessGroup> pg;
      if (world.distributed()) pg = dist::ProcessGroup::connect(world);
      if (lm::is_lm_spec(o->teachers.at(0)) || lm::is_text_spec(o->data)) return cache_lm(*o, pg.get(), world.rank);
      auto teacher = o->sharding.load(o->teachers, o->weights, o->seed, pg, o->quiet);
      teacher->to(resolve_device(o->device));
      core::TensorDataset train = core::load_dataset(o->data, "train");
      if (!o->normalize.empty()) core::normalize(train, o->normalize);
      std::string name;
      for (auto& t : o->teachers) name += (name.empty() ? "" : ",") + t;
      auto r = distill::write_teacher_cache(*teacher, name, train, o->data, o->cache, o->out, pg.get());
      if (world.rank != 0) return;
      if (o->json) {
        std::cout << nlohmann::json{{"out", o->out}, {"samples", r.samples}, {"classes", r.classes},
                                    {"entries", r.entries}, {"bytes_per_sample", r.bytes_per_sample},
                                    {"seconds", r.seconds}}.dump()
                  << "\n";
      } else if (!o->quiet) {
        std::fprintf(stderr, "wrote %s: %lld samples x %lld entries of %lld classes, %.0f bytes per sample (dense fp32 logits: %lld)\n",
                     o->out.c_str(), (long long)r.samples, (long long)r.entries, (long long)r.classes,
                     r.bytes_per_sample, (long long)(4 * r.classes));
      }
    };
  });
}

}  // namespace pare::cli
