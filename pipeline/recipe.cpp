// Reading and checking a pipeline recipe: YAML syntax, keys (a stage's keys are its command's long
// flags, checked by parsing the command line that stage will run), stage references and files.
// Every error names the recipe, the line and the key, and comes before anything runs.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <set>

#include "pipeline/pipeline.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/zoo.h"

namespace pare::pipeline {

namespace {

const char* const kKinds[] = {"teacher", "distill", "prune", "quantize", "export", "eval"};
const char* const kTopKeys[] = {"name", "description", "data", "seed", "stages"};
// Keys of the pipeline itself, beside the command's flags.
const char* const kStageKeys[] = {"stage", "name", "input", "nproc"};
// Flags the pipeline sets: where the stage writes, and how it resumes.
const char* const kReserved[] = {"out", "metrics", "checkpoint", "resume", "report", "json", "quiet", "help"};

std::string command_of(const std::string& kind) { return kind == "teacher" ? "train" : kind; }

bool listed(const char* const* begin, const char* const* end, const std::string& s) {
  return std::find_if(begin, end, [&](const char* k) { return s == k; }) != end;
}
template <size_t N>
bool listed(const char* const (&list)[N], const std::string& s) {
  return listed(list, list + N, s);
}
template <size_t N>
std::string joined(const char* const (&list)[N]) {
  std::string s;
  for (const char* k : list) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

int line_of(const YAML::Node& n) { return n.Mark().line + 1; }

// Checks one recipe: `fail` throws the recipe's file:line: key: message.
class Checker {
 public:
  Checker(std::string path, const CommandSchema& commands) : path_(std::move(path)), commands_(commands) {
    // Files named in the recipe are relative to its folder, and stages run in the run folder.
    char* real = ::realpath(path_.c_str(), nullptr);
    base_ = dir_name(real ? std::string(real) : path_);
    std::free(real);
  }

  [[noreturn]] void fail(int line, const std::string& key, const std::string& what) const {
    throw InputError(path_ + ":" + std::to_string(line) + ": " + (key.empty() ? "" : "key '" + key + "': ") + what);
  }

  Recipe check(const YAML::Node& root, std::string text);

 private:
  void check_top(const YAML::Node& root, Recipe& r);
  RecipeStage check_stage(const YAML::Node& node, size_t index, const std::vector<RecipeStage>& before);
  std::string scalar(const YAML::Node& value, const std::string& key) const;
  std::string model_ref(const YAML::Node& value, const std::string& key, RecipeStage& s,
                        const std::vector<RecipeStage>& before, bool zoo_ok) const;
  std::string file_ref(const std::string& v, int line, const std::string& key, RecipeStage& s) const;
  std::string data_ref(const std::string& v, int line, const std::string& key, RecipeStage& s) const;
  void add_flag(const YAML::Node& key, const YAML::Node& value, RecipeStage& s,
                const std::vector<RecipeStage>& before) const;
  void check_command_line(const RecipeStage& s, const std::map<std::string, int>& key_lines) const;
  std::string model_input(const YAML::Node& node, RecipeStage& s, const std::vector<RecipeStage>& before) const;
  void add_model(const YAML::Node& node, const std::string& model, RecipeStage& s,
                 const std::vector<RecipeStage>& before) const;
  void add_defaults(const YAML::Node& node, RecipeStage& s) const;
  bool has_option(const RecipeStage& s, const std::string& key) const;

  std::string path_, base_, data_, seed_;
  const CommandSchema& commands_;
};

std::string Checker::scalar(const YAML::Node& value, const std::string& key) const {
  if (!value.IsScalar()) fail(line_of(value), key, "expected a single value, got a " +
                                                       std::string(value.IsMap() ? "mapping" : value.IsSequence() ? "list" : "null"));
  return value.Scalar();
}

// A file named in the recipe: relative to the recipe's folder, and it must exist.
std::string Checker::file_ref(const std::string& v, int line, const std::string& key, RecipeStage& s) const {
  const std::string path = join_path(base_, v);
  if (!file_exists(path)) fail(line, key, "file '" + v + "' not found (paths are relative to the recipe's folder: " + base_ + ")");
  s.files.push_back(path);
  return path;
}

// A data spec: fashion-mnist[:DIR] or npy:X.npy[,Y.npy], paths made absolute and checked.
std::string Checker::data_ref(const std::string& v, int line, const std::string& key, RecipeStage& s) const {
  std::string spec = v;
  if (v.rfind("npy:", 0) == 0) {
    spec = "npy:";
    size_t from = 4;
    while (from <= v.size()) {
      const size_t comma = std::min(v.find(',', from), v.size());
      const std::string f = v.substr(from, comma - from);
      const std::string path = join_path(base_, f);
      if (!file_exists(path)) fail(line, key, "data file '" + f + "' not found (relative to " + base_ + ")");
      spec += (spec.size() > 4 ? "," : "") + path;
      from = comma + 1;
    }
  } else if (v.rfind("fashion-mnist:", 0) == 0) {
    spec = "fashion-mnist:" + join_path(base_, v.substr(14));
  } else if (v != "fashion-mnist") {
    fail(line, key, "expected fashion-mnist[:DIR] or npy:X.npy[,Y.npy], got '" + v + "'");
  }
  if (std::find(s.data.begin(), s.data.end(), spec) == s.data.end()) s.data.push_back(spec);
  return spec;
}

// A model: an earlier stage's name (its artifact), a zoo spec (when `zoo_ok`), cache:DIR,
// from-teacher:..., or an ONNX/TorchScript file.
std::string Checker::model_ref(const YAML::Node& value, const std::string& key, RecipeStage& s,
                               const std::vector<RecipeStage>& before, bool zoo_ok) const {
  const std::string v = scalar(value, key);
  for (const RecipeStage& b : before) {
    if (b.name != v) continue;
    if (!b.artifact) fail(line_of(value), key, "stage '" + v + "' (line " + std::to_string(b.line) + ") writes no model");
    if (std::find(s.upstream.begin(), s.upstream.end(), b.dir) == s.upstream.end()) s.upstream.push_back(b.dir);
    return b.dir + "/model.onnx";
  }
  if (zoo_ok && (core::is_zoo_spec(v) || v.rfind("from-teacher:", 0) == 0)) return v;
  if (v.rfind("cache:", 0) == 0) {
    const std::string dir = join_path(base_, v.substr(6));
    file_ref(v.substr(6) + "/index.json", line_of(value), key, s);
    return "cache:" + dir;
  }
  if (v.find('/') == std::string::npos && v.find('.') == std::string::npos)
    fail(line_of(value), key, "'" + v + "' is no earlier stage" + (zoo_ok ? ", zoo model" : "") + " or file");
  return file_ref(v, line_of(value), key, s);
}

bool Checker::has_option(const RecipeStage& s, const std::string& key) const {
  const auto names = commands_.options(command_of(s.kind));
  return std::find(names.begin(), names.end(), key) != names.end();
}

void Checker::add_flag(const YAML::Node& key_node, const YAML::Node& value, RecipeStage& s,
                       const std::vector<RecipeStage>& before) const {
  const std::string key = key_node.Scalar();
  const int line = line_of(key_node);
  if (listed(kReserved, key)) fail(line, key, "set by the pipeline (each stage writes into its own folder of the run folder)");
  if (key.size() <= 1 || !has_option(s, key)) {
    std::string known;
    for (const std::string& n : commands_.options(command_of(s.kind)))
      if (!listed(kReserved, n)) known += (known.empty() ? "" : ", ") + n;
    fail(line, key, "unknown key for a " + s.kind + " stage (pare " + command_of(s.kind) + " has no --" + key +
                        "); its keys: " + known + ", and " + joined(kStageKeys));
  }
  if (commands_.is_flag(command_of(s.kind), key)) {  // a flag: true or false
    bool on = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, on)) fail(line, key, "expected true or false");
    if (on) s.command.push_back("--" + key);
    return;
  }
  std::vector<YAML::Node> items;
  if (value.IsSequence()) {
    for (const YAML::Node& item : value) items.push_back(item);
    if (items.empty()) fail(line, key, "expected at least one value");
  } else {
    items.push_back(value);
  }
  for (const YAML::Node& item : items) {
    std::string v = scalar(item, key);
    if (key == "teacher" || key == "student") v = model_ref(item, key, s, before, true);
    else if (key == "data" || key == "calib") v = data_ref(v, line_of(item), key, s);
    s.command.push_back("--" + key);
    s.command.push_back(v);
  }
}

// Parses the stage's command line with the command's own options, so that a value the command
// would refuse (a type, a range, a choice) is an error at the recipe's line before anything runs.
void Checker::check_command_line(const RecipeStage& s, const std::map<std::string, int>& key_lines) const {
  std::string refusal;
  try {
    refusal = commands_.refusal(s.command);
  } catch (const Error& e) {
    fail(s.line, "", e.what());
  }
  if (refusal.empty()) return;
  for (const auto& [key, line] : key_lines)
    if (refusal.find("--" + key) != std::string::npos) fail(line, key, refusal);
  fail(s.line, "", "pare " + command_of(s.kind) + " refuses this stage: " + refusal);
}

// The model a stage reads: input:, else the previous stage that wrote one ("" for a teacher, and
// for a distill stage right after its teacher, whose student is then a new model).
std::string Checker::model_input(const YAML::Node& node, RecipeStage& s, const std::vector<RecipeStage>& before) const {
  const YAML::Node input = node["input"];
  if (s.kind == "teacher") {
    if (input) fail(line_of(input), "input", "a teacher stage reads no model: give model: (a zoo spec to train, or an ONNX file to load)");
    return "";
  }
  std::string model;
  if (input) {
    model = model_ref(input, "input", s, before, false);
  } else {
    auto prev = std::find_if(before.rbegin(), before.rend(), [](const RecipeStage& b) { return b.artifact; });
    if (prev == before.rend() || (s.kind == "distill" && prev->kind == "teacher")) return "";
    s.upstream.push_back(prev->dir);
    model = prev->dir + "/model.onnx";
  }
  if (model.size() > 11 && model.compare(model.size() - 11, 11, "/model.onnx") == 0 &&
      std::find(s.upstream.begin(), s.upstream.end(), model.substr(0, model.size() - 11)) != s.upstream.end())
    s.input = model.substr(0, model.size() - 11);
  return model;
}

// The model arguments of each kind: train's --model (or a teacher loaded from a file), distill's
// --teacher/--student defaults, the other commands' positional model.
void Checker::add_model(const YAML::Node& node, const std::string& model, RecipeStage& s,
                        const std::vector<RecipeStage>& before) const {
  if (s.kind == "teacher") {
    const YAML::Node m = node["model"];
    if (!m) fail(s.line, "model", "missing: a teacher stage trains a zoo model (model: cnn) or loads an ONNX file");
    const std::string v = scalar(m, "model");
    if (core::is_zoo_spec(v)) {
      s.command.insert(s.command.end(), {"--model", v});
      return;
    }
    if (v.size() < 5 || v.compare(v.size() - 5, 5, ".onnx") != 0)
      fail(line_of(m), "model", "'" + v + "' is neither a zoo model nor an .onnx file to load");
    s.load = file_ref(v, line_of(m), "model", s);
    for (const auto& kv : node)
      if (!listed(kStageKeys, kv.first.Scalar()) && kv.first.Scalar() != "model")
        fail(line_of(kv.first), kv.first.Scalar(), "a teacher loaded from a file takes no training options");
    return;
  }
  if (s.kind != "distill") {
    if (model.empty()) fail(s.line, "input", "no earlier stage writes a model: set input: to a stage name or an ONNX file");
    s.command.push_back(model);
    return;
  }
  if (!node["student"]) {
    if (model.empty()) fail(s.line, "student", "missing: a zoo spec, an ONNX file or an earlier stage to distill into");
    s.command.insert(s.command.end(), {"--student", model});
  }
  if (!node["teacher"]) {
    auto t = std::find_if(before.rbegin(), before.rend(), [](const RecipeStage& b) { return b.kind == "teacher"; });
    if (t == before.rend()) fail(s.line, "teacher", "missing, and no earlier teacher stage to default to");
    s.upstream.push_back(t->dir);
    s.command.insert(s.command.end(), {"--teacher", t->dir + "/model.onnx"});
  }
}

// What the pipeline adds: the recipe's data and seed where the stage does not set them, and
// where the stage writes (model, metrics, checkpoint, quantization report).
void Checker::add_defaults(const YAML::Node& node, RecipeStage& s) const {
  auto has = [&](const char* k) { return static_cast<bool>(node[k]); };
  auto number = [&](const char* k) { return has(k) && node[k].IsScalar() ? std::atof(node[k].Scalar().c_str()) : 0.0; };
  bool qat = false;
  if (has("qat") && node["qat"].IsScalar()) YAML::convert<bool>::decode(node["qat"], qat);
  const bool trains = s.kind == "teacher" || s.kind == "distill" || (s.kind == "prune" && number("epochs") > 0) ||
                      (s.kind == "quantize" && qat);
  const char* data_key = s.kind == "quantize" ? "calib" : "data";
  const bool wants_data = s.kind == "teacher" || s.kind == "distill" || s.kind == "eval" ||
                          (s.kind == "prune" && (trains || (has("method") && node["method"].Scalar() == "taylor"))) ||
                          (s.kind == "quantize" && !has("weight-only") && !has("dynamic"));
  if (wants_data && !has(data_key)) {
    if (data_.empty()) fail(s.line, data_key, "this stage needs data: set data: at the top of the recipe or in the stage");
    s.data.push_back(data_);
    s.command.insert(s.command.end(), {std::string("--") + data_key, data_});
  }
  s.eval_data = has("data") && s.kind != "quantize" ? s.data.front() : data_;
  if (!seed_.empty() && !has("seed") && has_option(s, "seed")) s.command.insert(s.command.end(), {"--seed", seed_});
  if (s.load.empty() && s.artifact) s.command.insert(s.command.end(), {"--out", s.dir + "/model.onnx"});
  if (trains && s.load.empty()) {
    s.checkpoint = true;
    s.command.insert(s.command.end(), {"--metrics", s.dir + "/metrics.jsonl", "--checkpoint", s.dir + "/checkpoint.pt"});
  }
  if (s.kind == "quantize") s.command.insert(s.command.end(), {"--report", s.dir + "/quantization.json"});
  if (s.kind == "eval") s.command.push_back("--json");
  if ((s.kind == "export" && has("target") && node["target"].Scalar() == "rt") ||
      (s.kind == "eval" && has("engine") && node["engine"].Scalar() == "rt"))
    s.engine = "rt";
}

RecipeStage Checker::check_stage(const YAML::Node& node, size_t index, const std::vector<RecipeStage>& before) {
  if (!node.IsMap()) fail(line_of(node), "", "a stage is a mapping with a stage: key (" + joined(kKinds) + ")");
  RecipeStage s;
  s.line = line_of(node);
  const YAML::Node kind = node["stage"];
  if (!kind) fail(s.line, "stage", "missing: every stage names its kind (" + joined(kKinds) + ")");
  s.kind = scalar(kind, "stage");
  if (!listed(kKinds, s.kind)) fail(line_of(kind), "stage", "unknown stage '" + s.kind + "' (known: " + joined(kKinds) + ")");
  const auto same = std::count_if(before.begin(), before.end(), [&](const RecipeStage& b) { return b.kind == s.kind; });
  s.name = s.kind + (same > 0 ? "-" + std::to_string(same + 1) : "");
  if (const YAML::Node n = node["name"]) {
    s.name = scalar(n, "name");
    if (s.name.empty() || s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos)
      fail(line_of(n), "name", "'" + s.name + "': a stage name is letters, digits, '_', '.' and '-'");
  }
  for (const RecipeStage& b : before)
    if (b.name == s.name) fail(s.line, "name", "stage name '" + s.name + "' already used at line " + std::to_string(b.line));
  char prefix[16];
  std::snprintf(prefix, sizeof(prefix), "%02zu-", index + 1);
  s.dir = prefix + s.name;
  s.artifact = s.kind != "eval";
  if (const YAML::Node n = node["nproc"]) {
    const std::string v = scalar(n, "nproc");
    s.nproc = std::atoi(v.c_str());
    if (v.find_first_not_of("0123456789") != std::string::npos || s.nproc < 1 || s.nproc > 256)
      fail(line_of(n), "nproc", "expected a process count in [1, 256], got '" + v + "'");
    if (s.nproc > 1 && (s.kind == "export" || s.kind == "eval"))
      fail(line_of(n), "nproc", "a " + s.kind + " stage runs in one process");
  }
  const std::string model = model_input(node, s, before);
  s.command = {command_of(s.kind)};
  add_model(node, model, s, before);
  std::map<std::string, int> key_lines;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (listed(kStageKeys, key) || (s.kind == "teacher" && key == "model")) continue;
    key_lines[key] = line_of(kv.first);
    add_flag(kv.first, kv.second, s, before);
  }
  add_defaults(node, s);
  if (s.load.empty()) check_command_line(s, key_lines);
  else s.command.clear();
  return s;
}

