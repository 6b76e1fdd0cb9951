#include "federated/server.h"

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "distill/distiller.h"
#include "distill/teacher.h"
#include "train/trainer.h"
#include "federated/wire.h"

namespace pare::federated {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {
// The aggregators by name: the fewest rows each needs for f Byzantine ones, and how it runs on
// the (already clipped) rows U.
struct Rule {
  const char* name;
  int64_t (*needs)(int64_t f);
  Aggregate (*run)(const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>& w, const at::Tensor& g0);
};

int64_t needs_one(int64_t) { return 1; }
int64_t needs_krum(int64_t f) { return 2 * f + 3; }

const Rule kRules[] = {
    {"fedavg", needs_one, [](const AggregatorOptions&, const at::Tensor& U, const std::vector<double>& w,
                             const at::Tensor&) { return fedavg(U, w); }},
    {"median", needs_one, [](const AggregatorOptions&, const at::Tensor& U, const std::vector<double>&,
                             const at::Tensor&) { return coordinate_median(U); }},
    {"trimmed-mean", needs_one,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       return trimmed_mean(U, int64_t(o.trim * double(U.size(0))));
     }},
    {"krum", needs_krum, [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&,
                            const at::Tensor&) { return krum(U, o.assume_byzantine); }},
    {"multi-krum", needs_krum,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       const int64_t n = U.size(0);
       return multi_krum(U, o.assume_byzantine, o.multi_krum_m > 0 ? std::min(o.multi_krum_m, n) : n - o.assume_byzantine);
     }},
    {"bulyan", [](int64_t f) -> int64_t { return 4 * f + 3; },
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor&) {
       return bulyan(U, o.assume_byzantine);
     }},
    {"fltrust", needs_one,
     [](const AggregatorOptions& o, const at::Tensor& U, const std::vector<double>&, const at::Tensor& g0) {
       PARE_ASSERT(g0.defined(), "FLTrust without a server update");
       // The server's own update is clipped like the clients' (FLTrust then rescales to its norm).
       const double scale = o.clip_norm > 0 ? std::min(1.0, o.clip_norm / std::max(1e-30, g0.norm().item<double>())) : 1.0;
       return fltrust(U, g0 * scale);
     }},
};

const Rule& rule_of(const std::string& name) {
  for (const Rule& r : kRules)
    if (name == r.name) return r;
  throw InputError("unknown aggregator '" + name + "'");
}
}  // namespace

const std::vector<std::string>& aggregator_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Rule& r : kRules) v.push_back(r.name);
    return v;
  }();
  return names;
}

void AggregatorOptions::validate() const {
  const auto& names = aggregator_names();
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  PARE_CHECK_OPTION(std::find(names.begin(), names.end(), name) != names.end(), "aggregator", "must be one of ",
                    list, ", got '", name, "'");
  PARE_CHECK_OPTION(assume_byzantine >= 0, "assume_byzantine", "must be >= 0, got ", assume_byzantine);
  PARE_CHECK_OPTION(trim >= 0 && trim < 0.5, "trim", "must be in [0, 0.5), got ", trim);
  PARE_CHECK_OPTION(multi_krum_m >= 0, "multi_krum_m", "must be >= 0, got ", multi_krum_m);
  PARE_CHECK_OPTION(clip_norm >= 0, "clip_norm", "must be >= 0, got ", clip_norm);
  PARE_CHECK_OPTION(bucket >= 0, "bucket", "must be >= 0 (0, 1: no bucketing), got ", bucket);
  PARE_CHECK_OPTION(!nnm || bucket <= 1, "nnm", "(nearest-neighbour mixing) and bucketing are two ways to do the same: "
                    "use one, got bucket ", bucket);
}

