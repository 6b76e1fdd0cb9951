// The server over real gRPC on loopback, with hand-made clients: bad updates are refused, named in
// the round log, and the round goes on; a sampled client that never answers costs one deadline.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "distill/teacher.h"
#include "train/trainer.h"
#include "federated/server.h"
#include "federated/update.h"
#include "federated/wire.h"
#include "federation.grpc.pb.h"
#include "tests/test_util.h"

namespace fed = pare::federated;
namespace wire = pare::federated::wire;

namespace {

// A hand-made client: polls until it gets TRAIN for round `round` and returns the task.
struct FakeClient {
  std::unique_ptr<wire::Federation::Stub> stub;
  std::string id;

  FakeClient(int port, std::string name)
      : stub(wire::Federation::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                            grpc::InsecureChannelCredentials()))),
        id(std::move(name)) {}

  wire::Task poll() {
    grpc::ClientContext ctx;
    wire::PollRequest req;
    req.set_client_id(id);
    req.set_num_samples(100);
    wire::Task task;
    EXPECT_TRUE(stub->Poll(&ctx, req, &task).ok());
    return task;
  }
  wire::Task wait_for_train() {
    for (int i = 0; i < 600; ++i) {
      wire::Task t = poll();
      if (t.kind() == wire::Task::TRAIN || t.kind() == wire::Task::DONE) return t;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << id << " never got a task";
    return {};
  }
  wire::UpdateReply submit(const wire::Update& u) {
    grpc::ClientContext ctx;
    wire::UpdateReply reply;
    EXPECT_TRUE(stub->Submit(&ctx, u, &reply).ok());
    return reply;
  }
};

// An update of zeros (or of `value` everywhere) of the global model's layout, from the task's model.
wire::Update fed_zero_update(const wire::Task& task, const std::string& id, float value = 0) {
  const pare::core::Graph g = pare::core::parse_onnx(task.model(), "task");
  const fed::Layout l = fed::state_layout(g);
  wire::Update u;
  u.set_client_id(id);
  u.set_round(task.round());
  u.set_num_samples(100);
  fed::encode_tensors(fed::unflatten(at::full({l.size}, value), l), u.mutable_tensors());
  return u;
}

