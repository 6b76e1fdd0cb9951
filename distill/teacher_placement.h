// Where a job's teachers run: which engine executes them (libtorch or pare_rt), and whether one
// teacher is sharded over the ranks of the job (tensor or pipeline parallel, dist/shard.h), with
// `auto` choosing from the teacher's size, the memory and the world.
//
//   distill::TeacherPlacement where;
//   where.mode = "auto";
//   auto placed = where.place({"big.onnx"}, {}, /*seed=*/0, opts.process_group_);   // placed.teacher
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/shard.h"
#include "distill/teacher.h"

namespace pare::distill {

/// A teacher as placed, with what placing it decided (for the caller to report).
struct PlacedTeacher {
  std::unique_ptr<Teacher> teacher;
  std::string auto_choice;   ///< mode auto: "tp, because ...", else ""
  std::string shard_report;  ///< a sharded teacher's layout (dist::ShardReport::to_text), else ""
};

struct TeacherPlacement {
  std::string mode = "none";    ///< teacher_parallel: none, tp, pp or auto
  std::string engine = "torch"; ///< teacher_engine: torch or rt
  double memory_mb = 0;         ///< teacher_memory: memory per process for auto (0: RAM / local ranks)

  /// The mode for a teacher of graph `g` in this world: `mode`, with auto resolved from the
  /// teacher's size, the memory and the world (its reason in `why`). Throws InputError for an
  /// unknown mode.
  dist::TeacherParallel resolve(const core::Graph& g, std::string* why) const;
  /// teacher_memory's limit on a pipeline stage's weight bytes: half of it (the rest is for
  /// activations, as auto assumes); 0 without it.
  int64_t stage_limit() const { return memory_mb > 0 ? static_cast<int64_t>(memory_mb * 1e6 / 2) : 0; }

  /// The teacher of `specs` (an ensemble of several), sharded over `pg`'s ranks when the mode asks
  /// for it (collective then: every rank calls it). Throws InputError when the teachers cannot be
  /// sharded or `pg` is null (one process).
  PlacedTeacher place(const std::vector<std::string>& specs, const std::vector<double>& weights, uint64_t seed,
                      const std::shared_ptr<dist::ProcessGroup>& pg) const;
};

}  // namespace pare::distill
