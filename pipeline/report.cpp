// pare report: reads a run folder (format "pare-run-1") and writes its HTML report, one
// self-contained file: inline CSS, charts as inline SVG (pipeline/svg_plot.h), a few lines of script
// that highlight a stage across the table and charts on hover. Nothing is fetched from a network.
#include "pipeline/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

#include "pipeline/svg_plot.h"
#include "core/error.h"
#include "core/file_util.h"

namespace pare::pipeline {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* const kNone = "\xE2\x80\x94";  // an em dash: no value
// Tableau 10: one colour per stage, the same in the table and every chart.
const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// ---- Reading the run folder. Only run.json must be valid; everything else may be absent or
// partial (a running or failed run) and shows as missing.

std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string text(const json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& array(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

// Parses `src`; on a syntax error returns null and sets `error` to the parser's message.
json parse_json(const std::string& src, std::string& error) {
  try {
    return json::parse(src);
  } catch (const json::parse_error& e) {
    error = e.what();
    const auto bracket = error.find("] ");
    if (error.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) error.erase(0, bracket + 2);
    return json();
  }
}

// The file's text, or nothing when it is missing or unreadable.
std::optional<std::string> try_read(const std::string& path) {
  if (!file_exists(path)) return std::nullopt;
  try {
    return read_file(path);
  } catch (const Error&) {
    return std::nullopt;
  }
}

struct Summary {
  std::optional<double> accuracy, file_bytes, parameters, flops, sparsity, latency_ms;
  std::string engine;
};

struct Epoch {
  double epoch = 0;
  std::optional<double> val_accuracy, train_loss;
};

struct Stage {
  std::string dir, name, kind, status = "pending", note, color, started;
  std::optional<double> seconds;
  bool skipped = false;  ///< done before this invocation of the pipeline began: its inputs were unchanged
  std::optional<Summary> summary;
  json layers = json::array(), quantization = json::array();
  std::vector<Epoch> epochs;
};

struct Run {
  std::string dir;
  json meta;
  std::optional<std::string> recipe;
  std::vector<Stage> stages;
};

Summary read_summary(const json& j) {
  Summary s;
  s.accuracy = number(j, "accuracy");
  s.file_bytes = number(j, "file_bytes");
  s.parameters = number(j, "parameters");
  s.flops = number(j, "flops_per_sample");
  s.sparsity = number(j, "sparsity");
  s.latency_ms = number(j, "latency_ms");
  s.engine = text(j, "engine");
  return s;
}

// One epoch per line that parses as a JSON object; a torn last line (a stage still running) is
// left out.
std::vector<Epoch> read_metrics(const std::string& src) {
  std::vector<Epoch> epochs;
  std::istringstream in(src);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    Epoch e;
    e.epoch = number(j, "epoch").value_or(static_cast<double>(epochs.size() + 1));
    e.val_accuracy = number(j, "val_accuracy");
    e.train_loss = number(j, "train_loss");
    epochs.push_back(e);
  }
  return epochs;
}

// "NN-NAME", the form of a stage folder.
bool numbered(const std::string& dir) {
  return dir.size() > 3 && std::isdigit(static_cast<unsigned char>(dir[0])) &&
         std::isdigit(static_cast<unsigned char>(dir[1])) && dir[2] == '-';
}

Stage read_stage(const std::string& run_dir, const std::string& dir) {
  Stage st;
  st.dir = dir;
  st.name = numbered(dir) ? dir.substr(3) : dir;
  const std::string folder = join_path(run_dir, dir);
  const std::optional<std::string> src = try_read(join_path(folder, "stage.json"));
  if (!src) {
    st.note = "no stage.json";
    return st;
  }
  std::string error;
  const json j = parse_json(*src, error);
  if (!j.is_object()) {
    st.status = "unreadable";
    st.note = "stage.json: " + (error.empty() ? std::string("not a JSON object") : error);
    return st;
  }
  if (!text(j, "name").empty()) st.name = text(j, "name");
  st.kind = text(j, "kind");
  st.status = text(j, "status").empty() ? "unknown" : text(j, "status");
  st.seconds = number(j, "seconds");
  st.started = text(j, "started");
  if (j.contains("summary") && j["summary"].is_object()) st.summary = read_summary(j["summary"]);
  st.layers = array(j, "layers");
  st.quantization = array(j, "quantization");
  std::string metrics = text(j, "metrics");
  if (metrics.empty() && file_exists(join_path(folder, "metrics.jsonl"))) metrics = "metrics.jsonl";
  if (!metrics.empty()) {
    if (const auto m = try_read(join_path(folder, metrics))) st.epochs = read_metrics(*m);
    else if (st.status != "running") st.note = metrics + " is missing";
  }
  return st;
}

// The stage folders in recipe order: run.json's "stages", else the NN-NAME folders present.
std::vector<std::string> stage_dirs(const Run& run) {
  std::vector<std::string> dirs;
  const json& listed = array(run.meta, "stages");
  for (const json& d : listed) {
    const std::string name = d.is_string() ? d.get<std::string>() : "";
    if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..") dirs.push_back(name);
  }
  if (!listed.empty() || run.meta.contains("stages")) return dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && numbered(name)) dirs.push_back(name);
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

Run read_run(const std::string& dir) {
  std::error_code ec;
  PARE_CHECK(fs::is_directory(dir, ec), "'", dir, "' is not a folder: pare report reads a run folder of ",
             "pare pipeline (with run.json)");
  const std::string path = join_path(dir, "run.json");
  PARE_CHECK(file_exists(path), "'", path, "' is missing: '", dir, "' is not a run folder of pare pipeline");
  Run run;
  run.dir = dir;
  std::string error;
  run.meta = parse_json(read_file(path), error);
  PARE_CHECK(error.empty(), "'", path, "' is not valid JSON: ", error);
  const json format = run.meta.is_object() ? run.meta.value("format", json()) : json();
  const std::string got = !run.meta.is_object() ? "a JSON " + std::string(run.meta.type_name())
                          : format.is_null()    ? std::string("none")
                                                : format.dump();
  PARE_CHECK(format == "pare-run-1", "'", path, "': \"format\" must be \"pare-run-1\", got ", got);
  for (const std::string& d : stage_dirs(run)) run.stages.push_back(read_stage(dir, d));
  // The pipeline leaves the stage.json of a stage it skips as it was: one that started before this
  // invocation did (ISO 8601 UTC times compare as text) was skipped.
  const std::string started = text(run.meta, "started");
  for (size_t i = 0; i < run.stages.size(); ++i) {
    Stage& st = run.stages[i];
    st.color = kPalette[i % std::size(kPalette)];
    st.skipped = st.status == "done" && !st.started.empty() && !started.empty() && st.started < started;
  }
  run.recipe = try_read(join_path(dir, "recipe.yaml"));
  return run;
}

// ---- Figures of the header: the teacher (first stage with an accuracy) against the final model.

std::optional<double> accuracy_of(const Stage& s) { return s.summary ? s.summary->accuracy : std::nullopt; }
std::optional<double> bytes_of(const Stage& s) { return s.summary ? s.summary->file_bytes : std::nullopt; }

const Stage* teacher_stage(const Run& run) {
  for (const Stage& s : run.stages)
    if (accuracy_of(s)) return &s;
  return nullptr;
}

// The stage of run.json's "final" artifact; before there is one, the last stage with a file size.
const Stage* final_stage(const Run& run) {
  const std::string final = text(run.meta, "final");
  const std::string dir = final.substr(0, final.find('/'));
  for (const Stage& s : run.stages)
    if (!final.empty() && s.dir == dir) return &s;
  for (auto it = run.stages.rbegin(); it != run.stages.rend(); ++it)
    if (bytes_of(*it)) return &*it;
  return nullptr;
}

std::optional<double> final_bytes(const Run& run, const Stage* fin) {
  if (fin && bytes_of(*fin)) return bytes_of(*fin);
  const std::string final = text(run.meta, "final");
  std::error_code ec;
  const auto size = final.empty() ? 0 : fs::file_size(join_path(run.dir, final), ec);
  return !final.empty() && !ec ? std::optional<double>(static_cast<double>(size)) : std::nullopt;
}

// The final model's accuracy; when its stage has none, the last one measured (an eval stage).
std::optional<double> final_accuracy(const Run& run, const Stage* fin) {
  if (fin && accuracy_of(*fin)) return accuracy_of(*fin);
  for (auto it = run.stages.rbegin(); it != run.stages.rend(); ++it)
    if (accuracy_of(*it)) return accuracy_of(*it);
  return std::nullopt;
}

// ---- Formatting: every number goes through format_number.

std::string or_none(const std::optional<double>& v, const std::function<std::string(double)>& f) {
  return v && std::isfinite(*v) ? f(*v) : kNone;
}
std::string percent(double fraction, int decimals = 2) { return format_number(fraction * 100, decimals) + "%"; }
std::string kilobytes(double bytes) { return format_number(bytes / 1000, 1, true); }
std::string count(double v) { return format_number(v, 0, true); }

std::string duration(double seconds) {
  if (seconds < 60) return format_number(seconds, 1) + " s";
  const double s = std::round(seconds);
  if (s < 3600) return format_number(std::floor(s / 60), 0) + " min " + format_number(std::fmod(s, 60), 0) + " s";
  return format_number(std::floor(s / 3600), 0) + " h " + format_number(std::floor(std::fmod(s, 3600) / 60), 0) + " min";
}

// The CSS class of a status badge (only known words reach the class attribute).
std::string status_class(const std::string& status) {
  for (const char* known : {"done", "running", "failed", "pending"})
    if (status == known) return std::string("s-") + known;
  return "s-other";
}

std::string stage_attr(const Stage& s) { return " data-stage=\"" + html_escape(s.dir) + "\""; }


const char* const kStyle = R"css(
:root{--fg:#1f2328;--muted:#656d76;--line:#d8dee4;--soft:#eaeef2;--bg:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"DejaVu Sans",sans-serif}
.wrap{max-width:1200px;margin:0 auto;padding:0 24px}
header.top{background:#fff;border-bottom:1px solid var(--line);padding:18px 0 20px}
.brand{font-size:12px;letter-spacing:.08em;text-transform:uppercase;color:var(--muted)}
h1{font-size:24px;margin:4px 0;font-weight:600;display:flex;align-items:center;gap:12px;flex-wrap:wrap}
h2{font-size:16px;font-weight:600;margin:32px 0 10px}
.sub{color:var(--muted);font-size:13px}
.sub code{font-size:12px}
.badge{font-size:12px;font-weight:600;padding:1px 10px;border-radius:999px;border:1px solid;white-space:nowrap}
.s-done{color:#1a7f37;background:#dafbe1;border-color:#aceebb}
.s-running{color:#0969da;background:#ddf4ff;border-color:#b6e3ff}
.s-failed{color:#cf222e;background:#ffebe9;border-color:#ffcecb}
.s-pending,.s-other{color:var(--muted);background:var(--bg);border-color:var(--line)}
.kpis{display:grid;grid-template-columns:repeat(auto-fit,minmax(200px,1fr));gap:12px;margin-top:16px}
.kpi{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 16px;min-width:0}
.kpi .k{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
.kpi .v{font-size:22px;font-weight:600;margin-top:2px;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.kpi .v.path{font-size:14px;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;padding:6px 0 5px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.kpi .d{font-size:12px;color:var(--muted)}
.good{color:#1a7f37}.bad{color:#cf222e}
.card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:6px 8px;min-width:0}
.tablecard{padding:0;overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:7px 10px;border-bottom:1px solid var(--soft);text-align:left;white-space:nowrap}
tr:last-child td{border-bottom:0}
th{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600;background:#fafbfc}
.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:var(--muted)}
tr.hl td{background:#fff8c5}
.sw{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:8px;vertical-align:-1px}
.note{color:var(--muted);font-size:12px;white-space:normal}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.wide{grid-column:1/-1}
svg.chart{display:block;width:100%;height:auto}
svg.chart text{font-size:11.5px;fill:#3d444d}
svg.chart .ct{font-size:14px;font-weight:600;fill:var(--fg)}
svg.chart .al{font-size:12px;fill:var(--muted)}
svg.chart .tick{fill:var(--muted)}
svg.chart .grid{stroke:#eef1f4}
svg.chart .axis{stroke:#9aa4ae}
svg.chart .series{stroke-width:2;stroke-linejoin:round;stroke-linecap:round}
svg.chart .series.hl{stroke-width:4}
svg.chart .pt{stroke-width:2}
svg.chart .pt.hl{stroke-width:4}
svg.chart .pl{font-size:11px;fill:var(--fg)}
svg.chart .bv{font-size:10px;fill:var(--muted)}
svg.chart .bar:hover{opacity:.8}
.nodata{padding:12px 16px}
.nodata .ct{font-weight:600;font-size:14px}
.nodata p{color:var(--muted);margin:8px 0 4px}
pre.recipe{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 16px;margin:0;overflow:auto;max-height:640px;font:12.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace}
.env{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.env td:first-child{color:var(--muted);width:170px}
.env td{white-space:normal;overflow-wrap:anywhere}
footer{color:var(--muted);font-size:12px;margin:32px 0 28px}
@media (max-width:900px){.charts,.env{grid-template-columns:1fr}}
)css";

// Hovering a stage's row, point or line highlights it everywhere ([data-stage]).
const char* const kScript = R"js(
(function () {
  var els = Array.prototype.slice.call(document.querySelectorAll("[data-stage]"));
  function mark(key, on) {
    els.forEach(function (e) { if (e.getAttribute("data-stage") === key) e.classList.toggle("hl", on); });
  }
  els.forEach(function (e) {
    var key = e.getAttribute("data-stage");
    e.addEventListener("mouseenter", function () { mark(key, true); });
    e.addEventListener("mouseleave", function () { mark(key, false); });
  });
})();
)js";

void kpi(std::ostream& os, const std::string& key, const std::string& value, const std::string& detail,
         const std::string& value_class = "") {
  os << "<div class=\"kpi\"><div class=\"k\">" << key << "</div><div class=\"v" << (value_class.empty() ? "" : " ")
     << value_class << "\">" << value << "</div><div class=\"d\">" << detail << "</div></div>\n";
}

// The run's name and status, and when it ran from which recipe (what is known of it).
void write_title(std::ostream& os, const Run& run) {
  const std::string status = text(run.meta, "status").empty() ? "unknown" : text(run.meta, "status");
  os << "<header class=\"top\"><div class=\"wrap\"><div class=\"brand\">pare pipeline &middot; run report</div>\n<h1>"
     << html_escape(text(run.meta, "name").empty() ? run.dir : text(run.meta, "name")) << " <span class=\"badge "
     << status_class(status) << "\">" << html_escape(status) << "</span></h1>\n<div class=\"sub\">";
  const char* sep = "";
  for (const char* key : {"started", "finished", "recipe"}) {
    const std::string value = text(run.meta, key);
    if (value.empty()) continue;
    os << sep << key << " " << (key == std::string("recipe") ? "<code>" + html_escape(value) + "</code>" : html_escape(value));
    sep = " &middot; ";
  }
  os << "</div>\n";
}

void write_header(std::ostream& os, const Run& run) {
  write_title(os, run);
  os << "<div class=\"kpis\">\n";
  size_t done = 0;
  for (const Stage& s : run.stages) done += s.status == "done";
  // A running pipeline's run.json holds the time of its last update, not of the run.
  const bool running = text(run.meta, "status") == "running";
  kpi(os, "Pipeline time", running ? std::string("running") : or_none(number(run.meta, "seconds"), duration),
      count(static_cast<double>(done)) + " of " + count(static_cast<double>(run.stages.size())) + " stages done");
  const Stage* teacher = teacher_stage(run);
  const Stage* fin = final_stage(run);
  const std::string final = text(run.meta, "final");
  kpi(os, "Final artifact",
      final.empty() ? kNone : "<span title=\"" + html_escape(final) + "\">" + html_escape(final) + "</span>",
      !fin ? std::string("no model yet") : (final.empty() ? "latest model: stage " : "stage ") + html_escape(fin->name),
      final.empty() ? "" : "path");
  const auto t_bytes = teacher ? bytes_of(*teacher) : std::nullopt, f_bytes = final_bytes(run, fin);
  const bool ratio = t_bytes && f_bytes && *f_bytes > 0;
  kpi(os, "Compression", ratio ? format_number(*t_bytes / *f_bytes, 1) + "&times;" : kNone,
      or_none(t_bytes, kilobytes) + " kB &rarr; " + or_none(f_bytes, kilobytes) + " kB");
  const auto t_acc = teacher ? accuracy_of(*teacher) : std::nullopt, f_acc = final_accuracy(run, fin);
  const std::optional<double> delta = t_acc && f_acc ? std::optional<double>((*f_acc - *t_acc) * 100) : std::nullopt;
  kpi(os, "Accuracy", or_none(f_acc, [](double a) { return percent(a); }),
      delta ? "<span class=\"" + std::string(*delta < 0 ? "bad" : "good") + "\">" + (*delta < 0 ? "" : "+") +
                  format_number(*delta, 2) + " pp</span> vs teacher " + percent(*t_acc)
            : std::string("vs teacher: ") + kNone);
  const auto lat = fin && fin->summary ? fin->summary->latency_ms : std::nullopt;
  kpi(os, "Final latency", or_none(lat, [](double ms) { return format_number(ms, 3) + " ms"; }),
      lat ? "p50, batch 1, 1 thread, " + html_escape(fin->summary->engine) : std::string("not measured"));
  os << "</div></div></header>\n";
}

void write_stage_row(std::ostream& os, const Stage& s, size_t index) {
  const Summary none;
  const Summary& m = s.summary ? *s.summary : none;
  os << "<tr" << stage_attr(s) << "><td class=\"num muted\">" << index + 1 << "</td><td><span class=\"sw\" style=\"background:"
     << s.color << "\"></span>" << html_escape(s.name);
  if (!s.note.empty()) os << "<div class=\"note\">" << html_escape(s.note) << "</div>";
  os << "</td><td>" << html_escape(s.kind.empty() ? kNone : s.kind) << "</td><td><span class=\"badge "
     << status_class(s.status) << "\">" << html_escape(s.status) << "</span></td><td class=\"num\">"
     << or_none(m.accuracy, [](double a) { return percent(a); }) << "</td><td class=\"num\">"
     << or_none(m.file_bytes, kilobytes) << "</td><td class=\"num\">" << or_none(m.parameters, count)
     << "</td><td class=\"num\">" << or_none(m.flops, count) << "</td><td class=\"num\">"
     << or_none(m.sparsity, [](double v) { return percent(v, 1); }) << "</td><td class=\"num\">"
     << or_none(m.latency_ms, [](double v) { return format_number(v, 3); })
     << (m.latency_ms && !m.engine.empty() ? " <span class=\"muted\">" + html_escape(m.engine) + "</span>" : "")
     << "</td><td class=\"num\">" << or_none(s.seconds, duration) << "</td><td>"
     << (s.skipped ? "<span title=\"inputs unchanged since an earlier run: its result was kept\">skipped</span>"
         : s.status == "done" || s.status == "failed" ? "ran"
                                                      : kNone)
     << "</td></tr>\n";
}

void write_stage_table(std::ostream& os, const Run& run) {
  os << "<h2>Stages</h2>\n<div class=\"card tablecard\"><table>\n<thead><tr><th class=\"num\">#</th><th>Stage</th>"
        "<th>Kind</th><th>Status</th><th class=\"num\">Accuracy</th><th class=\"num\">File (kB)</th>"
        "<th class=\"num\">Parameters</th><th class=\"num\">FLOPs / sample</th><th class=\"num\">Sparsity</th>"
        "<th class=\"num\">Latency (ms)</th><th class=\"num\">Time</th><th>Run</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < run.stages.size(); ++i) write_stage_row(os, run.stages[i], i);
  if (run.stages.empty()) os << "<tr><td colspan=\"12\" class=\"note\">The run has no stages yet.</td></tr>\n";
  os << "</tbody></table></div>\n";
}

PlotAxis axis(const std::string& label, bool log = false) {
  PlotAxis a;
  a.label = label, a.log = log;
  return a;
}

// A chart's place when there is nothing to draw: its title and why.
std::string no_data(const std::string& name, const std::string& title, const std::string& why) {
  return "<div class=\"nodata\" data-empty=\"" + html_escape(name) + "\"><div class=\"ct\">" + html_escape(title) +
         "</div><p>No data: " + html_escape(why) + "</p></div>";
}

// Indices of the points not dominated by another (one as small or smaller and more accurate),
// by increasing x: the Pareto frontier.
std::vector<size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<size_t> order(x.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] != x[b] ? x[a] < x[b] : y[a] > y[b]; });
  std::vector<size_t> front;
  for (size_t i : order)
    if (front.empty() || y[i] > y[front.back()]) front.push_back(i);
  return front;
}

struct ParetoAxis {
  std::string name, title, label, why;
  std::function<std::optional<double>(const Summary&)> value;
  std::function<std::string(double)> show;
};

std::string pareto_chart(const Run& run, const ParetoAxis& a) {
  std::vector<const Stage*> stages;
  std::vector<double> x, y;
  for (const Stage& s : run.stages) {
    const auto v = s.summary ? a.value(*s.summary) : std::nullopt;
    if (!accuracy_of(s) || !v || !(*v > 0) || !std::isfinite(*v)) continue;
    stages.push_back(&s), x.push_back(*v), y.push_back(*accuracy_of(s) * 100);
  }
  if (stages.empty()) return no_data(a.name, a.title, a.why);
  const auto front = pareto_front(x, y);
  PlotSeries line;
  line.name = "Pareto frontier", line.color = "#57606a", line.dashed = true, line.markers = false;
  for (size_t i : front) line.x.push_back(x[i]), line.y.push_back(y[i]);
  std::vector<PlotSeries> series{line};
  for (size_t i = 0; i < stages.size(); ++i) {
    PlotSeries p;
    p.color = stages[i]->color, p.key = stages[i]->dir, p.line = false;
    p.hollow = std::find(front.begin(), front.end(), i) == front.end();
    p.x = {x[i]}, p.y = {y[i]}, p.labels = {stages[i]->name};
    p.tips = {stages[i]->name + ": " + format_number(y[i], 2) + "% at " + a.show(x[i]) +
              (p.hollow ? " (dominated)" : " (on the frontier)")};
    series.push_back(p);
  }
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  const bool log = *hi >= 10 * *lo;
  return xy_chart({a.name, a.title, 560, 380}, axis(a.label + (log ? ", log scale" : ""), log),
                  axis("test accuracy (%)"), series);
}

void write_pareto(std::ostream& os, const Run& run) {
  os << "<h2>Accuracy against size and speed</h2>\n<div class=\"charts\">\n<div class=\"card\">"
     << pareto_chart(run, {"pareto_size", "Accuracy vs file size", "file size (kB)",
                           "no stage has both an accuracy and a file size yet",
                           [](const Summary& s) { return s.file_bytes ? std::optional<double>(*s.file_bytes / 1000) : std::nullopt; },
                           [](double kb) { return format_number(kb, 1, true) + " kB"; }})
     << "</div>\n<div class=\"card\">"
     << pareto_chart(run, {"pareto_latency", "Accuracy vs latency", "latency (ms, batch 1, 1 thread)",
                           "no stage has both an accuracy and a latency yet",
                           [](const Summary& s) { return s.latency_ms; },
                           [](double ms) { return format_number(ms, 3) + " ms"; }})
     << "</div>\n</div>\n";
}

// One line per stage with metrics: `value` of each epoch (scaled by `scale`).
std::string curve_chart(const Run& run, const ChartFrame& frame, const PlotAxis& ya,
                        const std::function<std::optional<double>(const Epoch&)>& value, double scale) {
  std::vector<PlotSeries> series;
  for (const Stage& s : run.stages) {
    PlotSeries p;
    p.name = s.name, p.color = s.color, p.key = s.dir;
    for (const Epoch& e : s.epochs) {
      const auto v = value(e);
      if (!v) continue;
      p.x.push_back(e.epoch), p.y.push_back(*v * scale);
      p.tips.push_back(s.name + ", epoch " + format_number(e.epoch, 0) + ": " + format_number(*v * scale, 4) + ya.unit);
    }
    if (!p.x.empty()) series.push_back(p);
  }
  if (series.empty()) return no_data(frame.name, frame.title, "no stage has written metrics.jsonl with this value");
  // Epochs run from the first to the last logged, with little padding.
  PlotAxis xa = axis("epoch");
  xa.integer = true;
  for (const PlotSeries& p : series) {
    xa.min = std::min(xa.min.value_or(p.x.front()), *std::min_element(p.x.begin(), p.x.end()));
    xa.max = std::max(xa.max.value_or(p.x.back()), *std::max_element(p.x.begin(), p.x.end()));
  }
  const double span = *xa.max - *xa.min;
  if (span < 1) xa.min.reset(), xa.max.reset();
  else xa.min = *xa.min - span * 0.04, xa.max = *xa.max + span * 0.04;
  return xy_chart(frame, xa, ya, series);
}

void write_training(std::ostream& os, const Run& run) {
  PlotAxis acc = axis("validation accuracy (%)"), loss = axis("train loss");
  acc.unit = "%";
  os << "<h2>Training curves</h2>\n<div class=\"charts\">\n<div class=\"card\">"
     << curve_chart(run, {"val_accuracy", "Validation accuracy per epoch", 560, 360}, acc,
                    [](const Epoch& e) { return e.val_accuracy; }, 100)
     << "</div>\n<div class=\"card\">"
     << curve_chart(run, {"train_loss", "Train loss per epoch", 560, 360}, loss,
                    [](const Epoch& e) { return e.train_loss; }, 1)
     << "</div>\n</div>\n";
}


// The stage whose layers are shown: the last with a sparse layer, else the final model's, else
// the last with layers at all.
const Stage* sparsity_stage(const Run& run) {
  for (auto it = run.stages.rbegin(); it != run.stages.rend(); ++it)
    for (const json& l : it->layers)
      if (number(l, "sparsity").value_or(0) > 0) return &*it;
  const Stage* fin = final_stage(run);
  if (fin && !fin->layers.empty()) return fin;
  for (auto it = run.stages.rbegin(); it != run.stages.rend(); ++it)
    if (!it->layers.empty()) return &*it;
  return nullptr;
}

std::string sparsity_chart(const Run& run) {
  const Stage* s = sparsity_stage(run);
  if (!s) return no_data("layer_sparsity", "Per-layer sparsity", "no stage lists its layers");
  std::vector<std::string> names;
  BarSeries bars{"", s->color, {}};
  for (const json& l : s->layers) {
    names.push_back(text(l, "name").empty() ? text(l, "op") : text(l, "name"));
    const auto v = number(l, "sparsity");
    bars.values.push_back(v ? std::optional<double>(*v * 100) : std::nullopt);
  }
  PlotAxis ya = axis("zero weights (%)");
  ya.min = 0.0, ya.max = 100.0, ya.unit = "%";
  const bool sparse = std::any_of(bars.values.begin(), bars.values.end(), [](const auto& v) { return v && *v > 0; });
  return bar_chart({"layer_sparsity", "Per-layer sparsity \xC2\xB7 stage " + s->name + (sparse ? "" : " (no zero weights)"),
                    1140, 340},
                   names, ya, {bars});
}

std::string sqnr_chart(const Stage& s) {
  std::vector<std::string> names;
  BarSeries weight{"weight SQNR", "#4e79a7", {}}, output{"output SQNR", "#f28e2b", {}};
  for (const json& l : s.quantization) {
    names.push_back(text(l, "node").empty() ? text(l, "weight") : text(l, "node"));
    weight.values.push_back(number(l, "weight_sqnr_db"));
    output.values.push_back(number(l, "output_sqnr_db"));
  }
  PlotAxis ya = axis("SQNR (dB), higher is better");
  ya.unit = " dB";
  return bar_chart({"sqnr_" + s.dir, "Quantization SQNR per layer \xC2\xB7 stage " + s.name, 1140, 340}, names, ya,
                   {weight, output});
}

void write_layers(std::ostream& os, const Run& run) {
  os << "<h2>Layers</h2>\n<div class=\"charts\">\n<div class=\"card wide\">" << sparsity_chart(run) << "</div>\n";
  bool any = false;
  for (const Stage& s : run.stages)
    if (!s.quantization.empty()) {
      os << "<div class=\"card wide\">" << sqnr_chart(s) << "</div>\n";
      any = true;
    }
  if (!any)
    os << "<div class=\"card wide\">"
       << no_data("sqnr", "Quantization SQNR per layer", "no quantize stage has reported its layers") << "</div>\n";
  os << "</div>\n";
}

void env_row(std::ostream& os, const std::string& key, const std::string& value) {
  os << "<tr><td>" << key << "</td><td>" << html_escape(value.empty() ? kNone : value) << "</td></tr>";
}

void write_environment(std::ostream& os, const Run& run) {
  os << "<h2>Recipe</h2>\n";
  if (run.recipe)
    os << "<pre class=\"recipe\">" << html_escape(*run.recipe) << "</pre>\n";
  else
    os << "<div class=\"card nodata\"><p>recipe.yaml is missing from the run folder.</p></div>\n";
  const json& m = run.meta.value("machine", json::object());
  os << "<h2>Environment</h2>\n<div class=\"env\">\n<div class=\"card tablecard\"><table>";
  env_row(os, "pare", text(run.meta, "pare_version"));
  env_row(os, "libtorch", text(run.meta, "torch_version"));
  env_row(os, "report written by", std::string("pare ") + PARE_VERSION);
  env_row(os, "run folder", run.dir);
  os << "</table></div>\n<div class=\"card tablecard\"><table>";
  env_row(os, "CPU", text(m, "cpu"));
  env_row(os, "cores", or_none(number(m, "cores"), count));
  env_row(os, "memory", or_none(number(m, "memory_bytes"), [](double b) { return format_number(b / 1e9, 1) + " GB"; }));
  env_row(os, "OS", text(m, "os"));
  env_row(os, "host", text(m, "host"));
  os << "</table></div>\n</div>\n";
}

}  // namespace

std::string write_report(const std::string& run_dir, const std::string& out) {
  const Run run = read_run(run_dir);
  const std::string title = text(run.meta, "name").empty() ? run_dir : text(run.meta, "name");
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
     << "<meta name=\"generator\" content=\"pare " << PARE_VERSION << "\">\n<title>" << html_escape(title)
     << " \xC2\xB7 pare report</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  write_header(os, run);
  os << "<main class=\"wrap\">\n";
  write_stage_table(os, run);
  write_pareto(os, run);
  write_training(os, run);
  write_layers(os, run);
  write_environment(os, run);
  os << "<footer>Written by <code>pare report</code>. Hover a stage's row, point or line to find it in every "
        "table and chart; hover a point or bar for its values.</footer>\n</main>\n<script>"
     << kScript << "</script>\n</body>\n</html>\n";
  const std::string path = out.empty() ? join_path(run_dir, "report.html") : out;
  write_file_atomic(path, os.str());
  return path;
}

}  // namespace pare::pipeline
