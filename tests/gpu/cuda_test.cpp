// The CUDA side of the device plumbing: run by scripts/device-check on a GPU machine (ctest -L gpu);
// every test skips on a libtorch without CUDA or a machine without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/data.h"
#include "core/device.h"
#include "core/torch_compat.h"
#include "core/zoo.h"
#include "dist/world.h"
#include "distill/teacher.h"
#include "train/trainer.h"
#include "tests/dist_util.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::two_blobs;
using pare::testing::relative_error;

namespace {
#define REQUIRE_GPU() \
  if (!compat::cuda_available()) GTEST_SKIP() << "no CUDA in this libtorch or no GPU"

struct Result {
  std::vector<train::EpochStats> history;
  at::Tensor weights;
};

Result run_training(const std::string& device, core::Precision p, int64_t epochs, const std::string& ckpt = "",
             bool resume = false) {
  auto data = two_blobs(512, 1);
  core::Module m(core::build_zoo_model("mlp:784-16-2", 0));
  auto opts = train::TrainerOptions().epochs(epochs).batch_size(32).seed(1).precision(p).progress(false)
                  .device(core::parse_device(device));
  if (!ckpt.empty()) opts.checkpoint(ckpt).resume(resume);
  Result r;
  r.history = train::Trainer(m, opts).fit(data, nullptr);
  r.weights = m.parameters()[0].detach().cpu().clone();
  return r;
}
}  // namespace

// cuBLAS sums in another order than OpenBLAS: the losses agree to float32 rounding compounded over
// 16 Adam steps, not bit for bit.
TEST(CudaTrainer, MatchesTheCpuRunWithinTolerance) {
  REQUIRE_GPU();
  Result cpu = run_training("cpu", core::Precision::kFp32, 1), gpu = run_training("cuda", core::Precision::kFp32, 1);
  EXPECT_NEAR(gpu.history[0].train_loss, cpu.history[0].train_loss, 1e-3 * std::abs(cpu.history[0].train_loss));
  EXPECT_LT(relative_error(gpu.weights, cpu.weights), 1e-3);
}

TEST(CudaTrainer, ACheckpointWrittenOnTheGpuResumesOnTheCpu) {
  REQUIRE_GPU();
  pare::testing::TempDir dir;
  const std::string ckpt = dir.file("run.ckpt");
  run_training("cuda", core::Precision::kFp32, 1, ckpt);
  Result resumed = run_training("cpu", core::Precision::kFp32, 2, ckpt, /*resume=*/true);
  Result whole = run_training("cuda", core::Precision::kFp32, 2);
  ASSERT_EQ(resumed.history.size(), 2u);
  EXPECT_LT(relative_error(resumed.weights, whole.weights), 1e-3);
  // and back: a CPU checkpoint resumes on the GPU
  const std::string ckpt2 = dir.file("cpu.ckpt");
  run_training("cpu", core::Precision::kFp32, 1, ckpt2);
  EXPECT_EQ(run_training("cuda", core::Precision::kFp32, 2, ckpt2, true).history.size(), 2u);
}

// The GPU's generator is checkpointed too: a cnn with Dropout, interrupted after one epoch and resumed
// on the GPU, ends bit for bit where the uninterrupted run does (deterministic cuDNN, so that only
// the random state could make them differ).
TEST(CudaTrainer, AResumedRunWithDropoutIsBitExact) {
  REQUIRE_GPU();
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  pare::testing::TempDir dir;
  auto run = [&](int64_t epochs, const std::string& ckpt, bool resume) {
    core::Module m(core::build_zoo_model("cnn,classes=2,width=8,fc=16", 0));
    auto opts = train::TrainerOptions().epochs(epochs).batch_size(32).seed(1).progress(false)
                    .device(core::parse_device("cuda"));
    if (!ckpt.empty()) opts.checkpoint(ckpt).resume(resume);
    train::Trainer(m, opts).fit(two_blobs(256, 1), nullptr);
    return m.parameters()[0].detach().cpu().clone();
  };
  const at::Tensor whole = run(2, "", false);
  run(1, dir.file("run.ckpt"), false);
  EXPECT_TRUE(at::equal(run(2, dir.file("run.ckpt"), true), whole));
}

