// The server as the composition of its parts: the gRPC service (federated/service.h) collects each
// round's updates, the rules (federated/rules.h) aggregate them into the round state
// (federated/round_state.h), FedDF (federated/feddf.h) fuses the models, and the state is
// evaluated and checkpointed after every round.
#include "federated/server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "federated/feddf.h"
#include "federated/service.h"
#include "train/trainer.h"

namespace pare::federated {

using Clock = std::chrono::steady_clock;

void ServerOptions::validate() const {
  agg.validate();
  tls.validate(true);
  PARE_CHECK_OPTION(rounds >= 1, "rounds", "must be at least 1, got ", rounds);
  PARE_CHECK_OPTION(clients >= 1, "clients", "must be at least 1, got ", clients);
  PARE_CHECK_OPTION(per_round >= 0, "per_round", "must be >= 0 (0: every live client), got ", per_round);
  PARE_CHECK_OPTION(min_clients >= 1, "min_clients", "must be at least 1, got ", min_clients);
  PARE_CHECK_OPTION(round_timeout > 0, "round_timeout", "must be > 0 seconds, got ", round_timeout);
  PARE_CHECK_OPTION(join_timeout > 0, "join_timeout", "must be > 0 seconds, got ", join_timeout);
  PARE_CHECK_OPTION(max_message_mb >= 1 && max_message_mb <= 2047, "max_message_mb", "must be in [1, 2047], got ",
                    max_message_mb);
  PARE_CHECK_OPTION(std::isfinite(server_lr) && server_lr > 0, "server_lr", "must be finite and > 0, got ", server_lr);
  PARE_CHECK_OPTION(server_momentum >= 0 && server_momentum < 1, "server_momentum", "must be in [0, 1), got ",
                    server_momentum);
  PARE_CHECK_OPTION(local.epochs >= 1, "local_epochs", "must be at least 1, got ", local.epochs);
  PARE_CHECK_OPTION(local.kd_alpha >= 0 && local.kd_alpha <= 1, "local_kd_alpha", "must be in [0, 1], got ",
                    local.kd_alpha);
  PARE_CHECK_OPTION(local.kd_temperature > 0, "local_kd_temperature", "must be > 0, got ", local.kd_temperature);
  PARE_CHECK_OPTION(!dir.empty(), "dir", "is needed (the server's state and round log)");
  PARE_CHECK_OPTION(mode == "fedavg" || mode == "feddf", "mode", "must be fedavg or feddf, got '", mode, "'");
  PARE_CHECK_OPTION(ensemble == "mean" || ensemble == "median" || ensemble == "trimmed-mean", "ensemble",
                    "must be mean, median or trimmed-mean, got '", ensemble, "'");
  PARE_CHECK_OPTION(distill_epochs >= 1, "distill_epochs", "must be at least 1, got ", distill_epochs);
  PARE_CHECK_OPTION(distill_batch >= 1, "distill_batch", "must be at least 1, got ", distill_batch);
  PARE_CHECK_OPTION(distill_lr > 0, "distill_lr", "must be > 0, got ", distill_lr);
  PARE_CHECK_OPTION(distill_temperature > 0, "distill_temperature", "must be > 0, got ", distill_temperature);
  PARE_CHECK_OPTION(distill_val >= 0 && distill_val < 1, "distill_val", "must be in [0, 1), got ", distill_val);
  // A round has at most this many answers: too few for the aggregator's f is a mistake to say now
  // (a round with fewer answers than its rule needs is skipped and says why).
  check_round_size(agg, per_round > 0 ? std::min(per_round, clients) : clients);
}

struct Server::Impl {
  ServerOptions o;
  ServerData data;
  RoundState state;
  Service service;  // holds o and state.layouts

  Impl(std::vector<core::Graph> g, ServerOptions opts, ServerData d)
      : o(std::move(opts)), data(d), state(std::move(g)), service(o, state.layouts) {}