Aggregate aggregate(const AggregatorOptions& o, at::Tensor U, const std::vector<double>& weights, const at::Tensor& g0,
                    int64_t* clipped, uint64_t seed) {
  const Rule& rule = rule_of(o.name);
  const int64_t n_clipped = o.clip_norm > 0 ? clip_norms(U, o.clip_norm) : 0;
  if (clipped) *clipped = n_clipped;
  if (o.nnm) return rule.run(o, mix_nearest(U, o.assume_byzantine), weights, g0);
  if (o.bucket <= 1) return rule.run(o, U, weights, g0);
  const Buckets b = bucket_rows(U, o.bucket, seed);
  std::vector<double> bucket_weights;
  for (const auto& rows : b.members) {
    double w = 0;
    for (int64_t i : rows) w += weights.at(size_t(i));
    bucket_weights.push_back(w);
  }
  Aggregate a = rule.run(o, b.means, bucket_weights, g0);
  Aggregate out{a.update, {}, {}};
  for (int64_t k : a.selected) out.selected.insert(out.selected.end(), b.members[k].begin(), b.members[k].end());
  std::sort(out.selected.begin(), out.selected.end());
  if (!a.scores.empty()) {
    out.scores.resize(size_t(U.size(0)));
    for (size_t k = 0; k < b.members.size(); ++k)
      for (int64_t i : b.members[k]) out.scores[size_t(i)] = a.scores[k];
  }
  return out;
}

std::string describe(const AggregatorOptions& o) {
  std::vector<std::string> parts;
  // A rule uses f when the rows it needs depend on it (Krum, Multi-Krum, Bulyan).
  if (rule_of(o.name).needs != needs_one || o.nnm)
    parts.push_back("f = " + std::to_string(o.assume_byzantine));
  if (o.name == "trimmed-mean") parts.push_back(detail::concat("trim ", o.trim));
  if (o.clip_norm > 0) parts.push_back(detail::concat("clip norm ", o.clip_norm));
  if (o.nnm) parts.push_back("nearest-neighbour mixing");
  if (o.bucket > 1) parts.push_back("buckets of " + std::to_string(o.bucket));
  std::string s = o.name;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : " (") + parts[i];
  return parts.empty() ? s : s + ")";
}

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
  // With bucketing the rule sees ceil(n / bucket) rows, f of which may be spoilt.
  const int64_t answers = per_round > 0 ? std::min(per_round, clients) : clients, f = agg.assume_byzantine;
  const int64_t n = bucket_count(answers, agg.bucket);
  const int64_t need = std::max(rule_of(agg.name).needs(f), agg.nnm ? 2 * f + 1 : 1);
  PARE_CHECK_OPTION(n >= need, "assume_byzantine", "is too large for ", answers, " clients per round",
                    agg.bucket > 1 ? " in buckets of " + std::to_string(agg.bucket) + " (" + std::to_string(n) + " rows)" : "",
                    ": ", agg.name, agg.nnm ? " with nearest-neighbour mixing" : "", " needs n >= ", need, " for f = ", f);
}

namespace {

struct Answer {
  std::string client;
  int64_t arch = 0;
  Tensors update;
  int64_t num_samples = 0;
  double train_loss = 0;
};

json round_json(const RoundStats& r) {
  json refused = json::array();
  for (const auto& [c, why] : r.refused) refused.push_back({{"client", c}, {"reason", why}});
  json j = {{"round", r.round},     {"sampled", r.sampled}, {"answered", r.answered}, {"refused", refused},
            {"selected", r.selected}, {"scores", r.scores},  {"clipped", r.clipped},   {"skipped", r.skipped},
            {"train_loss", r.train_loss}, {"seconds", r.seconds}};
  if (!r.model_accuracy.empty()) j["model_accuracy"] = r.model_accuracy;
  if (!r.distill_kept.empty()) j["distill_kept_epoch"] = r.distill_kept;
  if (r.skipped) j["skip_reason"] = r.skip_reason;
  if (r.val_accuracy >= 0) {
    j["val_accuracy"] = r.val_accuracy;
    j["val_loss"] = r.val_loss;
  }
  return j;
}

RoundStats round_of(const json& j) {
  RoundStats r;
  r.round = json_int_at<int64_t>(j, "round");
  r.sampled = j.at("sampled").get<std::vector<std::string>>();
  r.answered = j.at("answered").get<std::vector<std::string>>();
  for (const json& x : j.at("refused")) r.refused.emplace_back(x.at("client"), x.at("reason"));
  r.selected = j.at("selected").get<std::vector<std::string>>();
  r.scores = j.at("scores").get<std::vector<double>>();
  r.clipped = json_int_at<int64_t>(j, "clipped");
  r.skipped = j.at("skipped").get<bool>();
  r.skip_reason = j.value("skip_reason", "");
  r.train_loss = j.at("train_loss").get<double>();
  r.seconds = j.at("seconds").get<double>();
  r.val_accuracy = j.value("val_accuracy", -1.0);
  r.val_loss = j.value("val_loss", -1.0);
  r.model_accuracy = j.value("model_accuracy", std::vector<double>{});
  r.distill_kept = j.value("distill_kept_epoch", std::vector<int64_t>{});
  return r;
}

}  // namespace

