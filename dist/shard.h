// A teacher too large for one process, sharded over the ranks of a process group.
//
//   auto pg = dist::ProcessGroup::connect(world)->new_group("teacher");   // its own traffic
//   dist::ShardedModel teacher(core::load_model("big.onnx"), dist::TeacherParallel::kTensor, pg);
//   at::Tensor logits = teacher.forward(x);           // every rank, its own batch, same call order
//   std::cerr << teacher.report().to_text();          // who holds what
//
// Tensor parallel (shard_tensor_parallel): a pass over core::Graph that follows how each value is
// laid out over the ranks (whole on every rank, split along one axis, or a partial sum). A
// Conv/Gemm/MatMul whose input is whole is split by output channels ("column", Megatron), one whose
// input is split along its reduction axis by input channels ("row", giving partial sums); ops that
// act per channel (activations, BatchNorm, pooling, broadcasting arithmetic, softmax and norms over
// another axis, Transpose, Reshape and Flatten that keep the split contiguous) keep a split, so
// attention splits by heads. Anything else gets its inputs made whole first: an AllReduce for a
// partial sum, an AllGather for a split (com.microsoft ops, run through the RunContext). The
// embedding of the graph's input ids is split by rows (each rank looks up its block, the partial
// sums are added), a tied head's transposed table sharing that block; norms and position
// embeddings stay whole on every rank. The ranks run the shard on the rows of all ranks' batches
// together and each keeps its own rows.
//
// Pipeline (pipeline_stage): the topologically sorted graph is cut into one stage per rank,
// balanced by FLOPs and weight bytes, preferring cuts where few activation bytes cross. Every
// rank's batch is one micro-batch; they flow forward through the stages by point-to-point sends,
// and the last stage sends each micro-batch's output back to the rank that owns it.
//
// Every rank computes the same plan from the same graph, so the collectives line up. Each rank
// keeps only its shard's weights (the whole file is read once at load).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "dist/world.h"

namespace pare::dist {

/// --teacher-parallel: none, tp, pp or auto.
enum class TeacherParallel { kNone, kTensor, kPipeline, kAuto };
/// Throws InputError naming `option` (the caller's name for the setting) for anything but
/// none|tp|pp|auto.
TeacherParallel parse_teacher_parallel(const std::string& s, const std::string& option);
const char* teacher_parallel_name(TeacherParallel p);

/// How a graph was split over its ranks.
struct ShardReport {
  std::string mode;                       ///< "tp" or "pp"
  int ranks = 1;
  int64_t params = 0, bytes = 0;          ///< the whole graph's floating parameters / weight bytes
  std::vector<int64_t> rank_params, rank_bytes, rank_flops;  ///< per rank (FLOPs per sample)
  int64_t flops = 0;                      ///< the whole graph, per sample
  int collectives = 0;                    ///< tp: AllReduce/AllGather nodes each rank runs
  std::vector<int64_t> boundary_bytes;    ///< pp: activation bytes per sample sent from stage k to k+1
  std::vector<std::string> replicated;    ///< tp: weighted nodes run whole on every rank, and why

  /// A few lines for the terminal.
  std::string to_text() const;
};

/// One rank's part of a graph, with the report for all ranks.
struct Shard {
  core::Graph graph;
  ShardReport report;
  std::vector<int64_t> output_sizes;  ///< the whole graph's first output at batch 1
  /// With split_output: the block of the first output's last axis this rank's output holds
  /// [split_begin, split_begin + split_len); split_len -1: the output is whole.
  int64_t split_begin = 0, split_len = -1;
};

/// The tensor-parallel shard that `rank` of `ranks` runs: the graph with this rank's slices of the
/// weights and AllReduce/AllGather nodes where values must be made whole; its outputs are whole,
/// except, with `split_output`, a first output split along its last axis (a language model's
/// logits by vocabulary), which stays this rank's block (Shard::split_begin/split_len).
/// Throws InputError for a malformed graph or a graph without exactly one input.
Shard shard_tensor_parallel(const core::Graph& g, int rank, int ranks, bool split_output = false);

/// Pipeline stage `rank` of `ranks`: the nodes of that stage with the weights they read; its
/// inputs are the values that cross into it (the graph input for stage 0), its outputs those that
/// cross out (the graph outputs for the last stage), in the order the neighbour stages agree on.
/// With `max_stage_bytes` > 0 no stage holds more weight bytes than that (balance comes second).
/// Throws InputError when the graph has fewer nodes than ranks, or no cut meets the limit.
Shard pipeline_stage(const core::Graph& g, int rank, int ranks, int64_t max_stage_bytes = 0);

class ProcessGroup;

/// A graph run sharded over `pg`'s ranks (see the top of this file). forward() is collective:
/// every rank calls it with its own batch (sizes may differ), the same number of times.
class ShardedModel {
 public:
  /// `mode` is kTensor or kPipeline (`max_stage_bytes`: see pipeline_stage; `split_output`: see
  /// shard_tensor_parallel, tensor parallel only). Throws InputError for another mode, a graph
  /// without exactly one input, or stages that cannot meet the limit.
  ShardedModel(const core::Graph& g, TeacherParallel mode, std::shared_ptr<ProcessGroup> pg,
               int64_t max_stage_bytes = 0, bool split_output = false);
  ~ShardedModel();

  /// The first graph output for the rows of `x` (CPU tensors), computed without grad. Throws
  /// InternalError when the output was left split (split()).
  at::Tensor forward(const at::Tensor& x);

  /// Tensor parallel with split_output: the output for every rank's rows (rank order), as this
  /// rank's block of its last axis.
  struct Split {
    at::Tensor y;               ///< [all ranks' rows, ..., block]
    std::vector<int64_t> rows;  ///< rows per rank
    int64_t begin = 0;          ///< the block's first index on the last axis
  };
  /// Collective as forward(), without grad. When the pass could not keep the output split
  /// (split_len -1), `y` is whole and `begin` 0.
  Split forward_split(const at::Tensor& x);
  /// The group the model's collectives run on.
  ProcessGroup& group() const;
  const ShardReport& report() const;
  /// This rank's graph (its shard or stage).
  const core::Graph& shard() const;
  /// The sizes of the first output at batch 1.
  const std::vector<int64_t>& output_sizes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What --teacher-parallel auto picked, and why (one line for the log).
struct ParallelChoice {
  TeacherParallel mode = TeacherParallel::kNone;
  std::string why;
};

/// Picks for `auto`: no sharding in one process or when twice the teacher's weights fit in
/// `memory_per_process` bytes; otherwise tensor parallel when every rank is on one node and the
/// tensor-parallel shard holds at most 1.25/N of the weights (its all-reduces stay on the node),
/// else pipeline (only activations cross between stages, fit for slower links).
ParallelChoice choose_teacher_parallel(const core::Graph& g, const World& world, int64_t memory_per_process);

}  // namespace pare::dist
