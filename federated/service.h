// The server's gRPC side (federation.proto): clients poll for work and submit updates. The
// service keeps who is alive, samples the clients of each round among them, hands the sampled
// ones the round's model with the local training to run, and checks every update against the
// model's layout before it counts: an update that does not fit is refused, and the reason goes
// into the round log. Internal to federated/ (the Server composes it with the round state).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "federated/round_state.h"
#include "federated/server.h"
#include "federated/update.h"
#include "federation.grpc.pb.h"

namespace pare::federated {

class Service final : public wire::Federation::Service {
 public:
  using Clock = std::chrono::steady_clock;

  /// `o` and `layouts` (every model's, which updates must fit) are held by reference and must
  /// outlive the service.
  Service(const ServerOptions& o, const std::vector<Layout>& layouts);

  grpc::Status Poll(grpc::ServerContext*, const wire::PollRequest* req, wire::Task* task) override;
  grpc::Status Submit(grpc::ServerContext*, const wire::Update* req, wire::UpdateReply* reply) override;

  /// Listens on o.address (with o.tls) and serves; stores the port. Throws InputError when it cannot.
  std::unique_ptr<grpc::Server> listen(int* port);

  /// Waits up to join_timeout for `clients` clients to poll; goes on with fewer when at least
  /// min_clients came, throws Error otherwise.
  void wait_for_clients();

  /// Runs the gRPC part of round `r`: samples its clients, opens it with `models` until every
  /// sampled client answered or t0 + round_timeout passed, and closes it. Fills st.sampled and
  /// st.refused; returns the accepted updates (in no order).
  std::vector<Answer> collect(int64_t r, const std::vector<core::Graph>& models, Clock::time_point t0, RoundStats& st);

  /// From now on every poll gets DONE; waits up to 3 s until every known client heard it.
  void finish();

  /// printf to stderr, unless the options say quiet.
  void log(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

 private:
  struct Client {
    int64_t num_samples = 0, arch = 0;
    Clock::time_point seen;
  };
  std::vector<std::string> sample(int64_t r);
  void fill_task(const std::string& id, const Client& c, wire::Task* task) const;

  const ServerOptions& o_;
  const std::vector<Layout>& layouts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Client> clients_;
  int64_t round_ = 0;  // the open round (0: none)
  bool open_ = false, done_ = false;
  Clock::time_point deadline_;
  std::set<std::string> sampled_, replied_, told_done_;  // replied: answered or refused this round
  std::vector<std::string> model_bytes_;  // per architecture
  std::vector<Answer> answers_;
  std::vector<std::pair<std::string, std::string>> refused_;
};

}  // namespace pare::federated
