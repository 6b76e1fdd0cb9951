#include "federated/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "federated/local.h"
#include "federated/wire.h"

namespace pare::federated {

using Clock = std::chrono::steady_clock;

void ClientOptions::validate() const {
  PARE_CHECK_OPTION(!id.empty() && id.size() <= 256, "client_id", "must have 1 to 256 characters");
  tls.validate(false);
  PARE_CHECK_OPTION(server_timeout > 0, "server_timeout", "must be > 0 seconds, got ", server_timeout);
  PARE_CHECK_OPTION(max_message_mb >= 1 && max_message_mb <= 2047, "max_message_mb", "must be in [1, 2047], got ",
                    max_message_mb);
  PARE_CHECK_OPTION(attack != AttackKind::kAlie || !collude_dir.empty(), "collude_dir",
                    "is needed by the alie attack (the folder the attackers share)");
  PARE_CHECK_OPTION(colluders >= 1 && round_clients >= colluders, "colluders",
                    "must be in [1, round_clients], got ", colluders, " of ", round_clients);
}

namespace {

// "A little is enough" needs the colluders' honest updates: each writes its own to DIR/round-R/
// and waits (up to `wait_s`) for the others'; the attack uses those that arrived.
at::Tensor collude_alie(const ClientOptions& o, int64_t round, const at::Tensor& honest, double wait_s) {
  const std::string dir = join_path(o.collude_dir, "round-" + std::to_string(round));
  make_dirs(dir);
  core::save_safetensors({{"update", honest}}, join_path(dir, o.id + ".safetensors"));
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  std::vector<at::Tensor> rows;
  for (;;) {
    rows.clear();  // the colluders' names are not known here: every file of the folder counts
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") rows.push_back(core::load_safetensors(e.path().string()).at("update"));
    if (int64_t(rows.size()) >= o.colluders || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return alie_update(at::stack(rows), o.round_clients, o.colluders);
}

struct Connection {
  const ClientOptions& o;
  std::unique_ptr<wire::Federation::Stub> stub;
  Clock::time_point contact = Clock::now();

  explicit Connection(const ClientOptions& opts) : o(opts) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(int(o.max_message_mb << 20));
    args.SetMaxSendMessageSize(int(o.max_message_mb << 20));
    if (!o.tls.server_name.empty()) args.SetSslTargetNameOverride(o.tls.server_name);
    stub = wire::Federation::NewStub(grpc::CreateCustomChannel(o.server, channel_credentials(o.tls), args));
  }

  // Runs `call` until it goes through; retries while the server is unreachable (restarting), up
  // to server_timeout seconds after the last contact. Other failures are errors.
  template <class Call>
  void retry(const char* what, Call call) {
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      const grpc::Status st = call(ctx);
      if (st.ok()) {
        contact = Clock::now();
        return;
      }
      const bool transient = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
        throw InputError("pare federate client: the server at " + o.server + " refused " + what + ": " + st.error_message());
      const double silent = std::chrono::duration<double>(Clock::now() - contact).count();
      if (!transient || silent > o.server_timeout)
        throw Error("pare federate client '" + o.id + "': " + what + " to " + o.server + " failed: " + st.error_message() +
                    (transient ? " (no answer for " + std::to_string(int(silent)) + " s)" : std::string()));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 100 << std::min(attempt, 4))));
    }
  }
};

// The logits' width of `g` on one sample of `x` (label flipping maps y to classes - 1 - y).
int64_t classes_of(const core::Graph& g, const at::Tensor& x) {
  core::Module m(g, core::Module::Use::kFrozen);
  return m.forward({x.narrow(0, 0, 1)}).at(0).size(-1);
}

wire::Update train_task(const ClientOptions& o, const wire::Task& task, const core::TensorDataset& data) {
  const auto t0 = Clock::now();
  const core::Graph global = core::parse_onnx(task.model(), "the global model of round " + std::to_string(task.round()));
  const Layout layout = state_layout(global);
  LocalTraining how;
  how.epochs = task.local_epochs();
  how.batch_size = task.batch_size();
  how.lr = task.lr();
  how.momentum = task.momentum();
  how.optimizer = task.optimizer();
  how.kd_alpha = task.kd_alpha();
  how.kd_temperature = task.kd_temperature();
  core::TensorDataset local = data;
  if (o.attack == AttackKind::kLabelFlip) local.y = flip_labels(data.y, classes_of(global, data.x));
  const LocalResult r = train_local(global, layout, local, how, task.seed());
  Tensors sent = r.update;
  if (o.attack == AttackKind::kAlie) {
    const double wait_s = std::max(1.0, task.deadline_s() - std::chrono::duration<double>(Clock::now() - t0).count()) / 2;
    sent = unflatten(collude_alie(o, task.round(), flatten(r.update, layout), wait_s), layout);
  } else if (o.attack != AttackKind::kNone && o.attack != AttackKind::kLabelFlip) {
    AttackOptions ao = o.attack_opts;
    ao.seed = o.attack_opts.seed * 31 + uint64_t(task.round());
    sent = unflatten(attack_update(o.attack, flatten(r.update, layout), ao), layout);
  }
  wire::Update u;
  u.set_client_id(o.id);
  u.set_round(task.round());
  u.set_num_samples(data.size());
  u.set_train_loss(r.train_loss);
  u.set_train_seconds(r.seconds);
  encode_tensors(sent, u.mutable_tensors());
  return u;
}

}  // namespace

ClientStats run_client(const ClientOptions& o, core::TensorDataset data) {
  o.validate();
  core::require_labels(data, "federated training");
  Connection conn(o);
  ClientStats stats;
  wire::PollRequest req;
  req.set_client_id(o.id);
  req.set_num_samples(data.size());
  req.set_architecture(o.architecture);
  for (;;) {
    wire::Task task;
    conn.retry("a poll", [&](grpc::ClientContext& ctx) { return conn.stub->Poll(&ctx, req, &task); });
    if (task.kind() == wire::Task::DONE) return stats;
    if (task.kind() == wire::Task::WAIT) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(task.wait_ms(), 10, 5000)));
      continue;
    }
    const wire::Update u = train_task(o, task, data);
    wire::UpdateReply reply;
    conn.retry("an update", [&](grpc::ClientContext& ctx) { return conn.stub->Submit(&ctx, u, &reply); });
    ++stats.rounds_trained;
    if (!reply.accepted()) ++stats.refused;
    if (!o.quiet)
      std::fprintf(stderr, "client %s: round %lld: loss %.4f, %s%s\n", o.id.c_str(), (long long)task.round(),
                   u.train_loss(), reply.accepted() ? "update accepted" : "update refused: ", reply.reason().c_str());
  }
}

}  // namespace pare::federated