struct Server::Impl final : wire::Federation::Service {
  ServerOptions o;
  std::vector<core::Graph> models;  // the global model, or one per architecture (feddf)
  std::vector<Layout> layouts;
  std::vector<at::Tensor> velocity;  // per model: the server momentum's v (undefined: zero)
  ServerData data;
  std::vector<RoundStats> history;

  struct Client {
    int64_t num_samples = 0, arch = 0;
    Clock::time_point seen;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Client> clients;
  int64_t round = 0;  // the open round (0: none)
  bool open = false, done = false;
  Clock::time_point deadline;
  std::set<std::string> sampled, replied, told_done;  // replied: answered or refused this round
  std::vector<std::string> model_bytes;  // per architecture
  std::vector<Answer> answers;
  std::vector<std::pair<std::string, std::string>> refused;

  Impl(std::vector<core::Graph> g, ServerOptions opts, ServerData d) : o(std::move(opts)), models(std::move(g)), data(d) {
    for (const core::Graph& m : models) layouts.push_back(state_layout(m));
    velocity.resize(models.size());
  }

  grpc::Status Poll(grpc::ServerContext*, const wire::PollRequest* req, wire::Task* task) override;
  grpc::Status Submit(grpc::ServerContext*, const wire::Update* req, wire::UpdateReply* reply) override;

