// pare federate server | client | simulate: federated training over gRPC (federated/).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/file_util.h"
#include "federated/client.h"
#include "federated/launch.h"
#include "federated/server.h"
#include "federated/simulate.h"

namespace pare::cli {

namespace {

// What server and simulate share: the model, the server's data and every round option.
struct ServerFlags {
  std::vector<std::string> models;
  federated::ServerDataSpec data;
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
      cmd->add_option("--val-data", data.val, "Data set evaluated after every round (fashion-mnist[:DIR] or npy:X,Y)");
      cmd->add_option("--root-data", data.root, "FLTrust: the server's clean root data set (its train split)");
      cmd->add_option("--distill-data", data.distill, "feddf: the server's unlabeled inputs (npy:X.npy, or a data "
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
    cmd->add_option("--val-split", data.val_split, "Split of the validation data")->capture_default_str();
    cmd->add_option("--root-samples", data.root_samples, "FLTrust: samples of the root data set used")->capture_default_str();
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

  // Runs the server; prints the summary.
  void run() const {
    train::set_threads(threads);
    const auto rounds = federated::serve(models, server, data);
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
void add_attack(CLI::App* cmd, std::string& attack, federated::AttackOptions& ao) {
  const std::string g = "Attack (experiments)";
  cmd->add_option("--attack", attack, "none, sign-flip, scaling, gaussian, label-flip or alie")
      ->capture_default_str()->group(g);
  cmd->add_option("--attack-scale", ao.scale, "scaling: the factor")->capture_default_str()->group(g);
  cmd->add_option("--attack-flip", ao.flip, "sign-flip: the reversed update's factor")->capture_default_str()->group(g);
  cmd->add_option("--attack-sigma", ao.sigma, "gaussian: the noise's standard deviation")->capture_default_str()->group(g);
}

// Runs the simulation of `sim` with the server options of `flags`; prints the summary.
void print_simulation(const ServerFlags& flags, federated::SimulateOptions sim) {
  sim.models = flags.models;
  sim.server = flags.server;
  sim.server.clients = sim.clients;
  sim.val_split = flags.data.val_split;
  sim.root_samples = flags.data.root_samples;
  sim.threads = flags.threads;
  const federated::SimulateResult r = federated::simulate(sim);
  if (flags.json) {
    nlohmann::json j = {{"model", r.model}, {"rounds_log", r.rounds_log}, {"rounds", sim.server.rounds},
                        {"aggregator", sim.server.agg.name}, {"attack", sim.attack}, {"byzantine", sim.byzantine},
                        {"clients", sim.clients}, {"failed_clients", r.failed_clients},
                        {"val_accuracy", r.last.val_accuracy}, {"mode", sim.server.mode}};
    if (!r.last.model_accuracy.empty()) j["model_accuracy"] = r.last.model_accuracy;
    std::cout << j.dump() << "\n";
  } else if (!sim.server.quiet) {
    std::fprintf(stderr, "simulate: final val acc %.2f%%, %d client(s) did not exit cleanly; model %s\n",
                 r.last.val_accuracy * 100, r.failed_clients, r.model.c_str());
  }
}

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
void add_client_data(CLI::App* cmd, federated::ClientDataSpec& d) {
  cmd->add_option("--data,-d", d.data, "The client's training data: fashion-mnist[:DIR] or npy:X.npy,Y.npy (train split)")
      ->required();
  cmd->add_option("--partition", d.partition, "Train on one part of the data only: iid, dirichlet:ALPHA or shards:K");
  cmd->add_option("--partitions", d.partitions, "--partition: the number of parts");
  cmd->add_option("--partition-index", d.index, "--partition: this client's part (0-based)");
  cmd->add_option("--partition-seed", d.seed, "--partition: the split's seed (the same on every client)")
      ->capture_default_str();
}

void add_client(CLI::App* fed, Action& action) {
  auto* cmd = fed->add_subcommand("client", "Train on this client's data in the rounds the server samples it for");
  struct Opts {
    federated::ClientOptions client;
    federated::ClientDataSpec data;
    std::string attack = "none";
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--server", o->client.server, "The server's host:port")->required();
  cmd->add_option("--id", o->client.id, "This client's name (stable over restarts)")->required();
  cmd->add_option("--architecture", o->client.architecture,
                  "feddf: which of the server's models (0-based, in its --model order) this client trains")
      ->capture_default_str();
  add_client_data(cmd, o->data);
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
  add_attack(cmd, o->attack, o->client.attack_opts);
  cmd->add_option("--attack-seed", o->client.attack_opts.seed, "gaussian: the noise's seed")->group("Attack (experiments)");
  cmd->add_option("--collude-dir", o->client.collude_dir, "alie: the folder the attackers share")
      ->group("Attack (experiments)");
  cmd->add_option("--colluders", o->client.colluders, "alie: the number of attackers")->group("Attack (experiments)");
  cmd->add_option("--round-clients", o->client.round_clients, "alie: the clients per round")
      ->group("Attack (experiments)");
  cmd->callback([&action, o] {
    action = [o] {
      train::set_threads(o->threads);
      o->client.attack = federated::parse_attack(o->attack);
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
void add_simulate(CLI::App* fed, Action& action) {
  auto* cmd = fed->add_subcommand("simulate", "Run a server and N clients as processes of this machine (experiments)");
  struct Opts {
    ServerFlags flags;
    federated::SimulateOptions sim;
  };
  auto o = std::make_shared<Opts>();
  federated::SimulateOptions& sim = o->sim;
  o->flags.add(cmd, true);
  cmd->add_option("--data,-d", sim.data, "fashion-mnist[:DIR] or npy:X,Y: its train split is divided among the clients, "
                  "its --val-split evaluated by the server")->required();
  cmd->add_option("--clients", sim.clients, "Client processes")->capture_default_str();
  cmd->add_option("--partition", sim.partition, "iid, dirichlet:ALPHA or shards:K")->capture_default_str();
  cmd->add_option("--train-samples", sim.train_samples, "Use this many training samples (0: all)");
  cmd->add_option("--distill-samples", sim.distill_samples, "feddf: training samples held out from the clients, "
                  "without their labels, as the server's distillation set")->capture_default_str()->group("FedDF");
  cmd->add_option("--byzantine", sim.byzantine, "Attacking clients (the first F)")->capture_default_str()
      ->group("Attack (experiments)");
  add_attack(cmd, sim.attack, sim.attack_opts);
  cmd->add_option("--out,-o", sim.out, "Run folder: data/, logs/, server/ (rounds.jsonl, model.onnx)")->required();
  cmd->callback([&action, o, cmd] {
    // Unless told otherwise, the aggregator assumes as many Byzantine clients as attack.
    if (cmd->count("--assume-byzantine") == 0) o->flags.server.agg.assume_byzantine = o->sim.byzantine;
    action = [o] { print_simulation(o->flags, o->sim); };
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
