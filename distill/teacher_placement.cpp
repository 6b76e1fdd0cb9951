// Where teachers run (distill/teacher_placement.h).
#include "distill/teacher_placement.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "dist/world.h"

namespace pare::distill {

namespace {

// Runs `parse`, marking an InputError it throws as being about `option` (so the command line
// names its flag).
template <typename F>
auto about(const char* option, F parse) {
  try {
    return parse();
  } catch (const InputError& e) {
    throw InputError(e.what()).about(option);
  }
}

}  // namespace

std::unique_ptr<Teacher> TeacherPlacement::load(const std::vector<std::string>& specs,
                                                const std::vector<double>& weights, uint64_t seed,
                                                const std::shared_ptr<dist::ProcessGroup>& pg, bool quiet) const {
  auto chosen = about("teacher_parallel", [&] { return dist::parse_teacher_parallel(mode, "teacher_parallel"); });
  const auto eng = about("teacher_engine", [&] { return engine::parse_kind(engine, "teacher_engine"); });
  if (chosen == dist::TeacherParallel::kNone) return load_teachers(specs, weights, seed, eng);
  if (eng != engine::Kind::kTorch)
    throw InputError(pare::detail::concat("teacher_parallel ", mode, " shards the teacher in the libtorch interpreter; "
                                          "it does not combine with teacher_engine rt"))
        .about("teacher_parallel")
        .about("teacher_engine");
  PARE_CHECK_OPTION(specs.size() == 1, "teacher_parallel", mode, " shards one teacher, got ", specs.size());
  normalize_teacher_weights(weights, 1);  // checked as for a whole teacher
  const std::string& spec = specs[0];
  core::Graph g = engine::load_graph(spec, seed);
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
    if (chosen == dist::TeacherParallel::kNone) return std::make_unique<engine::TorchEngine>(std::move(g), spec);
  }
  PARE_CHECK_OPTION(pg != nullptr, "teacher_parallel", mode, " needs more than one process: "
                    "start the job with pare launch --nproc-per-node N -- pare ...");
  // With --teacher-memory a pipeline stage's weights take at most half of it (the rest is for
  // activations), as auto assumes.
  const int64_t stage_limit = memory_mb > 0 ? static_cast<int64_t>(memory_mb * 1e6 / 2) : 0;
  auto teacher = std::make_unique<engine::ShardedEngine>(g, spec, chosen, pg->new_group("teacher"), stage_limit);
  if (talk) std::fprintf(stderr, "%s", teacher->report().to_text().c_str());
  return teacher;
}

}  // namespace pare::distill
