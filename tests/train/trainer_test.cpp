#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "core/zoo.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::two_blobs;

TEST(Trainer, LearnsSeparableData) {
  auto train = two_blobs(512, 1), test = two_blobs(256, 2);
  core::Module m(core::build_zoo_model("mlp:784-16-2", 0));
  double before = train::evaluate(m, test).accuracy;
  train::Trainer t(m, train::TrainerOptions().epochs(2).batch_size(32).lr(1e-3).seed(1).progress(false));
  auto history = t.fit(train, &test);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_LT(history[1].train_loss, history[0].train_loss);
  EXPECT_GT(history[1].val_accuracy, 0.9);
  EXPECT_GT(history[1].val_accuracy, before);
}

TEST(Trainer, SameSeedSameWeights) {
  auto train = two_blobs(128, 1);
  auto run = [&](uint64_t seed) {
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    train::Trainer(m, train::TrainerOptions().epochs(1).batch_size(16).seed(seed).progress(false))
        .fit(train, nullptr);
    return m.parameters()[0].detach().clone();
  };
  const at::Tensor a = run(7);
  EXPECT_TRUE(at::equal(a, run(7)));
  // Training moved the weights, and another seed (another data order) moves them elsewhere: a
  // trainer that did nothing would pass the line above.
  const at::Tensor init = core::Module(core::build_zoo_model("mlp:784-8-2", 5)).parameters()[0].detach();
  EXPECT_FALSE(at::equal(a, init));
  EXPECT_FALSE(at::equal(a, run(8)));
}

TEST(Trainer, NonFiniteLossStopsTheRunNamingTheStep) {
  auto train = two_blobs(64, 1);
  train.x[3].fill_(std::numeric_limits<float>::infinity());
  core::Module m(core::build_zoo_model("mlp:784-8-2", 0));
  train::Trainer t(m, train::TrainerOptions().epochs(1).batch_size(64).progress(false));
  try {
    t.fit(train, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("epoch 1"), std::string::npos) << e.what();
  }
}

TEST(Trainer, StepCallbacksSeeEveryStepAndMaxStepsStops) {
  auto train = two_blobs(100, 1);
  core::Module m(core::build_zoo_model("mlp:784-8-2", 0));
  train::Trainer t(m, train::TrainerOptions().epochs(3).batch_size(10).max_steps(13).progress(false));
  std::vector<int64_t> steps;
  t.on_step([&](int64_t s, double) { steps.push_back(s); });
  t.fit(train, nullptr);
  ASSERT_EQ(steps.size(), 13u);
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 13);
}

TEST(TrainerOptions, RejectsOutOfRangeValues) {
  EXPECT_THROW(train::TrainerOptions().epochs(0).validate(), InputError);
  EXPECT_THROW(train::TrainerOptions().lr(-1).validate(), InputError);
  EXPECT_THROW(train::TrainerOptions().optimizer("lbfgs").validate(), InputError);
}

// Checkpoints carry a CRC-32 of their bytes: libtorch reads its archives without checking theirs,
// so a flipped byte in a weight would otherwise resume silently with that weight.
TEST(Trainer, ADamagedCheckpointIsRefusedAndNothingOfItIsLoaded) {
  pare::testing::TempDir dir;
  const std::string ckpt = dir.file("run.ckpt");
  auto train = two_blobs(128, 1);
  auto opts = [&](int64_t epochs) {
    return train::TrainerOptions().epochs(epochs).batch_size(16).seed(2).progress(false).checkpoint(ckpt).resume(true);
  };
  {
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    train::Trainer(m, opts(1)).fit(train, nullptr);
  }
  const std::string good = read_file(ckpt);
  auto try_resume = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    write_file_atomic(ckpt, bytes);
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    const at::Tensor before = m.parameters()[0].detach().clone();
    pare::testing::expect_input_error([&] { train::Trainer(m, opts(2)).fit(train, nullptr); }, parts);
    EXPECT_TRUE(at::equal(m.parameters()[0], before)) << "a refused checkpoint changed the model";
    EXPECT_EQ(read_file(ckpt), bytes) << "the refused checkpoint was replaced";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // inside the payload: a weight, or the archive's structure
  try_resume(flipped, {"run.ckpt", "checksum does not match", "nothing was loaded"});
  try_resume(good.substr(0, good.size() - 100), {"run.ckpt", "truncated"});
  try_resume(good.substr(0, 10), {"run.ckpt", "truncated (10 bytes)"});
  try_resume(good.substr(24), {"run.ckpt", "does not start with a pare checkpoint header"});
  // Checkpoints of older pares, libtorch archives (format 1, or bare before checksums), whose reader
  // in libtorch crashes on damaged ones, are refused, not read.
  std::string format1 = good;
  format1[8] = 1;
  try_resume(format1, {"run.ckpt", "format 1", "no longer reads", "delete the file to start afresh"});
  // The bare libtorch archive that crashed libtorch 1.13's reader (SEGV), found by checkpoint_fuzz.
  try_resume(read_file(std::string(PARE_SOURCE_DIR) + "/tests/fuzz/regressions/checkpoint/format1_libtorch_archive_segv"),
             {"run.ckpt", "without a header", "no longer reads"});
  // The good one resumes.
  write_file_atomic(ckpt, good);
  core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
  EXPECT_EQ(train::Trainer(m, opts(2)).fit(train, nullptr).size(), 2u);
}

