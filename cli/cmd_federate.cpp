// pare federate server | client | simulate: federated training over gRPC (federated/).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/process.h"
#include "core/tensor_io.h"
#include "federated/client.h"
#include "federated/server.h"
#include "federated/split.h"

namespace pare::cli {

namespace {

// What server and simulate share: the model, the server's data and every round option.
struct ServerFlags {
  std::vector<std::string> models;
  std::string val_data, val_split = "test", root_data, distill_data;
  int64_t root_samples = 1000;
  int threads = 0;
  bool json = false;
  federated::ServerOptions server;

  void add(CLI::App* cmd, bool simulate) {
    auto& s = server;
    cmd->add_option("--model,-m", models,
                    "The global model: zoo spec (mlp:784-100-10, lenet5, cnn, ...) or ONNX file; with --mode feddf "
                    "repeat it, one per architecture the clients train")
        ->required();
    cmd->add_option("--mode", s.mode, "fedavg (one model) or feddf (one per architecture, fused by distillation)")
        ->capture_default_str();
    cmd->add_option("--rounds", s.rounds, "Federated rounds")->capture_default_str();
    if (!simulate) {
      cmd->add_option("--clients", s.clients, "Clients to wait for before the first round")->capture_default_str();
      cmd->add_option("--val-data", val_data, "Data set evaluated after every round (fashion-mnist[:DIR] or npy:X,Y)");
      cmd->add_option("--root-data", root_data, "FLTrust: the server's clean root data set (its train split)");
      cmd->add_option("--distill-data", distill_data, "feddf: the server's unlabeled inputs (npy:X.npy, or a data "
                      "set whose labels are not read; its train split)")->group("FedDF");
    }
    const std::string d = "FedDF";
    cmd->add_option("--ensemble", s.ensemble, "How the client models' logits combine: mean, median or trimmed-mean "
                    "(--trim)")->capture_default_str()->group(d);
    cmd->add_option("--distill-epochs", s.distill_epochs, "Epochs over the distillation set per round")
        ->capture_default_str()->group(d);
    cmd->add_option("--distill-lr", s.distill_lr, "Adam's learning rate")->capture_default_str()->group(d);
    cmd->add_option("--distill-temperature", s.distill_temperature, "KD temperature")->capture_default_str()->group(d);
    cmd->add_option("--distill-batch", s.distill_batch, "Batch size")->capture_default_str()->group(d);
    cmd->add_option("--distill-val", s.distill_val, "Share of the distillation set held out: each round every model "
                    "keeps the epoch (0: the aggregate) agreeing best with the ensemble there (0: none, keep the last)")
        ->capture_default_str()->group(d);
    cmd->add_option("--val-split", val_split, "Split of the validation data")->capture_default_str();
    cmd->add_option("--root-samples", root_samples, "FLTrust: samples of the root data set used")->capture_default_str();
    cmd->add_option("--per-round", s.per_round, "Clients sampled per round (0: every live client)")->capture_default_str();
    cmd->add_option("--min-clients", s.min_clients, "Fewer answers than this skip the round (the model is kept)")
        ->capture_default_str();
    cmd->add_option("--round-timeout", s.round_timeout, "Seconds a round waits for its clients")->capture_default_str();
    cmd->add_option("--join-timeout", s.join_timeout, "Seconds to wait for the clients before the first round")
        ->capture_default_str();
    const std::string g = "Aggregation";
    std::string rules;
    for (const std::string& n : federated::aggregator_names()) rules += (rules.empty() ? "" : ", ") + n;
    cmd->add_option("--aggregator", s.agg.name, "One of " + rules)
        ->capture_default_str()->group(g);
    cmd->add_option("--assume-byzantine", s.agg.assume_byzantine, "f that krum, multi-krum, bulyan and --nnm assume per round")
        ->capture_default_str()->group(g);
    cmd->add_option("--trim", s.agg.trim, "Trimmed mean: fraction cut at each end")->capture_default_str()->group(g);
    cmd->add_option("--multi-krum-m", s.agg.multi_krum_m, "Multi-Krum: updates averaged (0: n - f)")->group(g);
    cmd->add_option("--clip-norm", s.agg.clip_norm, "Clip each update's L2 norm to this first (0: no clipping)")
        ->group(g);
    cmd->add_option("--bucket", s.agg.bucket, "Then average random groups of this many updates and aggregate the "
                    "group means (Karimireddy et al. 2022; f stays, n becomes ceil(n / bucket); 0: no bucketing)")
        ->group(g);
    cmd->add_flag("--nnm", s.agg.nnm, "Or: replace each update by the mean of its n - f nearest updates, f = "
                  "--assume-byzantine (nearest-neighbour mixing, Allouah et al. 2023), then aggregate; for median, "
                  "trimmed-mean, krum, multi-krum, bulyan (it costs fltrust accuracy)")
        ->group(g);
    cmd->add_option("--server-momentum", s.server_momentum, "Server momentum (FedAvgM): v = this * v + aggregate; "
                    "the model moves by server-lr * v (0: the aggregate alone)")->capture_default_str()->group(g);
    cmd->add_option("--server-lr", s.server_lr, "The server's step size on v")->capture_default_str()->group(g);
    const std::string l = "Local training (sent to the clients)";
    cmd->add_option("--local-epochs", s.local.epochs, "Epochs per round")->capture_default_str()->group(l);
    cmd->add_option("--batch-size,-b", s.local.batch_size, "Batch size")->capture_default_str()->group(l);
    cmd->add_option("--lr", s.local.lr, "Learning rate")->capture_default_str()->group(l);
    cmd->add_option("--optimizer", s.local.optimizer, "sgd, adam or adamw")->capture_default_str()->group(l);
    cmd->add_option("--momentum", s.local.momentum, "SGD momentum")->capture_default_str()->group(l);
    cmd->add_option("--local-kd-alpha", s.local.kd_alpha, "Distil from the round's global model as well: the KD "
                    "term's weight (0: cross entropy alone)")->capture_default_str()->group(l);
    cmd->add_option("--local-kd-temperature", s.local.kd_temperature, "Its temperature")->capture_default_str()->group(l);
    cmd->add_option("--seed", s.seed, "Seed of the model, the sampling and the local runs")->capture_default_str();
    cmd->add_option("--max-message-mb", s.max_message_mb, "Largest gRPC message, MiB")->capture_default_str();
    cmd->add_option("--threads", threads, "Intra-op threads (0: libtorch's default)");
    cmd->add_flag("--quiet,-q", s.quiet, "No progress output");
    cmd->add_flag("--json", json, "Print a JSON summary on stdout");
  }