int fed_wait_for_port(const std::string& file) {
  for (int i = 0; i < 500 && !pare::file_exists(file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return std::stoi(pare::read_file(file));
}

fed::ServerOptions fed_options(const pare::testing::TempDir& dir, int64_t rounds, int64_t clients) {
  fed::ServerOptions o;
  o.dir = dir.file("server");
  o.port_file = dir.file("port");
  o.rounds = rounds;
  o.clients = clients;
  o.round_timeout = 30;
  o.join_timeout = 30;
  o.quiet = true;
  return o;
}

}  // namespace

TEST(FederatedServer, RefusesBadUpdatesNamesThemInTheRoundLogAndGoesOn) {
  pare::testing::TempDir dir;
  const pare::core::TensorDataset val = pare::testing::two_blobs(64, 3);
  std::vector<fed::RoundStats> stats;
  std::thread server([&] {
    stats = fed::Server(pare::core::load_model("mlp:784-8-2", 1), fed_options(dir, 1, 5), &val, nullptr).run();
  });
  const int port = fed_wait_for_port(dir.file("port"));
  std::vector<FakeClient> c;
  for (const char* name : {"good", "shape", "nan", "truncated", "extra"}) c.emplace_back(port, name);
  for (auto& x : c) x.poll();  // all five join, then each gets round 1
  std::vector<wire::Task> tasks;
  for (auto& x : c) tasks.push_back(x.wait_for_train());
  for (auto& t : tasks) ASSERT_EQ(t.kind(), wire::Task::TRAIN);

  EXPECT_TRUE(c[0].submit(fed_zero_update(tasks[0], "good")).accepted());
  wire::Update shape = fed_zero_update(tasks[1], "shape");
  {  // the same values as [1, numel]: the data fits its shape, the shape not the model
    wire::Tensor& t0 = *shape.mutable_tensors(0);
    t0.clear_shape();
    t0.add_shape(1);
    t0.add_shape(int64_t(t0.data().size() / 4));
  }
  wire::UpdateReply r = c[1].submit(shape);
  EXPECT_FALSE(r.accepted());
  EXPECT_NE(r.reason().find("has shape"), std::string::npos) << r.reason();
  wire::Update nan = fed_zero_update(tasks[2], "nan");
  const float q = std::nanf("");
  std::memcpy(nan.mutable_tensors(1)->mutable_data()->data(), &q, 4);
  r = c[2].submit(nan);
  EXPECT_FALSE(r.accepted());
  EXPECT_NE(r.reason().find("1 NaN or Inf value"), std::string::npos) << r.reason();
  wire::Update cut = fed_zero_update(tasks[3], "truncated");
  cut.mutable_tensors(0)->mutable_data()->resize(10);
  r = c[3].submit(cut);
  EXPECT_FALSE(r.accepted());
  EXPECT_NE(r.reason().find("truncated"), std::string::npos) << r.reason();
  wire::Update extra = fed_zero_update(tasks[4], "extra");
  *extra.add_tensors() = extra.tensors(0);
  extra.mutable_tensors(extra.tensors_size() - 1)->set_name("backdoor");
  r = c[4].submit(extra);
  EXPECT_FALSE(r.accepted());
  EXPECT_NE(r.reason().find("unexpected tensor 'backdoor'"), std::string::npos) << r.reason();
  // A second answer to the same round is not taken either.
  EXPECT_FALSE(c[0].submit(fed_zero_update(tasks[0], "good")).accepted());
  for (auto& x : c) EXPECT_EQ(x.wait_for_train().kind(), wire::Task::DONE);
  server.join();

  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].answered, std::vector<std::string>{"good"});
  EXPECT_FALSE(stats[0].skipped);
  ASSERT_EQ(stats[0].refused.size(), 4u);
  EXPECT_EQ(stats[0].refused[0].first, "shape");
  EXPECT_GE(stats[0].val_accuracy, 0);
  const std::string log = pare::read_file(dir.file("server/rounds.jsonl"));
  for (const char* who : {"\"shape\"", "\"nan\"", "\"truncated\"", "\"extra\"", "NaN or Inf"})
    EXPECT_NE(log.find(who), std::string::npos) << who << " not in the round log: " << log;
  EXPECT_TRUE(pare::file_exists(dir.file("server/model.onnx")));
}

TEST(FederatedServer, RefusesAClientOfAnArchitectureItDoesNotTrain) {
  pare::testing::TempDir dir;
  fed::ServerOptions o = fed_options(dir, 1, 1);
  o.join_timeout = 1;
  std::thread server([&] {
    EXPECT_THROW(fed::Server(pare::core::load_model("mlp:784-8-2", 1), o, nullptr, nullptr).run(), pare::Error);
  });
  FakeClient c(fed_wait_for_port(dir.file("port")), "c");
  grpc::ClientContext ctx;
  wire::PollRequest req;
  req.set_client_id("c");
  req.set_num_samples(10);
  req.set_architecture(3);
  wire::Task task;
  const grpc::Status st = c.stub->Poll(&ctx, req, &task);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "architecture 3: the server trains 1 model(s), 0 to 0");
  server.join();  // no client joined: the server gives up after join_timeout
}

TEST(FederatedServer, GoesOnWithoutASampledClientThatNeverAnswers) {
  pare::testing::TempDir dir;
  fed::ServerOptions o = fed_options(dir, 2, 2);
  o.round_timeout = 1.5;
  std::vector<fed::RoundStats> stats;
  std::thread server([&] { stats = fed::Server(pare::core::load_model("mlp:784-8-2", 1), o, nullptr, nullptr).run(); });
  const int port = fed_wait_for_port(dir.file("port"));
  FakeClient good(port, "good"), ghost(port, "ghost");
  ghost.poll();  // joins, is sampled, and never answers
  for (int round = 1; round <= 2; ++round) {
    const wire::Task t = good.wait_for_train();
    ASSERT_EQ(t.kind(), wire::Task::TRAIN);
    EXPECT_EQ(t.round(), round);
    EXPECT_TRUE(good.submit(fed_zero_update(t, "good")).accepted());
  }
  EXPECT_EQ(good.wait_for_train().kind(), wire::Task::DONE);
  server.join();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].sampled, (std::vector<std::string>{"ghost", "good"}));
  EXPECT_EQ(stats[0].answered, std::vector<std::string>{"good"});
  EXPECT_GE(stats[0].seconds, 1.4);  // it waited out the deadline
  EXPECT_FALSE(stats[0].skipped);
}