TEST(CudaTrainer, Bf16AndFp16Train) {
  REQUIRE_GPU();
  for (auto p : {core::Precision::kBf16, core::Precision::kFp16}) {
    Result r = run_training("cuda", p, 2);
    EXPECT_LT(r.history[1].train_loss, r.history[0].train_loss) << core::precision_name(p);
    EXPECT_GT(r.history[1].train_accuracy, 0.9) << core::precision_name(p);
  }
}

TEST(CudaTeacher, Bf16LogitsAgreeWithFp32) {
  REQUIRE_GPU();
  engine::TorchEngine teacher(core::build_zoo_model("cnn", 3), "cnn");
  teacher.to(core::parse_device("cuda"));
  at::Tensor x = at::rand({256, 1, 28, 28});
  at::Tensor fp32 = teacher.logits(x);
  EXPECT_TRUE(fp32.device().is_cpu()) << "results come back on the batch's device";
  at::Tensor bf16;
  {
    core::AutocastScope amp(core::parse_device("cuda"), core::Precision::kBf16);
    bf16 = teacher.logits(x);
  }
  const double err = relative_error(bf16, fp32);
  EXPECT_GT(err, 0);
  EXPECT_LT(err, 2e-2);
}

TEST(CudaLoader, BatchesArePinnedAndCopiedToTheDevice) {
  REQUIRE_GPU();
  auto data = two_blobs(64, 1);
  core::DataLoader loader(data, core::LoaderOptions().batch_size(16).pin_memory(true));
  core::Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_TRUE(b.x.is_pinned());
  core::Batch d = core::to_device(b, core::parse_device("cuda"));
  EXPECT_TRUE(d.x.is_cuda());
  EXPECT_TRUE(d.y.is_cuda());
  EXPECT_TRUE(d.rows.device().is_cpu());
  EXPECT_TRUE(at::equal(d.x.cpu(), b.x));
}

// The data-parallel bucket path with CUDA gradients across two ranks (Gloo on CUDA tensors: NCCL
// cannot run two ranks on one GPU). It failed at the first step when the sample count was a CPU
// tensor (GradientSync.PacksTheBucketsOnTheGradientsDevice covers that on the CPU).
TEST(CudaGradientSync, TwoGlooRanksOnOneGpuAverageWeightedBySamples) {
  REQUIRE_GPU();
  pare::testing::expect_gradient_sync_averages(core::parse_device("cuda"), dist::Backend::kGloo);
}

// One rank on the one GPU: the NCCL (and Gloo) groups are built and reduce CUDA tensors. Several
// ranks need several GPUs for NCCL (scripts/device-check runs 2 Gloo ranks on one).
TEST(CudaProcessGroup, OneRankGroupsReduceCudaTensors) {
  REQUIRE_GPU();
  const at::Device gpu = core::parse_device("cuda");
  std::vector<dist::Backend> backends = {dist::Backend::kGloo};
  if (dist::nccl_built()) backends.push_back(dist::Backend::kNccl);
  int port = 29700 + static_cast<int>(::getpid() % 200);
  for (auto be : backends) {
    dist::World w;
    w.master_port = port++;
    auto pg = dist::ProcessGroup::connect(w, be, gpu, std::chrono::seconds(30));
    EXPECT_EQ(pg->backend(), be);
    at::Tensor t = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(gpu));
    pg->all_reduce(t, dist::Reduce::kAvg);
    EXPECT_TRUE(at::equal(t.cpu(), at::arange(6, at::kFloat))) << dist::backend_name(be);
    pg->broadcast(t, 0);
    EXPECT_EQ(pg->all_gather(t).size(), 1u);
  }
  EXPECT_EQ(dist::parse_backend("auto", gpu), dist::nccl_built() ? dist::Backend::kNccl : dist::Backend::kGloo);
}