  // The first `n` samples of `spec`'s train split after a seeded shuffle.
  static core::TensorDataset root_set(const std::string& spec, int64_t n, uint64_t seed) {
    core::TensorDataset ds = core::load_dataset(spec, "train");
    PARE_CHECK_OPTION(n >= 1 && n <= ds.size(), "root_samples", "must be in [1, ", ds.size(), "] for ", spec, ", got ",
                      n);
    const at::Tensor idx = at::randperm(ds.size(), at::make_generator<at::CPUGeneratorImpl>(seed)).narrow(0, 0, n);
    ds.x = ds.x.index_select(0, idx);
    ds.y = ds.y.index_select(0, idx);
    ds.name += " (root set)";
    return ds;
  }

  // Runs the server; prints the summary.
  void run() const {
    train::set_threads(threads);
    std::vector<core::Graph> graphs;
    for (size_t k = 0; k < models.size(); ++k) graphs.push_back(core::load_model(models[k], server.seed + k));
    core::TensorDataset val, root, dis;
    if (!val_data.empty()) val = core::load_dataset(val_data, val_split);
    if (!root_data.empty()) root = root_set(root_data, root_samples, server.seed + 17);
    if (!distill_data.empty()) dis = core::load_dataset(distill_data, "train");
    federated::ServerData d{val_data.empty() ? nullptr : &val, root_data.empty() ? nullptr : &root,
                            distill_data.empty() ? nullptr : &dis};
    federated::Server srv(std::move(graphs), server, d);
    const auto rounds = srv.run();
    const auto& last = rounds.back();
    const std::string out = join_path(server.dir, "model.onnx");
    if (json) {
      nlohmann::json j = {{"model", out}, {"rounds", rounds.size()}, {"aggregator", server.agg.name},
                          {"rounds_log", join_path(server.dir, "rounds.jsonl")}};
      if (last.val_accuracy >= 0) j["val_accuracy"] = last.val_accuracy;
      std::cout << j.dump() << "\n";
    } else if (!server.quiet) {
      std::fprintf(stderr, "wrote %s", out.c_str());
      if (last.val_accuracy >= 0) std::fprintf(stderr, " (val acc %.2f%%)", last.val_accuracy * 100);
      std::fprintf(stderr, "; round log %s\n", join_path(server.dir, "rounds.jsonl").c_str());
    }
  }
};

// What a Byzantine client does (client and simulate).
struct AttackFlags {
  std::string attack = "none";
  void add(CLI::App* cmd, federated::AttackOptions& ao) {
    const std::string g = "Attack (experiments)";
    cmd->add_option("--attack", attack, "none, sign-flip, scaling, gaussian, label-flip or alie")
        ->capture_default_str()->group(g);
    cmd->add_option("--attack-scale", ao.scale, "scaling: the factor")->capture_default_str()->group(g);
    cmd->add_option("--attack-flip", ao.flip, "sign-flip: the reversed update's factor")->capture_default_str()->group(g);
    cmd->add_option("--attack-sigma", ao.sigma, "gaussian: the noise's standard deviation")->capture_default_str()->group(g);
  }
};

void add_server(CLI::App* fed, Action& action) {
  auto* cmd = fed->add_subcommand("server", "Run the rounds: sample clients, aggregate their updates, checkpoint");
  auto o = std::make_shared<ServerFlags>();
  o->add(cmd, false);
  cmd->add_option("--dir", o->server.dir, "State folder: checkpoint (a killed server resumes), rounds.jsonl, model.onnx")
      ->required();
  cmd->add_option("--listen", o->server.address, "host:port to listen on (port 0: any free port)")->capture_default_str();
  cmd->add_option("--port-file", o->server.port_file, "Write the port here once listening");
  const std::string t = "TLS (none: plaintext, for a trusted network)";
  cmd->add_option("--tls-cert", o->server.tls.cert, "PEM: the server's certificate chain")->group(t);
  cmd->add_option("--tls-key", o->server.tls.key, "PEM: its private key")->group(t);
  cmd->add_option("--tls-client-ca", o->server.tls.ca, "PEM: accept only clients with a certificate of this CA (mutual TLS)")
      ->group(t);
  cmd->callback([&action, o] { action = [o] { o->run(); }; });
}

// The client's data: its own data set, or one part of a split of it (experiments).
struct ClientData {
  std::string data, partition;
  int64_t partitions = 0, index = -1;
  uint64_t seed = 0;

