// Where a job's teachers run: which engine executes them (libtorch or pare_rt), and whether one
// teacher is sharded over the ranks of the job (tensor or pipeline parallel, dist/shard.h), with
// `auto` choosing from the teacher's size, the memory and the world.
//
//   distill::TeacherPlacement where;
//   where.mode = "auto";
//   auto teacher = where.load({"big.onnx"}, {}, /*seed=*/0, opts.process_group_, /*quiet=*/false);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/shard.h"
#include "distill/teacher.h"

namespace pare::distill {

struct TeacherPlacement {
  std::string mode = "none";    ///< teacher_parallel: none, tp, pp or auto
  std::string engine = "torch"; ///< teacher_engine: torch or rt
  double memory_mb = 0;         ///< teacher_memory: memory per process for auto (0: RAM / local ranks)

  /// The teacher of `specs` (an ensemble of several), sharded over `pg`'s ranks when the mode asks
  /// for it; auto's choice and the shard report go to stderr on rank 0 unless `quiet`. Throws
  /// InputError when the teachers cannot be sharded or `pg` is null (one process).
  std::unique_ptr<Teacher> load(const std::vector<std::string>& specs, const std::vector<double>& weights,
                                uint64_t seed, const std::shared_ptr<dist::ProcessGroup>& pg, bool quiet) const;
};

}  // namespace pare::distill