  void log(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void resume();
  void checkpoint();
  void wait_for_clients();
  std::vector<std::string> sample(int64_t r);
  RoundStats run_round(int64_t r);
  void finish_round(RoundStats& st, std::vector<Answer> got);
  void aggregate_into(RoundStats& st, const std::vector<Answer>& got, int64_t arch);
  void distill_round(RoundStats& st, const std::vector<Answer>& got, const std::vector<core::Graph>& before);
  std::string model_file(int64_t r, size_t k, const char* ext = ".onnx") const;
};

void Server::Impl::log(const char* fmt, ...) const {
  if (o.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
}

grpc::Status Server::Impl::Poll(grpc::ServerContext*, const wire::PollRequest* req, wire::Task* task) {
  if (req->client_id().empty() || req->client_id().size() > 256)
    return {grpc::StatusCode::INVALID_ARGUMENT, "client_id must have 1 to 256 characters"};
  if (req->num_samples() < 1) return {grpc::StatusCode::INVALID_ARGUMENT, "num_samples must be at least 1"};
  if (req->architecture() < 0 || req->architecture() >= int64_t(models.size()))
    return {grpc::StatusCode::INVALID_ARGUMENT, "architecture " + std::to_string(req->architecture()) +
                                                    ": the server trains " + std::to_string(models.size()) +
                                                    " model(s), 0 to " + std::to_string(models.size() - 1)};
  std::lock_guard<std::mutex> lock(mu);
  Client& c = clients[req->client_id()];
  if (c.num_samples == 0) cv.notify_all();  // a new client: wait_for_clients may be waiting
  c.num_samples = req->num_samples();
  c.arch = req->architecture();
  c.seen = Clock::now();
  task->set_wait_ms(100);
  if (done) {
    told_done.insert(req->client_id());
    cv.notify_all();
    task->set_kind(wire::Task::DONE);
    return grpc::Status::OK;
  }
  if (!open || !sampled.count(req->client_id()) || replied.count(req->client_id())) {
    task->set_kind(wire::Task::WAIT);
    return grpc::Status::OK;
  }
  task->set_kind(wire::Task::TRAIN);
  task->set_round(round);
  task->set_model(model_bytes.at(c.arch));
  task->set_local_epochs(o.local.epochs);
  task->set_batch_size(o.local.batch_size);
  task->set_lr(o.local.lr);
  task->set_momentum(o.local.momentum);
  task->set_optimizer(o.local.optimizer);
  task->set_kd_alpha(o.local.kd_alpha);
  task->set_kd_temperature(o.local.kd_temperature);
  task->set_seed(o.seed * 1000003u + uint64_t(round) * 7919u + std::hash<std::string>()(req->client_id()) % 7907u);
  task->set_deadline_s(std::chrono::duration<double>(deadline - Clock::now()).count());
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Submit(grpc::ServerContext*, const wire::Update* req, wire::UpdateReply* reply) {
  Tensors update;
  std::string why = decode_tensors(req->tensors(), &update);
  std::lock_guard<std::mutex> lock(mu);
  const std::string& id = req->client_id();
  const int64_t arch = clients.count(id) ? clients[id].arch : 0;
  if (why.empty()) why = check_update(update, layouts[arch]);
  std::string late;
  if (!open || req->round() != round)
    late = "the update is for round " + std::to_string(req->round()) + ", the open round is " +
           (open ? std::to_string(round) : std::string("none"));
  else if (!sampled.count(id))
    late = "client '" + id + "' was not sampled in round " + std::to_string(round);
  else if (replied.count(id))
    late = "client '" + id + "' already answered round " + std::to_string(round);
  if (!late.empty()) {  // not part of this round: refused without a mark in its log
    reply->set_accepted(false);
    reply->set_reason(late);
    return grpc::Status::OK;
  }
  if (clients.count(id)) clients[id].seen = Clock::now();
  replied.insert(id);
  if (why.empty() && req->num_samples() < 1) why = "num_samples must be at least 1";
  if (!why.empty()) {
    refused.emplace_back(id, why);
    reply->set_accepted(false);
    reply->set_reason(why);
    log("round %lld: refused the update of %s: %s\n", (long long)round, id.c_str(), why.c_str());
  } else {
    answers.push_back({id, arch, std::move(update), req->num_samples(), req->train_loss()});
    reply->set_accepted(true);
  }
  cv.notify_all();
  return grpc::Status::OK;
}

// The checkpoint: DIR/round-R.onnx (the global model after round R) and, with server momentum,
// DIR/round-R.velocity.npy; then DIR/server.json naming them with the round log so far; then the previous
// round's files removed. A crash between the writes leaves server.json naming files that exist.
void Server::Impl::checkpoint() {
  const int64_t r = history.empty() ? 0 : history.back().round;
  json files = json::array(), velocities = json::array();
  for (size_t k = 0; k < models.size(); ++k) {
    files.push_back(model_file(r, k));
    core::save_onnx(models[k], join_path(o.dir, files.back()));
    velocities.push_back(velocity[k].defined() ? model_file(r, k, ".velocity.npy") : "");
    if (velocity[k].defined()) core::save_npy(velocity[k], join_path(o.dir, velocities.back()));
  }
  json rounds = json::array();
  std::string lines;
  for (const RoundStats& h : history) {
    rounds.push_back(round_json(h));
    lines += rounds.back().dump() + "\n";
  }
  const json state = {{"format", "pare.federated.server/1"}, {"round", r},          {"models", files},
                      {"velocities", velocities},            {"rounds", rounds}};
  write_file_atomic(join_path(o.dir, "server.json"), state.dump(1) + "\n");
  write_file_atomic(join_path(o.dir, "rounds.jsonl"), lines);
  for (size_t k = 0; r > 0 && k < models.size(); ++k)
    for (const char* ext : {".onnx", ".velocity.npy"}) std::remove(join_path(o.dir, model_file(r - 1, k, ext)).c_str());
}

// round-R.onnx for the one model, round-R-K.onnx for each of several (`ext`: the file's ending).
std::string Server::Impl::model_file(int64_t r, size_t k, const char* ext) const {
  return "round-" + std::to_string(r) + (models.size() > 1 ? "-" + std::to_string(k) : std::string()) + ext;
}

void Server::Impl::resume() {
  const std::string path = join_path(o.dir, "server.json");
  if (!file_exists(path)) return;
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw InputError(path + ": not a server state (" + e.what() + "); remove the folder to start over");
  }
  PARE_CHECK(j.is_object() && j.value("format", "") == "pare.federated.server/1", path,
             ": not a pare federate server state; remove the folder to start over");
  try {
    for (const json& r : j.at("rounds")) history.push_back(round_of(r));
  } catch (const json::exception& e) {
    throw InputError(path + ": malformed round log (" + e.what() + ")");
  }
  std::vector<std::string> files, vs;
  try {
    files = j.value("models", std::vector<std::string>{});
    vs = j.value("velocities", std::vector<std::string>(files.size()));
  } catch (const json::exception& e) {
    throw InputError(path + ": malformed model list (" + e.what() + "); remove the folder to start over");
  }
  PARE_CHECK(files.size() == models.size(), path, ": the checkpoint holds ", files.size(), " model(s), this run has ",
             models.size(), "; remove the folder to start over");
  for (size_t k = 0; k < files.size(); ++k) {
    core::Graph g = core::load_onnx(join_path(o.dir, files[k]));
    const Layout l = state_layout(g);
    PARE_CHECK(l.names == layouts[k].names && l.shapes == layouts[k].shapes, path, ": the checkpointed model ",
               files[k], " is not the architecture of the model given; remove the folder to start over");
    models[k] = std::move(g);
  }
  PARE_CHECK(vs.size() == models.size(), path, ": the checkpoint holds ", vs.size(), " velocities for ", models.size(),
             " model(s); remove the folder to start over");
  for (size_t k = 0; k < vs.size(); ++k) {
    if (vs[k].empty()) continue;
    at::Tensor v = core::load_npy(join_path(o.dir, vs[k]));
    PARE_CHECK(v.dim() == 1 && v.size(0) == layouts[k].size && v.scalar_type() == at::kFloat, path, ": the velocity ",
               vs[k], " is not a float32 vector of the model's ", layouts[k].size, " values; remove the folder to start over");
    velocity[k] = v;
  }
  log("resuming from %s: %lld of %lld rounds done\n", path.c_str(), (long long)history.size(), (long long)o.rounds);
}

void Server::Impl::wait_for_clients() {
  std::unique_lock<std::mutex> lock(mu);
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.join_timeout));
  cv.wait_until(lock, until, [&] { return int64_t(clients.size()) >= o.clients; });
  const int64_t have = clients.size();
  if (have < o.clients && have < o.min_clients)
    throw Error("pare federate server: " + std::to_string(have) + " of " + std::to_string(o.clients) +
                " clients joined within " + std::to_string(int(o.join_timeout)) + " s (minimum " +
                std::to_string(o.min_clients) + ")");
  if (have < o.clients)
    log("%lld of %lld clients joined within %.0f s: going on with them\n", (long long)have, (long long)o.clients,
        o.join_timeout);
}

// The clients heard from within the last round timeout (others are taken for dead), sampled
// without replacement from the round's seed.
std::vector<std::string> Server::Impl::sample(int64_t r) {
  std::vector<std::string> live;
  const auto now = Clock::now();
  const auto window = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.round_timeout));
  for (const auto& [id, c] : clients)
    if (now - c.seen <= window) live.push_back(id);
  std::mt19937_64 rng(o.seed * 6364136223846793005ull + uint64_t(r));
  std::shuffle(live.begin(), live.end(), rng);
  if (o.per_round > 0 && int64_t(live.size()) > o.per_round) live.resize(o.per_round);
  std::sort(live.begin(), live.end());
  return live;
}

