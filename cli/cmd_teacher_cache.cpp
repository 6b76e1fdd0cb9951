// pare teacher-cache --teacher T --data D [--top-k K | --sample K] [-T 4] --out DIR
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/world.h"
#include "distill/teacher_cache.h"
#include "lm/model.h"
#include "lm/text.h"

namespace pare::cli {

void add_teacher_cache(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "teacher-cache", "Run a teacher once over the training set and keep its top-k (or sampled) outputs "
                       "for `pare distill --teacher cache:DIR`");
  struct Opts {
    std::vector<std::string> teachers;
    std::vector<double> weights;
    std::string data, normalize, out, device = "auto";
    distill::TeacherCacheOptions cache;
    TeacherSharding sharding;
    int threads = 0;
    bool quiet = false, json = false;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--teacher,-t", o->teachers, "Teacher: ONNX file, zoo spec or TorchScript (.pt); repeat for an ensemble (loading TorchScript runs the code in the file, as torch.load of a pickle does: only files you trust)")
      ->required();
  cmd->add_option("--teacher-weights", o->weights, "Ensemble weights (default: equal)")->delimiter(',');
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR], npy:X.npy,Y.npy or npy:X.npy (its train split is cached; labels are not read)")->required();
  o->sharding.add_options(cmd);
  cmd->add_option("--normalize", o->normalize, "MEAN,STD applied to inputs (distill with the same)");
  cmd->add_option("--out,-o", o->out, "Cache folder (index.json and per-rank shards)")->required();
  cmd->add_option("--top-k", o->cache.top_k, "Classes kept per sample (the tail mass is kept too)")->capture_default_str();
  cmd->add_option("--sample", o->cache.sample,
                  "Instead of top-k: draw this many classes per sample from the teacher's distribution "
                  "(sparse logit sampling; unbiased)");
  cmd->add_option("--temperature,-T", o->cache.temperature, "Temperature of the cached distribution (distill with the same)")
      ->capture_default_str();
  cmd->add_option("--batch-size,-b", o->cache.batch_size, "Teacher batch")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the sampled draws and zoo teachers")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  add_device_option(cmd, o->device, "the teacher");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
  cmd->add_flag("--json", o->json, "Print a JSON summary on stdout");
  cmd->footer("Under pare launch or torchrun every rank caches its slice of the rows; rank 0 writes the index.");
  cmd->callback([&action, o] {
    action = [o] {
      for (const std::string& t : o->teachers)
        PARE_CHECK(!lm::is_lm_spec(t) && !lm::is_text_spec(o->data), "pare teacher-cache does not take language models "
                   "yet (", lm::is_lm_spec(t) ? t : o->data, "); distill them with the teacher online: pare distill "
                   "--teacher ", t, " --data TEXT");
      train::set_threads(o->threads);
      o->cache.seed = o->seed;
      o->cache.progress = !o->quiet && ::isatty(2);
      const dist::World world = dist::World::from_env();
      std::shared_ptr<dist::ProcessGroup> pg;
      if (world.distributed()) pg = dist::ProcessGroup::connect(world);
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