  void add(CLI::App* cmd) {
    cmd->add_option("--data,-d", data, "The client's training data: fashion-mnist[:DIR] or npy:X.npy,Y.npy (train split)")
        ->required();
    cmd->add_option("--partition", partition, "Train on one part of the data only: iid, dirichlet:ALPHA or shards:K");
    cmd->add_option("--partitions", partitions, "--partition: the number of parts");
    cmd->add_option("--partition-index", index, "--partition: this client's part (0-based)");
    cmd->add_option("--partition-seed", seed, "--partition: the split's seed (the same on every client)")
        ->capture_default_str();
  }

  core::TensorDataset load() const {
    core::TensorDataset ds = core::load_dataset(data, "train");
    if (partition.empty()) return ds;
    PARE_CHECK_OPTION(partitions >= 1, "partitions", "must be at least 1 with --partition, got ", partitions);
    PARE_CHECK_OPTION(index >= 0 && index < partitions, "partition_index", "must be in [0, ", partitions, "), got ",
                      index);
    core::require_labels(ds, "a partition of the data");
    const federated::Split split = federated::split_by_spec(partition, ds.y, partitions, seed);
    const at::Tensor idx = at::tensor(split[index], at::kLong);
    ds.x = ds.x.index_select(0, idx);
    ds.y = ds.y.index_select(0, idx);
    ds.name += " (part " + std::to_string(index) + " of " + std::to_string(partitions) + ", " + partition + ")";
    return ds;
  }
};

void add_client(CLI::App* fed, Action& action) {
  auto* cmd = fed->add_subcommand("client", "Train on this client's data in the rounds the server samples it for");
  struct Opts {
    federated::ClientOptions client;
    ClientData data;
    AttackFlags attack;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--server", o->client.server, "The server's host:port")->required();
  cmd->add_option("--id", o->client.id, "This client's name (stable over restarts)")->required();
  cmd->add_option("--architecture", o->client.architecture,
                  "feddf: which of the server's models (0-based, in its --model order) this client trains")
      ->capture_default_str();
  o->data.add(cmd);
  cmd->add_option("--server-timeout", o->client.server_timeout, "Seconds without the server before giving up")
      ->capture_default_str();
  cmd->add_option("--max-message-mb", o->client.max_message_mb, "Largest gRPC message, MiB")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--quiet,-q", o->client.quiet, "No progress output");
  const std::string t = "TLS (none: plaintext, for a trusted network)";
  cmd->add_option("--tls-ca", o->client.tls.ca, "PEM: the CA that signed the server's certificate")->group(t);
  cmd->add_option("--tls-cert", o->client.tls.cert, "PEM: this client's certificate chain (mutual TLS)")->group(t);
  cmd->add_option("--tls-key", o->client.tls.key, "PEM: its private key")->group(t);
  cmd->add_option("--tls-server-name", o->client.tls.server_name,
                  "The name the server's certificate carries (default: the host of --server)")
      ->group(t);
  o->attack.add(cmd, o->client.attack_opts);
  cmd->add_option("--attack-seed", o->client.attack_opts.seed, "gaussian: the noise's seed")->group("Attack (experiments)");
  cmd->add_option("--collude-dir", o->client.collude_dir, "alie: the folder the attackers share")
      ->group("Attack (experiments)");
  cmd->add_option("--colluders", o->client.colluders, "alie: the number of attackers")->group("Attack (experiments)");
  cmd->add_option("--round-clients", o->client.round_clients, "alie: the clients per round")
      ->group("Attack (experiments)");
  cmd->callback([&action, o] {
    action = [o] {
      train::set_threads(o->threads);
      o->client.attack = federated::parse_attack(o->attack.attack);
      core::TensorDataset ds = o->data.load();
      if (!o->client.quiet)
        std::fprintf(stderr, "client %s: %lld samples of %s, server %s (%s), model %lld\n", o->client.id.c_str(),
                     (long long)ds.size(), ds.name.c_str(), o->client.server.c_str(),
                     o->client.tls.enabled() ? "TLS" : "plaintext", (long long)o->client.architecture);
      const federated::ClientStats st = federated::run_client(o->client, std::move(ds));
      if (!o->client.quiet)
        std::fprintf(stderr, "client %s: done, trained %lld rounds (%lld updates refused)\n", o->client.id.c_str(),
                     (long long)st.rounds_trained, (long long)st.refused);
    };
  });
}

// simulate: one server and N clients as processes of this machine.
struct Simulation {
  ServerFlags flags;
  AttackFlags attack;
  federated::AttackOptions attack_opts;
  std::string data, partition = "dirichlet:0.5", out;
  int64_t clients = 10, byzantine = 0, train_samples = 0, distill_samples = 5000;

  static std::string pare() { return core::self_executable("pare federate simulate"); }

  // Starts `args` with stdout and stderr into `log` ("": stdout to the inherited stderr, since the
  // server's JSON summary is not simulate's); it dies with this process.
  static pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
    const int fd = log.empty() ? 2 : ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("pare federate simulate: cannot write " + log + ": " + std::strerror(errno));
    const pid_t pid = core::spawn_child(args, "pare federate simulate", [&] {
      ::dup2(fd, 1);
      if (fd != 2) ::dup2(fd, 2);
    });
    if (fd != 2) ::close(fd);
    return pid;
  }

  // Writes client k's part of the training set as DIR/data/client-K.{x,y}.npy, and for feddf the
  // server's distillation inputs (held out from the clients' data) as DIR/data/server-distill.x.npy.
  std::vector<std::string> write_parts() const {
    core::TensorDataset ds = core::load_dataset(data, "train");
    core::require_labels(ds, "federated simulation");
    const uint64_t seed = flags.server.seed;
    const bool feddf = flags.server.mode == "feddf";
    const int64_t keep = train_samples > 0 ? std::min(train_samples, ds.size()) : ds.size();
    PARE_CHECK_OPTION(!feddf || (distill_samples >= 1 && distill_samples < keep), "distill_samples", "must be in [1, ",
                      keep, ") with --mode feddf, got ", distill_samples);
    const int64_t held = feddf ? distill_samples : 0;
    const at::Tensor perm = at::randperm(ds.size(), at::make_generator<at::CPUGeneratorImpl>(seed + 1));
    const at::Tensor server_x = ds.x.index_select(0, perm.narrow(0, keep - held, held));
    if (held > 0 || keep < ds.size()) {
      const at::Tensor idx = perm.narrow(0, 0, keep - held);
      ds.x = ds.x.index_select(0, idx);
      ds.y = ds.y.index_select(0, idx);
    }
    const federated::Split split = federated::split_by_spec(partition, ds.y, clients, seed);
    const std::string dir = join_path(out, "data");
    make_dirs(dir);
    if (feddf) core::save_npy(server_x, join_path(dir, "server-distill.x.npy"));
    std::vector<std::string> specs;
    for (int64_t k = 0; k < clients; ++k) {
      const at::Tensor idx = at::tensor(split[k], at::kLong);
      const std::string stem = join_path(dir, client_id(k));
      core::save_npy(ds.x.index_select(0, idx), stem + ".x.npy");
      core::save_npy(ds.y.index_select(0, idx), stem + ".y.npy");
      specs.push_back("npy:" + stem + ".x.npy," + stem + ".y.npy");
    }
    return specs;
  }

  std::string client_id(int64_t k) const {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "client-%02lld", (long long)k);
    return buf;
  }

