// The federated library as a C++ user calls it: the round state's checkpoint read back, the rules'
// preconditions, and a whole simulation (server and client processes of the pare binary).
#include <gtest/gtest.h>

#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "federated/round_state.h"
#include "federated/rules.h"
#include "federated/simulate.h"
#include "tests/test_util.h"

namespace fed = pare::federated;

TEST(FederatedRoundState, ResumesTheModelsVelocityAndRoundLogOfItsCheckpoint) {
  pare::testing::TempDir dir;
  fed::RoundState s({pare::core::load_model("mlp:784-8-2", 1), pare::core::load_model("mlp:784-4-2", 2)});
  s.checkpoint(dir.path());  // round 0: the initial models
  const at::Tensor a = at::full({s.layouts[0].size}, 0.5f);
  s.step(0, a, 1.0, 0.9);
  fed::RoundStats r;
  r.round = 1;
  r.sampled = r.answered = r.selected = {"a", "b"};
  r.refused = {{"c", "too late"}};
  r.model_accuracy = {0.25, 0.5};
  s.history.push_back(r);
  s.checkpoint(dir.path());
  EXPECT_TRUE(pare::file_exists(dir.file("round-1-0.velocity.npy")));
  EXPECT_FALSE(pare::file_exists(dir.file("round-0-0.onnx")));  // the previous round's files are gone

  fed::RoundState back({pare::core::load_model("mlp:784-8-2", 7), pare::core::load_model("mlp:784-4-2", 8)});
  ASSERT_TRUE(back.resume(dir.path()));
  ASSERT_EQ(back.history.size(), 1u);
  EXPECT_EQ(back.history[0].refused, r.refused);
  EXPECT_EQ(back.history[0].model_accuracy, r.model_accuracy);
  EXPECT_TRUE(back.velocity[0].equal(a));
  EXPECT_FALSE(back.velocity[1].defined());
  EXPECT_TRUE(pare::testing::bitwise_equal(fed::flatten(fed::state_of(back.models[0], back.layouts[0]), back.layouts[0]),
                                           fed::flatten(fed::state_of(s.models[0], s.layouts[0]), s.layouts[0])));
  fed::RoundState other({pare::core::load_model("mlp:784-8-2", 1)});
  EXPECT_THROW(other.resume(dir.path()), pare::InputError);  // one model where the checkpoint holds two
  EXPECT_FALSE(fed::RoundState({pare::core::load_model("mlp:784-8-2", 1)}).resume(dir.file("none")));
}

TEST(FederatedRules, ARoundTooSmallForTheRulesFIsNamed) {
  fed::AggregatorOptions o;
  o.name = "bulyan";
  o.assume_byzantine = 1;
  EXPECT_NO_THROW(fed::check_round_size(o, 7));
  try {
    fed::check_round_size(o, 6);
    ADD_FAILURE() << "6 rows taken for bulyan with f = 1";
  } catch (const pare::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bulyan needs n >= 7 for f = 1"), std::string::npos) << e.what();
  }
}

TEST(FederatedSimulate, RunsAServerAndItsClientsAsProcessesOfThePareBinary) {
  if (!pare::file_exists(PARE_BINARY)) GTEST_SKIP() << PARE_BINARY << " is not built";
  pare::testing::TempDir dir;
  const pare::core::TensorDataset ds = pare::testing::two_blobs(120, 5);
  pare::core::save_npy(ds.x, dir.file("x.npy"));
  pare::core::save_npy(ds.y, dir.file("y.npy"));
  fed::SimulateOptions o;
  o.pare = PARE_BINARY;
  o.models = {"mlp:784-8-2"};
  o.data = "npy:" + dir.file("x.npy") + "," + dir.file("y.npy");
  o.partition = "iid";
  o.out = dir.file("sim");
  o.clients = 3;
  o.byzantine = 1;
  o.attack = "sign-flip";
  o.server.agg.name = "median";
  o.server.rounds = 2;
  o.server.quiet = true;
  const fed::SimulateResult r = fed::simulate(o);
  EXPECT_EQ(r.failed_clients, 0);
  EXPECT_EQ(r.last.round, 2);
  EXPECT_EQ(r.last.answered, (std::vector<std::string>{"client-00", "client-01", "client-02"}));
  EXPECT_GE(r.last.val_accuracy, 0);
  EXPECT_TRUE(pare::file_exists(r.model));
  EXPECT_TRUE(pare::file_exists(dir.file("sim/logs/client-00.log")));
}