TEST(FederatedServer, SkipsARoundWithFewerAnswersThanTheMinimumAndKeepsTheModel) {
  pare::testing::TempDir dir;
  fed::ServerOptions o = fed_options(dir, 1, 1);
  o.round_timeout = 0.5;
  o.min_clients = 2;
  o.join_timeout = 0.5;
  std::vector<fed::RoundStats> stats;
  const pare::core::Graph initial = pare::core::load_model("mlp:784-8-2", 1);
  std::thread server([&] { stats = fed::Server(initial, o, nullptr, nullptr).run(); });
  FakeClient a(fed_wait_for_port(dir.file("port")), "a");
  const wire::Task t = a.wait_for_train();
  wire::Update u = fed_zero_update(t, "a");
  std::string& d = *u.mutable_tensors(0)->mutable_data();
  const float one = 1;
  std::memcpy(d.data(), &one, 4);
  EXPECT_TRUE(a.submit(u).accepted());
  server.join();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_TRUE(stats[0].skipped);
  const pare::core::Graph out = pare::core::load_onnx(dir.file("server/model.onnx"));
  for (const auto& [name, t0] : initial.initializers) EXPECT_TRUE(pare::testing::bitwise_equal(out.initializers.at(name), t0)) << name;
}

// Server momentum 0.5 and server lr 2, one client sending 1 everywhere each round: v is 1, 1.5,
// 1.75, so after three rounds every weight moved by 2 * 4.25 = 8.5. The server is stopped after two
// rounds and resumed for the third: the velocity comes back from the checkpoint (a fresh v would
// give 2 * 3.5 = 7).
TEST(FederatedServer, ServerMomentumAccumulatesAndResumesFromTheCheckpoint) {
  pare::testing::TempDir dir;
  const pare::core::Graph initial = pare::core::load_model("mlp:784-8-2", 1);
  fed::ServerOptions o = fed_options(dir, 2, 1);
  o.server_momentum = 0.5;
  o.server_lr = 2;
  for (int64_t rounds : {2, 3}) {
    o.rounds = rounds;
    std::remove(dir.file("port").c_str());
    std::thread server([&] { fed::Server(initial, o, nullptr, nullptr).run(); });
    FakeClient c(fed_wait_for_port(dir.file("port")), "c");
    for (wire::Task t = c.wait_for_train(); t.kind() == wire::Task::TRAIN; t = c.wait_for_train())
      EXPECT_TRUE(c.submit(fed_zero_update(t, "c", 1)).accepted());
    server.join();
  }
  const pare::core::Graph out = pare::core::load_onnx(dir.file("server/model.onnx"));
  for (const auto& [name, t0] : initial.initializers)
    EXPECT_TRUE(at::allclose(out.initializers.at(name), t0 + 8.5, 0, 1e-4)) << name;
  const std::string state = pare::read_file(dir.file("server/server.json"));
  EXPECT_NE(state.find("round-3.velocity.npy"), std::string::npos) << state;
  EXPECT_FALSE(pare::file_exists(dir.file("server/round-2.velocity.npy")));
  // A velocity that does not fit the model is refused at resume, by name.
  pare::core::save_npy(at::zeros({3}), dir.file("server/round-3.velocity.npy"));
  o.rounds = 4;
  try {
    fed::Server(initial, o, nullptr, nullptr).run();
    ADD_FAILURE() << "a 3-value velocity was taken";
  } catch (const pare::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("round-3.velocity.npy is not a float32 vector"), std::string::npos) << e.what();
  }

  o.server_momentum = 1;
  EXPECT_THROW(o.validate(), pare::InputError);
  o.server_momentum = 0;
  o.server_lr = 0;
  EXPECT_THROW(o.validate(), pare::InputError);
}