RoundStats Server::Impl::run_round(int64_t r) {
  const auto t0 = Clock::now();
  RoundStats st;
  st.round = r;
  std::vector<Answer> got;
  {
    std::unique_lock<std::mutex> lock(mu);
    st.sampled = sample(r);
    model_bytes.clear();
    for (const core::Graph& m : models) model_bytes.push_back(core::serialize_onnx(m, false));
    round = r;
    sampled = std::set<std::string>(st.sampled.begin(), st.sampled.end());
    replied.clear();
    answers.clear();
    refused.clear();
    deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.round_timeout));
    open = true;
    cv.wait_until(lock, deadline, [&] { return replied.size() >= sampled.size(); });
    open = false;
    got = std::move(answers);
    st.refused = refused;
  }
  std::sort(got.begin(), got.end(), [](const Answer& a, const Answer& b) { return a.client < b.client; });
  for (const Answer& a : got) st.answered.push_back(a.client);
  finish_round(st, std::move(got));
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

// Aggregates the answers of architecture `arch` into its model (the model is kept when the rule
// cannot run on them: the round is then marked skipped, with the reason).
void Server::Impl::aggregate_into(RoundStats& st, const std::vector<Answer>& got, int64_t arch) {
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
    g0 = flatten(train_local(models[arch], layouts[arch], *data.root, how, o.seed + uint64_t(st.round)).update,
                 layouts[arch]);
  }
  try {
    int64_t clipped = 0;
    Aggregate agg = aggregate(o.agg, at::stack(rows), weights, g0, &clipped, o.seed + uint64_t(st.round));
    st.clipped += clipped;
    for (int64_t i : agg.selected) st.selected.push_back(who[i]->client);
    st.scores.insert(st.scores.end(), agg.scores.begin(), agg.scores.end());
    at::Tensor step = agg.update;
    if (o.server_momentum > 0) {
      at::Tensor& v = velocity[size_t(arch)];
      v = v.defined() ? v * o.server_momentum + step : step.clone();
      step = v;
    }
    apply_update(models[arch], step, layouts[arch], o.server_lr);
  } catch (const InputError& e) {  // too few answers for the rule's f
    st.skipped = true;
    st.skip_reason += (st.skip_reason.empty() ? "" : "; ") + std::string(e.what());
    log("round %lld: model %lld: %s: model kept\n", (long long)st.round, (long long)arch, e.what());
  }
}