void Checker::check_top(const YAML::Node& root, Recipe& r) {
  if (!root.IsMap()) fail(line_of(root), "", "a recipe is a mapping with a stages: list (see docs/PIPELINE.md)");
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (!listed(kTopKeys, key)) fail(line_of(kv.first), key, "unknown key (a recipe has " + joined(kTopKeys) + ")");
  }
  if (const YAML::Node n = root["name"]) r.name = scalar(n, "name");
  if (const YAML::Node n = root["data"]) {
    RecipeStage scratch;
    data_ = data_ref(scalar(n, "data"), line_of(n), "data", scratch);
  }
  if (const YAML::Node n = root["seed"]) {
    seed_ = scalar(n, "seed");
    if (seed_.empty() || seed_.find_first_not_of("0123456789") != std::string::npos)
      fail(line_of(n), "seed", "expected an integer >= 0, got '" + seed_ + "'");
  }
  const YAML::Node stages = root["stages"];
  if (!stages) fail(line_of(root), "stages", "missing: the list of stages to run");
  if (!stages.IsSequence() || stages.size() == 0) fail(line_of(stages), "stages", "expected a non-empty list of stages");
}

Recipe Checker::check(const YAML::Node& root, std::string text) {
  Recipe r;
  r.path = path_;
  r.text = std::move(text);
  check_top(root, r);
  if (r.name.empty()) {
    const size_t slash = path_.find_last_of('/');
    r.name = path_.substr(slash == std::string::npos ? 0 : slash + 1);
    r.name = r.name.substr(0, r.name.find('.'));
  }
  size_t index = 0;
  for (const YAML::Node& stage : root["stages"]) r.stages.push_back(check_stage(stage, index++, r.stages));
  return r;
}

}  // namespace

Recipe load_recipe(const std::string& path, const CommandSchema& commands) {
  std::string text = read_file(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InputError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                     ": YAML syntax error: " + e.msg);
  }
  if (!root || root.IsNull()) throw InputError(path + ": empty recipe (a recipe is a mapping with a stages: list)");
  return Checker(path, commands).check(root, std::move(text));
}

}  // namespace pare::pipeline