// FedDF's early stopping (--distill-val). Two clients send +0.05 and -0.05 everywhere, so the
// aggregate is the initial model exactly, while the ensemble of the two client models is another
// function. A distillation learning rate of 10 wrecks the student in its first Adam step, so no
// epoch agrees with the ensemble on the held-out inputs as well as the aggregate: the round keeps
// epoch 0 and the model stays the aggregate. Without the hold-out the wrecked model is kept. At
// lr 1e-2 an epoch past 0 agrees better: the round keeps it, and the stored model is not the
// aggregate and agrees with the ensemble on the held-out inputs better than the aggregate does.
TEST(FederatedServer, FeddfKeepsTheEpochThatAgreesBestWithTheEnsembleOnHeldOutInputs) {
  at::manual_seed(0);
  const pare::core::Graph initial = pare::core::load_model("mlp:784-16-10", 1);
  const pare::core::TensorDataset inputs{at::randn({200, 1, 28, 28}), {}, "distill"};
  // The ensemble's labels on the held-out quarter (the last 50 inputs) and a model's agreement with them.
  std::vector<std::unique_ptr<pare::distill::Teacher>> members;
  for (float d : {0.05f, -0.05f}) {
    pare::core::Graph g = initial;
    const fed::Layout l = fed::state_layout(g);
    fed::apply_update(g, at::full({l.size}, d), l);
    members.push_back(std::make_unique<pare::engine::TorchEngine>(std::move(g), "client"));
  }
  pare::distill::EnsembleTeacher ensemble(std::move(members), {});
  const at::Tensor held_x = inputs.x.narrow(0, 150, 50);
  const pare::core::TensorDataset held_out{held_x, ensemble.logits(held_x).argmax(1), "held out"};
  auto agreement = [&](const pare::core::Graph& g) {
    pare::core::Module m(g);
    return pare::train::evaluate(m, held_out).accuracy;
  };
  struct Case { double held, lr; bool kept_aggregate; };
  for (const Case c : {Case{0.25, 10, true}, Case{0.0, 10, false}, Case{0.25, 1e-2, false}}) {
    SCOPED_TRACE("held-out share " + std::to_string(c.held) + ", lr " + std::to_string(c.lr));
    pare::testing::TempDir dir;
    fed::ServerOptions o = fed_options(dir, 1, 2);
    o.mode = "feddf";
    o.distill_epochs = 3;
    o.distill_lr = c.lr;
    o.distill_val = c.held;
    fed::ServerData data;
    data.distill = &inputs;
    std::vector<fed::RoundStats> stats;
    std::thread server([&] { stats = fed::Server({initial}, o, data).run(); });
    const int port = fed_wait_for_port(dir.file("port"));
    FakeClient a(port, "a"), b(port, "b");
    b.poll();  // both have joined before the first round
    for (wire::Task ta = a.wait_for_train(), tb = b.wait_for_train(); ta.kind() == wire::Task::TRAIN;
         ta = a.wait_for_train(), tb = b.wait_for_train()) {
      EXPECT_TRUE(a.submit(fed_zero_update(ta, "a", 0.05f)).accepted());
      EXPECT_TRUE(b.submit(fed_zero_update(tb, "b", -0.05f)).accepted());
    }
    server.join();
    const pare::core::Graph out = pare::core::load_onnx(dir.file("server/model.onnx"));
    bool same = true;
    for (const auto& [name, t0] : initial.initializers) same = same && at::equal(out.initializers.at(name), t0);
    EXPECT_EQ(same, c.kept_aggregate);
    const std::string log = pare::read_file(dir.file("server/rounds.jsonl"));
    EXPECT_EQ(log.find("\"distill_kept_epoch\":[0]") != std::string::npos, c.kept_aggregate) << log;
    if (c.held > 0 && !c.kept_aggregate) {
      ASSERT_EQ(stats.size(), 1u);
      ASSERT_EQ(stats[0].distill_kept.size(), 1u);
      EXPECT_GT(stats[0].distill_kept[0], 0) << log;
      EXPECT_GT(agreement(out), agreement(initial));
    }
  }
  fed::ServerOptions bad;
  bad.distill_val = 1;
  EXPECT_THROW(bad.validate(), pare::InputError);
}

TEST(FederatedServer, RefusesADataSetThatDoesNotFitAModelAtStart) {
  pare::testing::TempDir dir;
  const pare::core::TensorDataset flat{at::zeros({4, 784}), {}, "npy:flat.x.npy"};
  fed::ServerData data;
  data.distill = &flat;
  fed::ServerOptions o = fed_options(dir, 1, 1);
  o.mode = "feddf";
  try {
    fed::Server({pare::core::load_model("mlp:784-8-2", 1)}, o, data);
    ADD_FAILURE() << "a [4, 784] set was taken for a [N, 1, 28, 28] model";
  } catch (const pare::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("npy:flat.x.npy (inputs [4, 784]) does not fit model 0: "), std::string::npos) << e.what();
  }
  EXPECT_FALSE(pare::file_exists(dir.file("server")));
}