// FedDF: every model distilled from the ensemble of the round's client models (each client's
// round model plus its update) on the unlabeled distillation set. The ensemble's own argmax stands
// in for the labels the Trainer counts accuracy with; alpha 1 never trains on them. With
// distill_val, the last share of the set is held out and each model keeps the epoch (0 being the
// aggregate itself) that agrees best with the ensemble there.
void Server::Impl::distill_round(RoundStats& st, const std::vector<Answer>& got, const std::vector<core::Graph>& before) {
  std::vector<std::unique_ptr<distill::Teacher>> members;
  for (const Answer& a : got) {
    core::Graph g = before[a.arch];
    apply_update(g, flatten(a.update, layouts[a.arch]), layouts[a.arch]);
    members.push_back(std::make_unique<engine::TorchEngine>(std::move(g), "client " + a.client));
  }
  distill::EnsembleTeacher ensemble(std::move(members), {});
  using C = distill::EnsembleTeacher::Combine;
  ensemble.set_combine(o.ensemble == "median" ? C::kMedian : o.ensemble == "trimmed-mean" ? C::kTrimmedMean : C::kMean,
                       o.agg.trim);
  core::TensorDataset set = *data.distill;
  std::vector<at::Tensor> labels;
  for (int64_t i = 0; i < set.size(); i += 512)
    labels.push_back(ensemble.logits(set.x.narrow(0, i, std::min<int64_t>(512, set.size() - i))).argmax(1));
  set.y = at::cat(labels);
  const int64_t held = std::min<int64_t>(set.size() - 1, std::llround(o.distill_val * double(set.size())));
  core::TensorDataset val{set.x.narrow(0, set.size() - held, held), set.y.narrow(0, set.size() - held, held),
                          "the held-out distillation inputs"};
  set = {set.x.narrow(0, 0, set.size() - held), set.y.narrow(0, 0, set.size() - held), set.name};
  for (size_t k = 0; k < models.size(); ++k) {
    core::Module student(models[k]);
    auto opts = train::TrainerOptions()
                    .epochs(o.distill_epochs)
                    .batch_size(o.distill_batch)
                    .lr(o.distill_lr)
                    .optimizer("adam")
                    .seed(o.seed * 7 + uint64_t(st.round) * 131 + k)
                    .progress(false);
    // With a hold-out, each model keeps the epoch agreeing best with the ensemble there; epoch 0 is
    // the aggregate, models[k] as it stands.
    double best = held > 0 ? train::evaluate(student, val).accuracy : 0;
    int64_t kept = 0;
    distill::distill(student, ensemble, distill::DistillLossOptions().temperature(o.distill_temperature).alpha(1.0),
                     opts, set, held > 0 ? &val : nullptr, [&](train::Trainer& t) {
                       t.on_epoch([&](const train::EpochStats& es) {
                         if (held == 0 || es.val_accuracy <= best) return;
                         best = es.val_accuracy;
                         kept = es.epoch;
                         models[k] = student.to_graph();
                       });
                     });
    if (held == 0)
      models[k] = student.to_graph();
    else
      st.distill_kept.push_back(kept);
  }
}

