#include "federated/service.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <random>

#include "core/error.h"
#include "core/onnx_io.h"
#include "federated/tls.h"
#include "federated/wire.h"

namespace pare::federated {

namespace {
Service::Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Service::Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

Service::Service(const ServerOptions& o, const std::vector<Layout>& layouts) : o_(o), layouts_(layouts) {}

void Service::log(const char* fmt, ...) const {
  if (o_.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
}

grpc::Status Service::Poll(grpc::ServerContext*, const wire::PollRequest* req, wire::Task* task) {
  const int64_t n_models = layouts_.size();
  if (req->client_id().empty() || req->client_id().size() > 256)
    return {grpc::StatusCode::INVALID_ARGUMENT, "client_id must have 1 to 256 characters"};
  if (req->num_samples() < 1) return {grpc::StatusCode::INVALID_ARGUMENT, "num_samples must be at least 1"};
  if (req->architecture() < 0 || req->architecture() >= n_models)
    return {grpc::StatusCode::INVALID_ARGUMENT, "architecture " + std::to_string(req->architecture()) +
                                                    ": the server trains " + std::to_string(n_models) +
                                                    " model(s), 0 to " + std::to_string(n_models - 1)};
  std::lock_guard<std::mutex> lock(mu_);
  Client& c = clients_[req->client_id()];
  if (c.num_samples == 0) cv_.notify_all();  // a new client: wait_for_clients may be waiting
  c.num_samples = req->num_samples();
  c.arch = req->architecture();
  c.seen = Clock::now();
  task->set_wait_ms(100);
  if (done_) {
    told_done_.insert(req->client_id());
    cv_.notify_all();
    task->set_kind(wire::Task::DONE);
    return grpc::Status::OK;
  }
  if (!open_ || !sampled_.count(req->client_id()) || replied_.count(req->client_id())) {
    task->set_kind(wire::Task::WAIT);
    return grpc::Status::OK;
  }
  fill_task(req->client_id(), c, task);
  return grpc::Status::OK;
}

// The round's work for client `id`: its model, the local training, and a seed of its own.
void Service::fill_task(const std::string& id, const Client& c, wire::Task* task) const {
  task->set_kind(wire::Task::TRAIN);
  task->set_round(round_);
  task->set_model(model_bytes_.at(c.arch));
  task->set_local_epochs(o_.local.epochs);
  task->set_batch_size(o_.local.batch_size);
  task->set_lr(o_.local.lr);
  task->set_momentum(o_.local.momentum);
  task->set_optimizer(o_.local.optimizer);
  task->set_kd_alpha(o_.local.kd_alpha);
  task->set_kd_temperature(o_.local.kd_temperature);
  task->set_seed(o_.seed * 1000003u + uint64_t(round_) * 7919u + std::hash<std::string>()(id) % 7907u);
  task->set_deadline_s(std::chrono::duration<double>(deadline_ - Clock::now()).count());
}

grpc::Status Service::Submit(grpc::ServerContext*, const wire::Update* req, wire::UpdateReply* reply) {
  Tensors update;
  std::string why = decode_tensors(req->tensors(), &update);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& id = req->client_id();
  const int64_t arch = clients_.count(id) ? clients_[id].arch : 0;
  if (why.empty()) why = check_update(update, layouts_[arch]);
  std::string late;
  if (!open_ || req->round() != round_)
    late = "the update is for round " + std::to_string(req->round()) + ", the open round is " +
           (open_ ? std::to_string(round_) : std::string("none"));
  else if (!sampled_.count(id))
    late = "client '" + id + "' was not sampled in round " + std::to_string(round_);
  else if (replied_.count(id))
    late = "client '" + id + "' already answered round " + std::to_string(round_);
  if (!late.empty()) {  // not part of this round: refused without a mark in its log
    reply->set_accepted(false);
    reply->set_reason(late);
    return grpc::Status::OK;
  }
  if (clients_.count(id)) clients_[id].seen = Clock::now();
  replied_.insert(id);
  if (why.empty() && req->num_samples() < 1) why = "num_samples must be at least 1";
  if (!why.empty()) {
    refused_.emplace_back(id, why);
    reply->set_accepted(false);
    reply->set_reason(why);
    log("round %lld: refused the update of %s: %s\n", (long long)round_, id.c_str(), why.c_str());
  } else {
    answers_.push_back({id, arch, std::move(update), req->num_samples(), req->train_loss()});
    reply->set_accepted(true);
  }
  cv_.notify_all();
  return grpc::Status::OK;
}

std::unique_ptr<grpc::Server> Service::listen(int* port) {
  grpc::ServerBuilder builder;
  *port = 0;
  builder.AddListeningPort(o_.address, server_credentials(o_.tls), port);
  builder.SetMaxReceiveMessageSize(int(o_.max_message_mb << 20));
  builder.SetMaxSendMessageSize(int(o_.max_message_mb << 20));
  builder.RegisterService(this);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) throw InputError("pare federate server: cannot listen on '" + o_.address + "'");
  return server;
}

void Service::wait_for_clients() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, Clock::now() + to_duration(o_.join_timeout), [&] { return int64_t(clients_.size()) >= o_.clients; });
  const int64_t have = clients_.size();
  if (have < o_.clients && have < o_.min_clients)
    throw Error("pare federate server: " + std::to_string(have) + " of " + std::to_string(o_.clients) +
                " clients joined within " + std::to_string(int(o_.join_timeout)) + " s (minimum " +
                std::to_string(o_.min_clients) + ")");
  if (have < o_.clients)
    log("%lld of %lld clients joined within %.0f s: going on with them\n", (long long)have, (long long)o_.clients,
        o_.join_timeout);
}

// The clients heard from within the last round timeout (others are taken for dead), sampled
// without replacement from the round's seed.
std::vector<std::string> Service::sample(int64_t r) {
  std::vector<std::string> live;
  const auto now = Clock::now();
  const auto window = to_duration(o_.round_timeout);
  for (const auto& [id, c] : clients_)
    if (now - c.seen <= window) live.push_back(id);
  std::mt19937_64 rng(o_.seed * 6364136223846793005ull + uint64_t(r));
  std::shuffle(live.begin(), live.end(), rng);
  if (o_.per_round > 0 && int64_t(live.size()) > o_.per_round) live.resize(o_.per_round);
  std::sort(live.begin(), live.end());
  return live;
}

std::vector<Answer> Service::collect(int64_t r, const std::vector<core::Graph>& models, Clock::time_point t0,
                                     RoundStats& st) {
  std::unique_lock<std::mutex> lock(mu_);
  st.sampled = sample(r);
  model_bytes_.clear();
  for (const core::Graph& m : models) model_bytes_.push_back(core::serialize_onnx(m, false));
  round_ = r;
  sampled_ = std::set<std::string>(st.sampled.begin(), st.sampled.end());
  replied_.clear();
  answers_.clear();
  refused_.clear();
  deadline_ = t0 + to_duration(o_.round_timeout);
  open_ = true;
  cv_.wait_until(lock, deadline_, [&] { return replied_.size() >= sampled_.size(); });
  open_ = false;
  st.refused = refused_;
  return std::move(answers_);
}

void Service::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  done_ = true;
  cv_.wait_for(lock, std::chrono::seconds(3), [&] { return told_done_.size() >= clients_.size(); });
}

}  // namespace pare::federated
