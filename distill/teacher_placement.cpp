// Where teachers run (distill/teacher_placement.h).
#include "distill/teacher_placement.h"

#include <unistd.h>

#include <algorithm>

#include "core/error.h"
#include "dist/world.h"

namespace pare::distill {

dist::TeacherParallel TeacherPlacement::resolve(const core::Graph& g, std::string* why) const {
  const auto chosen = dist::parse_teacher_parallel(mode, "teacher_parallel");
  if (chosen != dist::TeacherParallel::kAuto) return chosen;
  const dist::World world = dist::World::from_env();
  const int64_t memory = memory_mb > 0 ? static_cast<int64_t>(memory_mb * 1e6)
                                       : static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) /
                                             std::max(1, world.local_world_size);
  auto choice = dist::choose_teacher_parallel(g, world, memory);
  if (why) *why = choice.why;
  return choice.mode;
}

PlacedTeacher TeacherPlacement::place(const std::vector<std::string>& specs, const std::vector<double>& weights,
                                      uint64_t seed, const std::shared_ptr<dist::ProcessGroup>& pg) const {
  auto chosen = dist::parse_teacher_parallel(mode, "teacher_parallel");
  const auto eng = engine::parse_kind(engine, "teacher_engine");
  PlacedTeacher placed;
  if (chosen == dist::TeacherParallel::kNone) {
    placed.teacher = load_teachers(specs, weights, seed, eng);
    return placed;
  }
  if (eng != engine::Kind::kTorch)
    throw InputError(pare::detail::concat("teacher_parallel ", mode, " shards the teacher in the libtorch interpreter; "
                                          "it does not combine with teacher_engine rt"))
        .about("teacher_parallel")
        .about("teacher_engine");
  PARE_CHECK_OPTION(specs.size() == 1, "teacher_parallel", mode, " shards one teacher, got ", specs.size());
  normalize_teacher_weights(weights, 1);  // checked as for a whole teacher
  const std::string& spec = specs[0];
  core::Graph g = engine::load_graph(spec, seed);
  if (chosen == dist::TeacherParallel::kAuto) {
    std::string why;
    chosen = resolve(g, &why);
    placed.auto_choice = std::string(dist::teacher_parallel_name(chosen)) + ", because " + why;
    if (chosen == dist::TeacherParallel::kNone) {
      placed.teacher = std::make_unique<engine::TorchEngine>(std::move(g), spec);
      return placed;
    }
  }
  PARE_CHECK_OPTION(pg != nullptr, "teacher_parallel", mode, " needs more than one process: "
                    "start the job with pare launch --nproc-per-node N -- pare ...");
  auto teacher = std::make_unique<engine::ShardedEngine>(g, spec, chosen, pg->new_group("teacher"), stage_limit());
  placed.shard_report = teacher->report().to_text();
  placed.teacher = std::move(teacher);
  return placed;
}

}  // namespace pare::distill