  RoundStats run_round(int64_t r);
  void finish_round(RoundStats& st, std::vector<Answer> got);
  void aggregate_into(RoundStats& st, const std::vector<Answer>& got, int64_t arch);
  void evaluate(RoundStats& st) const;
  void log_round(const RoundStats& st) const;
};

RoundStats Server::Impl::run_round(int64_t r) {
  const auto t0 = Clock::now();
  RoundStats st;
  st.round = r;
  std::vector<Answer> got = service.collect(r, state.models, t0, st);
  std::sort(got.begin(), got.end(), [](const Answer& a, const Answer& b) { return a.client < b.client; });
  for (const Answer& a : got) st.answered.push_back(a.client);
  finish_round(st, std::move(got));
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

// Aggregates the answers of architecture `arch` into its model (the model is kept when the rule
// cannot run on them: the round is then marked skipped, with the reason).
void Server::Impl::aggregate_into(RoundStats& st, const std::vector<Answer>& got, int64_t arch) {
  const std::vector<Layout>& layouts = state.layouts;
  std::vector<at::Tensor> rows;
  std::vector<double> weights;
  std::vector<const Answer*> who;
  for (const Answer& a : got) {
    if (a.arch != arch) continue;
    rows.push_back(flatten(a.update, layouts[arch]));
    weights.push_back(double(a.num_samples));
    who.push_back(&a);
  }
  if (rows.empty()) return;
  const int64_t n = rows.size();
  at::Tensor g0;
  if (o.agg.name == "fltrust") {
    // As many local steps as a client of the round's mean size makes (Cao et al. train the root
    // update like a client's): the root set is small, so that is several epochs of it.
    double mean_n = 0;
    for (double w : weights) mean_n += w / double(n);
    LocalTraining how = o.local;
    how.epochs = std::max<int64_t>(1, std::llround(mean_n * double(o.local.epochs) / double(data.root->size())));
    g0 = flatten(train_local(state.models[arch], layouts[arch], *data.root, how, o.seed + uint64_t(st.round)).update,
                 layouts[arch]);
  }
  try {
    int64_t clipped = 0;
    Aggregate agg = aggregate(o.agg, at::stack(rows), weights, g0, &clipped, o.seed + uint64_t(st.round));
    st.clipped += clipped;
    for (int64_t i : agg.selected) st.selected.push_back(who[i]->client);
    st.scores.insert(st.scores.end(), agg.scores.begin(), agg.scores.end());
    state.step(size_t(arch), agg.update, o.server_lr, o.server_momentum);
  } catch (const InputError& e) {  // too few answers for the rule's f
    st.skipped = true;
    st.skip_reason += (st.skip_reason.empty() ? "" : "; ") + std::string(e.what());
    service.log("round %lld: model %lld: %s: model kept\n", (long long)st.round, (long long)arch, e.what());
  }
}

// Aggregates the answers into the model(s) (or skips the round), distils (feddf) and evaluates.
void Server::Impl::finish_round(RoundStats& st, std::vector<Answer> got) {
  const int64_t n = got.size();
  if (n < o.min_clients || n == 0) {
    st.skipped = true;
    st.skip_reason = std::to_string(n) + " answers, fewer than min_clients = " + std::to_string(o.min_clients);
    service.log("round %lld: %lld of %zu sampled clients answered (minimum %lld): round skipped, model kept\n",
                (long long)st.round, (long long)n, st.sampled.size(), (long long)o.min_clients);
  } else {
    for (const Answer& a : got) st.train_loss += a.train_loss / double(n);
    const std::vector<core::Graph> before = state.models;
    for (size_t k = 0; k < state.models.size(); ++k) aggregate_into(st, got, int64_t(k));
    if (o.mode == "feddf") feddf_distill(state, before, got, o, *data.distill, st);
  }
  evaluate(st);
}

void Server::Impl::evaluate(RoundStats& st) const {
  const std::vector<core::Graph>& models = state.models;
  for (size_t k = 0; data.val && k < models.size(); ++k) {
    core::Module m(models[k], core::Module::Use::kFrozen);
    const train::EvalResult e = train::evaluate(m, *data.val);
    if (k == 0) {
      st.val_accuracy = e.accuracy;
      st.val_loss = e.loss;
    }
    if (models.size() > 1) st.model_accuracy.push_back(e.accuracy);
  }
}

void Server::Impl::log_round(const RoundStats& st) const {
  service.log("round %lld/%lld: %zu of %zu answered, %zu refused", (long long)st.round, (long long)o.rounds,
              st.answered.size(), st.sampled.size(), st.refused.size());
  if (st.val_accuracy >= 0) service.log(", val acc %.2f%% loss %.4f", st.val_accuracy * 100, st.val_loss);
  for (size_t k = 0; k < st.model_accuracy.size(); ++k)
    service.log("%s%.2f%%", k == 0 ? " (each model: " : ", ", st.model_accuracy[k] * 100);
  if (!st.model_accuracy.empty()) service.log(")");
  service.log(", %.1f s\n", st.seconds);
}

Server::Server(std::vector<core::Graph> models, ServerOptions opts, ServerData data)
    : impl_(std::make_unique<Impl>(std::move(models), std::move(opts), data)) {
  const Impl& s = *impl_;
  const std::vector<core::Graph>& graphs = s.state.models;
  s.o.validate();
  PARE_CHECK_OPTION(s.o.agg.name != "fltrust" || data.root, "root_data", "is needed by the fltrust aggregator");
  PARE_CHECK_OPTION(!graphs.empty(), "model", "is needed");
  PARE_CHECK_OPTION(s.o.mode == "feddf" || graphs.size() == 1, "model",
                    "is given ", graphs.size(), " times: fedavg trains one model (several architectures: mode feddf)");
  PARE_CHECK_OPTION(s.o.mode != "feddf" || data.distill, "distill_data", "is needed by mode feddf (unlabeled inputs)");
  // Every model takes every data set the server holds: a set of the wrong shape is said now, not
  // after the first round's training.
  for (size_t k = 0; k < graphs.size(); ++k) {
    core::Module m(graphs[k], core::Module::Use::kFrozen);
    for (const core::TensorDataset* ds : {data.val, data.root, data.distill}) {
      if (!ds || ds->size() == 0) continue;
      try {
        m.forward({ds->x.narrow(0, 0, 1)});
      } catch (const InputError& e) {
        throw InputError(detail::concat(ds->name, " (inputs ", ds->x.sizes(), ") does not fit model ", k, ": ", e.what()));
      }
    }
  }
}

Server::Server(core::Graph initial, ServerOptions opts, const core::TensorDataset* val, const core::TensorDataset* root)
    : Server(std::vector<core::Graph>{std::move(initial)}, std::move(opts), ServerData{val, root, nullptr}) {}

Server::~Server() = default;

std::vector<RoundStats> Server::run() {
  Impl& s = *impl_;
  make_dirs(s.o.dir);
  if (s.state.resume(s.o.dir))
    s.service.log("resuming from %s: %lld of %lld rounds done\n", join_path(s.o.dir, "server.json").c_str(),
                  (long long)s.state.history.size(), (long long)s.o.rounds);
  int port = 0;
  std::unique_ptr<grpc::Server> server = s.service.listen(&port);
  const char* security = !s.o.tls.enabled() ? "plaintext" : s.o.tls.ca.empty() ? "TLS" : "mutual TLS";
  s.service.log("listening on port %d (%s); %lld rounds, aggregator %s\n", port, security, (long long)s.o.rounds,
                describe(s.o.agg).c_str());
  if (!s.o.port_file.empty()) write_file_atomic(s.o.port_file, std::to_string(port) + "\n");
  std::vector<RoundStats>& history = s.state.history;
  if (history.empty()) s.state.checkpoint(s.o.dir);  // round 0: the initial model
  if (int64_t(history.size()) < s.o.rounds) s.service.wait_for_clients();
  for (int64_t r = history.size() + 1; r <= s.o.rounds; ++r) {
    history.push_back(s.run_round(r));
    s.log_round(history.back());
    s.state.checkpoint(s.o.dir);
  }
  for (size_t k = 0; k < s.state.models.size(); ++k)
    core::save_onnx(s.state.models[k],
                    join_path(s.o.dir, k == 0 ? std::string("model.onnx") : "model-" + std::to_string(k) + ".onnx"));
  s.service.finish();  // tell the clients: each poll gets DONE
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return history;
}

}  // namespace pare::federated
