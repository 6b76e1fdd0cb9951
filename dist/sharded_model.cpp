// ShardedModel: runs this rank's tensor-parallel shard or pipeline stage together with the other
// ranks of its process group.
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "core/error.h"
#include "core/module.h"
#include "dist/shard.h"
#include "dist/shard_internal.h"

namespace pare::dist {
namespace {

using core::Graph;
using core::Node;
using detail::recv_tensor;
using detail::send_tensor;

constexpr int kTagInput = 1, kTagBoundary = 2, kTagOutput = 3;

}  // namespace

struct ShardedModel::Impl {
  TeacherParallel mode;
  std::shared_ptr<ProcessGroup> pg;
  Shard shard;
  std::unique_ptr<core::Module> module;
  std::vector<std::string> stage_inputs;

  // All ranks run the shard on every rank's rows (rank order); batches may differ in size.
  ShardedModel::Split run_all_rows(const at::Tensor& x) {
    const int ranks = pg->size();
    auto sizes = pg->all_gather(at::tensor({x.size(0)}, at::kLong));
    ShardedModel::Split out;
    int64_t total = 0;
    for (int r = 0; r < ranks; ++r) {
      out.rows.push_back(sizes[r].item<int64_t>());
      total += out.rows.back();
    }
    out.y = module->forward({pg->all_gather_rows(x, out.rows)})[0];
    PARE_CHECK(out.y.dim() >= 1 && out.y.size(0) == total, "the sharded model's output has ", out.y.sizes(),
               " rows for ", total, " inputs");
    out.begin = shard.split_len < 0 ? 0 : shard.split_begin;
    return out;
  }

  at::Tensor forward_tp(const at::Tensor& x) {
    PARE_ASSERT(shard.split_len < 0, "ShardedModel::forward on a model whose output is left split: forward_split");
    ShardedModel::Split all = run_all_rows(x);
    int64_t offset = 0;
    for (int r = 0; r < pg->rank(); ++r) offset += all.rows[r];
    return all.y.narrow(0, offset, x.size(0)).clone();
  }

  at::Tensor forward_pp(const at::Tensor& x) {
    const int ranks = pg->size(), me = pg->rank(), last = ranks - 1;
    // Every rank learns every micro-batch's size, so that all of them skip the empty ones.
    auto sizes = pg->all_gather(at::tensor({x.size(0)}, at::kLong));
    auto rows = [&](int m) { return sizes[m].item<int64_t>(); };
    std::vector<at::Tensor> keep;
    if (me != 0 && rows(me) > 0) send_tensor(*pg, x, 0, kTagInput, keep);
    at::Tensor mine;
    for (int m = 0; m < ranks; ++m) {  // micro-batch m is rank m's batch
      if (rows(m) == 0) continue;
      std::vector<at::Tensor> in;
      if (me == 0) {
        in.push_back(m == 0 ? x : recv_tensor(*pg, m, kTagInput));
      } else {
        for (size_t i = 0; i < stage_inputs.size(); ++i) in.push_back(recv_tensor(*pg, me - 1, kTagBoundary));
      }
      auto out = module->forward(in);
      if (me != last) {
        for (auto& t : out) send_tensor(*pg, t, me + 1, kTagBoundary, keep);
      } else if (m == me) {
        mine = out[0];
      } else {
        send_tensor(*pg, out[0], m, kTagOutput, keep);
      }
    }
    if (rows(me) == 0) {
      std::vector<int64_t> empty = shard.output_sizes;
      empty[0] = 0;
      mine = at::empty(empty);
    } else if (me != last) {
      mine = recv_tensor(*pg, last, kTagOutput);
    }
    pg->wait();
    return mine;
  }
};

ShardedModel::ShardedModel(const Graph& g, TeacherParallel mode, std::shared_ptr<ProcessGroup> pg,
                           int64_t max_stage_bytes, bool split_output)
    : impl_(std::make_unique<Impl>()) {
  PARE_CHECK(mode == TeacherParallel::kTensor || mode == TeacherParallel::kPipeline,
             "a sharded model runs tensor or pipeline parallel, not '", teacher_parallel_name(mode), "'");
  PARE_ASSERT(pg != nullptr, "a sharded model needs a process group");
  impl_->mode = mode;
  impl_->pg = pg;
  PARE_ASSERT(!split_output || mode == TeacherParallel::kTensor, "only a tensor-parallel output is left split");
  impl_->shard = mode == TeacherParallel::kTensor ? shard_tensor_parallel(g, pg->rank(), pg->size(), split_output)
                                                  : pipeline_stage(g, pg->rank(), pg->size(), max_stage_bytes);
  for (auto& in : impl_->shard.graph.inputs) impl_->stage_inputs.push_back(in.name);
  PARE_CHECK(!impl_->shard.output_sizes.empty(), "model '", g.name, "': its first output has no batch dimension");
  impl_->module = std::make_unique<core::Module>(impl_->shard.graph, core::Module::Use::kFrozen);
  impl_->module->eval();
  // As engine::TorchEngine: libtorch's CPU convolutions are much faster channels-last.
  impl_->module->set_memory_format(at::MemoryFormat::ChannelsLast);
  ProcessGroup* group = pg.get();
  impl_->module->set_collective([group](const Node& n, const at::Tensor& t) -> at::Tensor {
    if (n.op_type == "AllReduce") {
      at::Tensor r = t.contiguous().clone();
      group->all_reduce(r);
      return r;
    }
    auto parts = group->all_gather(t.contiguous());
    return at::cat(parts, n.attr_int("axis", 0));
  });
}

ShardedModel::~ShardedModel() = default;

at::Tensor ShardedModel::forward(const at::Tensor& x) {
  at::NoGradGuard no_grad;
  return impl_->mode == TeacherParallel::kTensor ? impl_->forward_tp(x) : impl_->forward_pp(x);
}

ShardedModel::Split ShardedModel::forward_split(const at::Tensor& x) {
  PARE_ASSERT(impl_->mode == TeacherParallel::kTensor, "forward_split runs a tensor-parallel model");
  at::NoGradGuard no_grad;
  return impl_->run_all_rows(x);
}

ProcessGroup& ShardedModel::group() const { return *impl_->pg; }

const ShardReport& ShardedModel::report() const { return impl_->shard.report; }
const Graph& ShardedModel::shard() const { return impl_->shard.graph; }
const std::vector<int64_t>& ShardedModel::output_sizes() const { return impl_->shard.output_sizes; }

}  // namespace pare::dist
