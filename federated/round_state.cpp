#include "federated/round_state.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"

namespace pare::federated {

using json = nlohmann::json;

namespace {

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

RoundStats parse_round(const std::string& line, const std::string& what) {
  try {
    return round_of(json::parse(line));
  } catch (const json::exception& e) {
    throw InputError(what + ": not a round of a pare federate server (" + e.what() + ")");
  }
}

RoundState::RoundState(std::vector<core::Graph> initial) : models(std::move(initial)) {
  for (const core::Graph& m : models) layouts.push_back(state_layout(m));
  velocity.resize(models.size());
}

void RoundState::step(size_t k, const at::Tensor& a, double lr, double momentum) {
  at::Tensor step = a;
  if (momentum > 0) {
    at::Tensor& v = velocity[k];
    v = v.defined() ? v * momentum + step : step.clone();
    step = v;
  }
  apply_update(models[k], step, layouts[k], lr);
}

void RoundState::checkpoint(const std::string& dir) const {
  const int64_t r = history.empty() ? 0 : history.back().round;
  json files = json::array(), velocities = json::array();
  for (size_t k = 0; k < models.size(); ++k) {
    files.push_back(model_file(r, k));
    core::save_onnx(models[k], join_path(dir, files.back()));
    velocities.push_back(velocity[k].defined() ? model_file(r, k, ".velocity.npy") : "");
    if (velocity[k].defined()) core::save_npy(velocity[k], join_path(dir, velocities.back()));
  }
  json rounds = json::array();
  std::string lines;
  for (const RoundStats& h : history) {
    rounds.push_back(round_json(h));
    lines += rounds.back().dump() + "\n";
  }
  const json state = {{"format", "pare.federated.server/1"}, {"round", r},          {"models", files},
                      {"velocities", velocities},            {"rounds", rounds}};
  write_file_atomic(join_path(dir, "server.json"), state.dump(1) + "\n");
  write_file_atomic(join_path(dir, "rounds.jsonl"), lines);
  for (size_t k = 0; r > 0 && k < models.size(); ++k)
    for (const char* ext : {".onnx", ".velocity.npy"}) std::remove(join_path(dir, model_file(r - 1, k, ext)).c_str());
}

std::string RoundState::model_file(int64_t r, size_t k, const char* ext) const {
  return "round-" + std::to_string(r) + (models.size() > 1 ? "-" + std::to_string(k) : std::string()) + ext;
}

bool RoundState::resume(const std::string& dir) {
  const std::string path = join_path(dir, "server.json");
  if (!file_exists(path)) return false;
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
    core::Graph g = core::load_onnx(join_path(dir, files[k]));
    const Layout l = state_layout(g);
    PARE_CHECK(l.names == layouts[k].names && l.shapes == layouts[k].shapes, path, ": the checkpointed model ",
               files[k], " is not the architecture of the model given; remove the folder to start over");
    models[k] = std::move(g);
  }
  PARE_CHECK(vs.size() == models.size(), path, ": the checkpoint holds ", vs.size(), " velocities for ", models.size(),
             " model(s); remove the folder to start over");
  for (size_t k = 0; k < vs.size(); ++k) {
    if (vs[k].empty()) continue;
    at::Tensor v = core::load_npy(join_path(dir, vs[k]));
    PARE_CHECK(v.dim() == 1 && v.size(0) == layouts[k].size && v.scalar_type() == at::kFloat, path, ": the velocity ",
               vs[k], " is not a float32 vector of the model's ", layouts[k].size, " values; remove the folder to start over");
    velocity[k] = v;
  }
  return true;
}

}  // namespace pare::federated
