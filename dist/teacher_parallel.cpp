// The --teacher-parallel modes: their names, and the policy behind `auto`.
#include <algorithm>

#include "core/error.h"
#include "dist/shard.h"
#include "dist/shard_internal.h"

namespace pare::dist {

using core::Graph;
using detail::mb;

TeacherParallel parse_teacher_parallel(const std::string& s, const std::string& option) {
  if (s == "none") return TeacherParallel::kNone;
  if (s == "tp") return TeacherParallel::kTensor;
  if (s == "pp") return TeacherParallel::kPipeline;
  if (s == "auto") return TeacherParallel::kAuto;
  throw InputError(option + " must be none, tp, pp or auto, got '" + s + "'").about(option);
}

const char* teacher_parallel_name(TeacherParallel p) {
  switch (p) {
    case TeacherParallel::kNone: return "none";
    case TeacherParallel::kTensor: return "tp";
    case TeacherParallel::kPipeline: return "pp";
    case TeacherParallel::kAuto: return "auto";
  }
  return "?";
}

ParallelChoice choose_teacher_parallel(const Graph& g, const World& world, int64_t memory_per_process) {
  const int64_t bytes = g.initializer_bytes();
  if (!world.distributed()) return {TeacherParallel::kNone, "one process: nothing to shard over"};
  if (2 * bytes <= memory_per_process)
    return {TeacherParallel::kNone, "the teacher's weights (" + mb(bytes) + ") fit twice in each process's " +
                                        mb(memory_per_process) + ": a whole teacher per rank needs no teacher traffic"};
  const std::string too_big = "the teacher's weights (" + mb(bytes) + ") do not fit twice in " + mb(memory_per_process) + "; ";
  if (world.local_world_size == world.world_size) {
    Shard tp = detail::tensor_parallel(g, 0, world.world_size, /*copy=*/false);
    const int64_t most = *std::max_element(tp.report.rank_bytes.begin(), tp.report.rank_bytes.end());
    if (most * world.world_size <= bytes * 5 / 4)
      return {TeacherParallel::kTensor, too_big + "all " + std::to_string(world.world_size) +
                                            " ranks share a node, and tensor parallel holds " + mb(most) +
                                            " per rank"};
    return {TeacherParallel::kPipeline, too_big + "tensor parallel would still hold " + mb(most) +
                                            " on one rank, so the graph is cut into stages"};
  }
  return {TeacherParallel::kPipeline, too_big + "the ranks span " +
                                          std::to_string(world.world_size / std::max(1, world.local_world_size)) +
                                          " nodes, where pipeline stages send only activations"};
}

}  // namespace pare::dist