  std::vector<std::string> server_args(const std::string& port_file) const {
    const auto& s = flags.server;
    std::vector<std::string> a = {pare(), "federate", "server", "--dir", join_path(out, "server"),
                                  "--listen", "127.0.0.1:0", "--port-file", port_file, "--clients", std::to_string(clients),
                                  "--val-data", data, "--val-split", flags.val_split, "--rounds", std::to_string(s.rounds),
                                  "--per-round", std::to_string(s.per_round), "--min-clients", std::to_string(s.min_clients),
                                  "--round-timeout", std::to_string(s.round_timeout), "--join-timeout",
                                  std::to_string(s.join_timeout), "--aggregator", s.agg.name, "--assume-byzantine",
                                  std::to_string(s.agg.assume_byzantine), "--trim", std::to_string(s.agg.trim),
                                  "--multi-krum-m", std::to_string(s.agg.multi_krum_m), "--clip-norm",
                                  std::to_string(s.agg.clip_norm), "--bucket", std::to_string(s.agg.bucket),
                                  "--server-momentum", std::to_string(s.server_momentum), "--server-lr",
                                  std::to_string(s.server_lr),
                                  "--local-epochs", std::to_string(s.local.epochs),
                                  "--batch-size", std::to_string(s.local.batch_size), "--lr", std::to_string(s.local.lr),
                                  "--optimizer", s.local.optimizer, "--momentum", std::to_string(s.local.momentum),
                                  "--local-kd-alpha", std::to_string(s.local.kd_alpha), "--local-kd-temperature",
                                  std::to_string(s.local.kd_temperature),
                                  "--seed", std::to_string(s.seed), "--max-message-mb", std::to_string(s.max_message_mb),
                                  "--threads", std::to_string(flags.threads > 0 ? flags.threads : 2)};
    for (const std::string& m : flags.models)
      for (const std::string& x : {std::string("--model"), m}) a.push_back(x);
    for (const std::string& x : {std::string("--mode"), s.mode, std::string("--ensemble"), s.ensemble,
                                 std::string("--distill-epochs"), std::to_string(s.distill_epochs), std::string("--distill-lr"),
                                 std::to_string(s.distill_lr), std::string("--distill-temperature"),
                                 std::to_string(s.distill_temperature), std::string("--distill-batch"),
                                 std::to_string(s.distill_batch), std::string("--distill-val"),
                                 std::to_string(s.distill_val)})
      a.push_back(x);
    if (s.mode == "feddf")
      for (const std::string& x : {std::string("--distill-data"), "npy:" + join_path(out, "data/server-distill.x.npy")})
        a.push_back(x);
    if (s.agg.nnm) a.push_back("--nnm");
    if (s.agg.name == "fltrust")
      for (const std::string& x : {std::string("--root-data"), data, std::string("--root-samples"), std::to_string(flags.root_samples)})
        a.push_back(x);
    if (s.quiet) a.push_back("--quiet");
    return a;
  }