// Bucketing before the rule (Karimireddy et al. 2022). Six clients, five honest sending 1 and one
// sending 1e6, in buckets of 2: one of the three bucket means is (1e6 + 1) / 2, the two others 1,
// so their median is exactly 1 whatever the grouping. The round log's view is in clients: a rule
// that keeps buckets names every client of each, and a rule with scores gives each client its
// bucket's.
TEST(FederatedAggregate, BucketingRunsTheRuleOnGroupMeansAndReportsInClients) {
  const at::Tensor U = at::tensor({1.f, 1.f, 1e6f, 1.f, 1.f, 1.f}).reshape({6, 1});
  const std::vector<double> w(6, 1.0);
  fed::AggregatorOptions o;
  o.name = "median";
  o.bucket = 2;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const fed::Aggregate a = fed::aggregate(o, U.clone(), w, {}, nullptr, seed);
    EXPECT_FLOAT_EQ(a.update.item<float>(), 1.f) << "seed " << seed;
    EXPECT_EQ(a.selected, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  }
  // Krum with f = 0 on the 3 means keeps one bucket: its two clients, the ones bucket_rows put together.
  o.name = "krum";
  const fed::Buckets b = fed::bucket_rows(U, 2, 3);
  const fed::Aggregate k = fed::aggregate(o, U.clone(), w, {}, nullptr, 3);
  const fed::Aggregate direct = fed::krum(b.means, 0);
  ASSERT_EQ(direct.selected.size(), 1u);
  EXPECT_EQ(k.selected, b.members[size_t(direct.selected[0])]);
  ASSERT_EQ(k.scores.size(), 6u);
  for (size_t g = 0; g < b.members.size(); ++g)
    for (int64_t i : b.members[g]) EXPECT_EQ(k.scores[size_t(i)], direct.scores[g]) << "client " << i;
  EXPECT_TRUE(at::equal(k.update, direct.update));
  // A bucket's mean is the plain mean of its rows (the weights only weigh buckets against each
  // other): with s = n there is one bucket, so FedAvg gives (1+2+3+10)/4 = 4 whatever the weights.
  o.name = "fedavg";
  o.bucket = 4;
  EXPECT_FLOAT_EQ(fed::aggregate(o, at::tensor({1.f, 2.f, 3.f, 10.f}).reshape({4, 1}), {1, 5, 1, 1}, {}).update.item<float>(),
                  4.f);
  o.bucket = -1;
  pare::testing::expect_option_error([&] { o.validate(); }, "bucket", {"must be >= 0", "got -1"});

  // The start-up check counts the rows the rule sees: 20 clients in buckets of 2 are 10 rows,
  // enough for the median but not for Krum with f = 4 (2f + 3 = 11).
  fed::ServerOptions s;
  s.dir = "unused";
  s.clients = 20;
  s.agg.assume_byzantine = 4;
  s.agg.bucket = 2;
  s.agg.name = "median";
  EXPECT_NO_THROW(s.validate());
  s.agg.name = "krum";
  pare::testing::expect_option_error([&] { s.validate(); }, "assume_byzantine", {"in buckets of 2 (10 rows)", "n >= 11"});
  s.agg.bucket = 0;
  EXPECT_NO_THROW(s.validate());
}