// What a checkpoint holds is checked against the run before anything of it is used (the cases
// tests/fuzz's checkpoint_fuzz found): each is refused with exit code 2, the model unchanged.
TEST(Trainer, ACheckpointWhoseContentsDoNotFitIsRefused) {
  pare::testing::TempDir dir;
  const std::string ckpt = dir.file("run.ckpt");
  auto train = two_blobs(64, 1);
  auto opts = [&](int64_t epochs) {
    return train::TrainerOptions().epochs(epochs).batch_size(16).seed(2).progress(false).checkpoint(ckpt).resume(true);
  };
  {
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    train::Trainer(m, opts(1)).fit(train, nullptr);
  }
  std::map<std::string, std::string> meta;
  const std::string file = read_file(ckpt);
  const auto good = core::parse_safetensors(std::string_view(file).substr(24), ckpt, &meta);
  auto resume_with = [&](const std::map<std::string, at::Tensor>& tensors, const std::string& state,
                         const std::vector<std::string>& parts) {
    std::ostringstream payload;
    core::write_safetensors(payload, tensors, {{"state", state}});
    write_file_atomic(ckpt, train::checkpoint_header(payload.str()) + payload.str());
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    const at::Tensor before = m.parameters()[0].detach().clone();
    pare::testing::expect_input_error([&] { train::Trainer(m, opts(2)).fit(train, nullptr); }, parts);
    EXPECT_TRUE(at::equal(m.parameters()[0], before)) << "a refused checkpoint changed the model";
  };
  const std::string state = meta.at("state");
  auto with = [&](const std::string& key, const at::Tensor& t) {
    auto tensors = good;
    tensors[key] = t;
    return tensors;
  };
  const std::string w = good.lower_bound("model/")->first;  // a weight of the model
  resume_with(with("optimizer/0/exp_avg", at::zeros({1})), state, {"run.ckpt", "optimizer state 'optimizer/0/exp_avg'"});
  resume_with(with("optimizer/0/exp_avg_sq", at::full(good.at("optimizer/0/exp_avg_sq").sizes(), NAN)), state,
              {"run.ckpt", "not finite"});
  resume_with(with(w, at::full(good.at(w).sizes(), INFINITY)), state, {"run.ckpt", "NaN or Inf"});
  resume_with(with("rng", at::zeros({3}, at::kByte)), state, {"run.ckpt", "cannot resume"});
  auto j = nlohmann::json::parse(state);
  j["step"] = -1000000000000;
  resume_with(good, j.dump(), {"run.ckpt", "its position", "step -1000000000000"});
  j = nlohmann::json::parse(state);
  j["step"] = 5.1e58;  // a float where an integer belongs: refused, never converted
  resume_with(good, j.dump(), {"run.ckpt", "'step' must be an integer"});
  j = nlohmann::json::parse(state);
  j["optimizer"] = "sgd";
  resume_with(good, j.dump(), {"run.ckpt", "optimizer sgd", "resume with the same options"});
  j = nlohmann::json::parse(state);
  j["optimizer_steps"][0] = -5;  // no state for it is fine; a step count that is not an integer is not
  j["optimizer_steps"][1] = "x";
  resume_with(good, j.dump(), {"run.ckpt", "cannot resume"});
}