  std::vector<std::string> client_args(int64_t k, const std::string& part, int port) const {
    std::vector<std::string> a = {pare(), "federate", "client", "--server", "127.0.0.1:" + std::to_string(port), "--id",
                                  client_id(k), "--data", part, "--threads", "1", "--architecture",
                                  std::to_string(k % int64_t(flags.models.size())), "--server-timeout",
                                  std::to_string(flags.server.round_timeout * 2 + 60)};
    if (k < byzantine) {  // the first `byzantine` clients attack
      for (const std::string& x :
           {std::string("--attack"), attack.attack, std::string("--attack-scale"), std::to_string(attack_opts.scale),
            std::string("--attack-flip"), std::to_string(attack_opts.flip),
            std::string("--attack-sigma"), std::to_string(attack_opts.sigma), std::string("--attack-seed"),
            std::to_string(flags.server.seed + uint64_t(k))})
        a.push_back(x);
      if (attack.attack == "alie")
        for (const std::string& x : {std::string("--collude-dir"), join_path(out, "collude"), std::string("--colluders"),
                                     std::to_string(byzantine), std::string("--round-clients"),
                                     std::to_string(flags.server.per_round > 0 ? flags.server.per_round : clients)})
          a.push_back(x);
    }
    return a;
  }

  void run() const;
};

// Waits for the server's port file (or its early exit).
int wait_for_port(pid_t server, const std::string& port_file, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (file_exists(port_file)) return std::stoi(read_file(port_file));
    int status = 0;
    if (::waitpid(server, &status, WNOHANG) == server)
      throw Error("pare federate simulate: the server exited before it listened (exit " +
                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(server, SIGKILL);
  throw Error("pare federate simulate: the server did not listen within " + std::to_string(int(timeout_s)) + " s");
}

void Simulation::run() const {
  PARE_CHECK_OPTION(clients >= 1, "clients", "must be at least 1, got ", clients);
  PARE_CHECK_OPTION(byzantine >= 0 && byzantine <= clients, "byzantine", "must be in [0, ", clients, "], got ", byzantine);
  const federated::AttackKind kind = federated::parse_attack(attack.attack);
  PARE_CHECK_OPTION(byzantine == 0 || kind != federated::AttackKind::kNone, "attack",
                    "is needed with --byzantine (sign-flip, scaling, gaussian, label-flip or alie)");
  if (kind == federated::AttackKind::kAlie && byzantine > 0)  // z must be finite for the round's n
    federated::alie_z(flags.server.per_round > 0 ? std::min(flags.server.per_round, clients) : clients, byzantine);
  federated::ServerOptions check = flags.server;
  check.clients = clients;
  check.dir = join_path(out, "server");
  check.validate();  // bad flags fail here, before any process starts
  const std::vector<std::string> parts = write_parts();  // a bad --partition fails before any folder is made
  make_dirs(join_path(out, "logs"));
  const std::string port_file = join_path(out, "server.port");
  std::remove(port_file.c_str());
  const pid_t server = spawn(server_args(port_file), "");
  const int port = wait_for_port(server, port_file, 60);
  std::vector<pid_t> pids;
  for (int64_t k = 0; k < clients; ++k)
    pids.push_back(spawn(client_args(k, parts[k], port), join_path(out, "logs/" + client_id(k) + ".log")));
  if (!flags.server.quiet)
    std::fprintf(stderr, "simulate: server on port %d, %lld clients (%lld attacking with %s), logs in %s\n", port,
                 (long long)clients, (long long)byzantine, attack.attack.c_str(), join_path(out, "logs").c_str());
  int status = 0;
  while (::waitpid(server, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // The clients exit once the server said DONE; stragglers (a client that hangs) get 10 s.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    while (::waitpid(p, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(p, &st, WNOHANG) == 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, &st, 0);
    }
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  if (code != 0) throw Error("pare federate simulate: the server failed (exit " + std::to_string(code) + "); see above");
  const std::string rounds = join_path(out, "server/rounds.jsonl");
  const std::string log = read_file(rounds);  // the last line: the last round
  const size_t start = log.size() < 2 ? std::string::npos : log.find_last_of('\n', log.size() - 2);
  const nlohmann::json last = nlohmann::json::parse(log.substr(start == std::string::npos ? 0 : start + 1));
  if (flags.json) {
    nlohmann::json j = {{"model", join_path(out, "server/model.onnx")}, {"rounds_log", rounds},
                        {"rounds", flags.server.rounds}, {"aggregator", flags.server.agg.name},
                        {"attack", attack.attack}, {"byzantine", byzantine}, {"clients", clients},
                        {"failed_clients", failed}, {"val_accuracy", last.value("val_accuracy", -1.0)},
                        {"mode", flags.server.mode}};
    if (last.contains("model_accuracy")) j["model_accuracy"] = last["model_accuracy"];
    std::cout << j.dump() << "\n";
  } else if (!flags.server.quiet) {
    std::fprintf(stderr, "simulate: final val acc %.2f%%, %d client(s) did not exit cleanly; model %s\n",
                 last.value("val_accuracy", -1.0) * 100, failed, join_path(out, "server/model.onnx").c_str());
  }
}

void add_simulate(CLI::App* fed, Action& action) {
  auto* cmd = fed->add_subcommand("simulate", "Run a server and N clients as processes of this machine (experiments)");
  auto o = std::make_shared<Simulation>();
  o->flags.add(cmd, true);
  cmd->add_option("--data,-d", o->data, "fashion-mnist[:DIR] or npy:X,Y: its train split is divided among the clients, "
                  "its --val-split evaluated by the server")->required();
  cmd->add_option("--clients", o->clients, "Client processes")->capture_default_str();
  cmd->add_option("--partition", o->partition, "iid, dirichlet:ALPHA or shards:K")->capture_default_str();
  cmd->add_option("--train-samples", o->train_samples, "Use this many training samples (0: all)");
  cmd->add_option("--distill-samples", o->distill_samples, "feddf: training samples held out from the clients, "
                  "without their labels, as the server's distillation set")->capture_default_str()->group("FedDF");
  cmd->add_option("--byzantine", o->byzantine, "Attacking clients (the first F)")->capture_default_str()
      ->group("Attack (experiments)");
  o->attack.add(cmd, o->attack_opts);
  cmd->add_option("--out,-o", o->out, "Run folder: data/, logs/, server/ (rounds.jsonl, model.onnx)")->required();
  cmd->callback([&action, o, cmd] {
    // Unless told otherwise, the aggregator assumes as many Byzantine clients as attack.
    if (cmd->count("--assume-byzantine") == 0) o->flags.server.agg.assume_byzantine = o->byzantine;
    action = [o] {
      o->flags.server.clients = o->clients;
      o->run();
    };
  });
}

}  // namespace

void add_federate(CLI::App& app, Action& action) {
  auto* fed = app.add_subcommand("federate", "Federated training: a server aggregates the updates of edge clients");
  fed->require_subcommand(1);
  add_server(fed, action);
  add_client(fed, action);
  add_simulate(fed, action);
}

}  // namespace pare::cli