// Nearest-neighbour mixing before the rule: with f = assume_byzantine = 1, four clients sending
// 0, 1, 2 and 10 are mixed into 1, 1, 1, 13/3 (see MixNearestAveragesEachRowsNearestNeighbours),
// whose median is 1 (1.5 unmixed). Rows stay clients; NNM with bucketing is refused, and the
// start-up check asks n >= 2f + 1 even of a rule that needs fewer.
TEST(FederatedAggregate, NearestNeighbourMixingRunsTheRuleOnMixedRows) {
  const at::Tensor U = at::tensor({0.f, 1.f, 2.f, 10.f}).reshape({4, 1});
  const std::vector<double> w(4, 1.0);
  fed::AggregatorOptions o;
  o.name = "median";
  o.assume_byzantine = 1;
  EXPECT_FLOAT_EQ(fed::aggregate(o, U.clone(), w, {}).update.item<float>(), 1.5f);
  EXPECT_EQ(fed::describe(o), "median");
  o.nnm = true;
  EXPECT_EQ(fed::describe(o), "median (f = 1, nearest-neighbour mixing)");
  const fed::Aggregate a = fed::aggregate(o, U.clone(), w, {});
  EXPECT_FLOAT_EQ(a.update.item<float>(), 1.f);
  EXPECT_EQ(a.selected, (std::vector<int64_t>{0, 1, 2, 3}));
  // Clipping comes first: clipped to norm 3, the rows are 0, 1, 2, 3 and mix into 1, 1, 2, 2.
  o.clip_norm = 3;
  o.name = "fedavg";
  int64_t clipped = 0;
  EXPECT_FLOAT_EQ(fed::aggregate(o, U.clone(), w, {}, &clipped).update.item<float>(), 1.5f);
  EXPECT_EQ(clipped, 1);
  EXPECT_EQ(fed::describe(o), "fedavg (f = 1, clip norm 3, nearest-neighbour mixing)");
  o.bucket = 2;
  pare::testing::expect_option_error([&] { o.validate(); }, "nnm", {"use one", "got bucket 2"});
  o.nnm = false;
  o.name = "trimmed-mean";
  EXPECT_EQ(fed::describe(o), "trimmed-mean (trim 0.2, clip norm 3, buckets of 2)");

  fed::ServerOptions s;
  s.dir = "unused";
  s.clients = 8;
  s.agg.name = "median";
  s.agg.assume_byzantine = 4;
  EXPECT_NO_THROW(s.validate());
  s.agg.nnm = true;
  pare::testing::expect_option_error([&] { s.validate(); }, "assume_byzantine",
                                     {"median with nearest-neighbour mixing needs n >= 9 for f = 4"});
  s.agg.assume_byzantine = 3;
  EXPECT_NO_THROW(s.validate());
}

// The server's table of rules: every name reaches its own function with the options it needs, and
// the fewest clients each rule accepts for f are checked when the options are.
TEST(FederatedAggregate, EachNameRunsItsRuleWithItsOptions) {
  EXPECT_EQ(fed::aggregator_names(), (std::vector<std::string>{"fedavg", "median", "trimmed-mean", "krum",
                                                               "multi-krum", "bulyan", "fltrust"}));
  at::Tensor U = at::randn({11, 5}, at::TensorOptions().dtype(at::kFloat));
  const std::vector<double> w(11, 1.0);
  const at::Tensor g0 = at::randn({5});
  fed::AggregatorOptions o;
  o.assume_byzantine = 2;
  o.trim = 0.2;
  o.multi_krum_m = 4;
  const std::map<std::string, fed::Aggregate> direct = {
      {"fedavg", fed::fedavg(U, w)},          {"median", fed::coordinate_median(U)},
      {"trimmed-mean", fed::trimmed_mean(U, 2)}, {"krum", fed::krum(U, 2)},
      {"multi-krum", fed::multi_krum(U, 2, 4)},  {"bulyan", fed::bulyan(U, 2)},
      {"fltrust", fed::fltrust(U, g0)}};
  for (const std::string& name : fed::aggregator_names()) {
    o.name = name;
    const fed::Aggregate a = fed::aggregate(o, U.clone(), w, g0);
    EXPECT_TRUE(at::equal(a.update, direct.at(name).update)) << name;
    EXPECT_EQ(a.selected, direct.at(name).selected) << name;
  }
  o.name = "nope";
  EXPECT_THROW(o.validate(), pare::InputError);

  fed::ServerOptions s;
  s.dir = "unused";
  s.clients = 10;
  s.agg.assume_byzantine = 2;
  for (const auto& [name, ok] : std::vector<std::pair<std::string, bool>>{{"bulyan", false}, {"krum", true},
                                                                          {"multi-krum", true}, {"median", true}}) {
    s.agg.name = name;  // 10 clients: bulyan needs 4f+3 = 11, krum 2f+3 = 7
    if (ok)
      EXPECT_NO_THROW(s.validate()) << name;
    else
      EXPECT_THROW(s.validate(), pare::InputError) << name;
  }
  s.clients = 11;
  s.agg.name = "bulyan";
  EXPECT_NO_THROW(s.validate());
}