// Aggregates the answers into the model(s) (or skips the round), distils (feddf) and evaluates.
void Server::Impl::finish_round(RoundStats& st, std::vector<Answer> got) {
  const int64_t n = got.size();
  if (n < o.min_clients || n == 0) {
    st.skipped = true;
    st.skip_reason = std::to_string(n) + " answers, fewer than min_clients = " + std::to_string(o.min_clients);
    log("round %lld: %lld of %zu sampled clients answered (minimum %lld): round skipped, model kept\n",
        (long long)st.round, (long long)n, st.sampled.size(), (long long)o.min_clients);
  } else {
    for (const Answer& a : got) st.train_loss += a.train_loss / double(n);
    const std::vector<core::Graph> before = models;
    for (size_t k = 0; k < models.size(); ++k) aggregate_into(st, got, int64_t(k));
    if (o.mode == "feddf") distill_round(st, got, before);
  }
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

Server::Server(std::vector<core::Graph> models, ServerOptions opts, ServerData data)
    : impl_(std::make_unique<Impl>(std::move(models), std::move(opts), data)) {
  const Impl& s = *impl_;
  s.o.validate();
  PARE_CHECK_OPTION(s.o.agg.name != "fltrust" || data.root, "root_data", "is needed by the fltrust aggregator");
  PARE_CHECK_OPTION(!s.models.empty(), "model", "is needed");
  PARE_CHECK_OPTION(s.o.mode == "feddf" || s.models.size() == 1, "model",
                    "is given ", s.models.size(), " times: fedavg trains one model (several architectures: mode feddf)");
  PARE_CHECK_OPTION(s.o.mode != "feddf" || data.distill, "distill_data", "is needed by mode feddf (unlabeled inputs)");
  // Every model takes every data set the server holds: a set of the wrong shape is said now, not
  // after the first round's training.
  for (size_t k = 0; k < s.models.size(); ++k) {
    core::Module m(s.models[k], core::Module::Use::kFrozen);
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
  s.resume();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(s.o.address, server_credentials(s.o.tls), &port);
  builder.SetMaxReceiveMessageSize(int(s.o.max_message_mb << 20));
  builder.SetMaxSendMessageSize(int(s.o.max_message_mb << 20));
  builder.RegisterService(&s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) throw InputError("pare federate server: cannot listen on '" + s.o.address + "'");
  const char* security = !s.o.tls.enabled() ? "plaintext" : s.o.tls.ca.empty() ? "TLS" : "mutual TLS";
  s.log("listening on port %d (%s); %lld rounds, aggregator %s\n", port, security, (long long)s.o.rounds,
        describe(s.o.agg).c_str());
  if (!s.o.port_file.empty()) write_file_atomic(s.o.port_file, std::to_string(port) + "\n");
  if (s.history.empty()) s.checkpoint();  // round 0: the initial model
  if (int64_t(s.history.size()) < s.o.rounds) s.wait_for_clients();
  for (int64_t r = s.history.size() + 1; r <= s.o.rounds; ++r) {
    s.history.push_back(s.run_round(r));
    const RoundStats& st = s.history.back();
    s.log("round %lld/%lld: %zu of %zu answered, %zu refused", (long long)r, (long long)s.o.rounds, st.answered.size(),
          st.sampled.size(), st.refused.size());
    if (st.val_accuracy >= 0) s.log(", val acc %.2f%% loss %.4f", st.val_accuracy * 100, st.val_loss);
    for (size_t k = 0; k < st.model_accuracy.size(); ++k)
      s.log("%s%.2f%%", k == 0 ? " (each model: " : ", ", st.model_accuracy[k] * 100);
    if (!st.model_accuracy.empty()) s.log(")");
    s.log(", %.1f s\n", st.seconds);
    s.checkpoint();
  }
  for (size_t k = 0; k < s.models.size(); ++k)
    core::save_onnx(s.models[k], join_path(s.o.dir, k == 0 ? std::string("model.onnx") : "model-" + std::to_string(k) + ".onnx"));
  {  // tell the clients: each poll gets DONE; wait briefly until every known client heard it
    std::unique_lock<std::mutex> lock(s.mu);
    s.done = true;
    s.cv.wait_for(lock, std::chrono::seconds(3), [&] { return s.told_done.size() >= s.clients.size(); });
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return s.history;
}

}  // namespace pare::federated
