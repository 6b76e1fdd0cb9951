// ONNX's backend node tests (libonnx-testdata: ONNX 1.12, the version of libonnx-dev) through
// pare's interpreter (core::load_onnx, core::Module) or, with --engine rt, through the edge
// runtime pare_rt (its own expectations file), compared as ONNX's backend runner compares
// (onnx/backend/test/runner: the same dtype and shape, then rtol 1e-3 and atol 1e-7 with NaN equal
// to NaN; integers and booleans exactly). Each test ends as one of
//   pass          every output of every data set matches;
//   refused       pare refuses it cleanly (InputError: an op, variant or dtype it does not implement);
//   not-runnable  an input or output is not a tensor pare has (sequence, optional, string);
//   wrong         an output differs (named, with the worst element);
//   error         another exception (a libtorch error, an internal error).
// Every test that does not pass is listed in the expectations file with its outcome and a reason:
// tests/conformance/onnx_node_expected.txt. The run fails when a test ends otherwise than listed,
// so a pass that turns into a failure fails it, and so does a listed test that now passes (remove
// it from the list). `--update` rewrites the list from this run: the reason is the outcome's
// message, but for a listing of the same outcome whose reason starts with '[' (written by hand,
// such as "[random] ..."), which is kept.
//
//   onnx_node_tests [--data DIR] [--engine torch|rt] [--expected FILE] [--update] [--only SUBSTRING]... [-v]
// --only, given one or more times, runs the tests whose names hold one of the substrings (the
// PyPI onnx package's newer node tests of the transformer ops run this way: tests/CMakeLists.txt).
// Prints the outcome of every test that differs from its listing, the counts, and per op family
// (the first node's op type) the counts of each outcome.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/onnx_reader.h"
#include "export/rt_bridge.h"

namespace {

const char* const kOutcomes[] = {"pass", "refused", "not-runnable", "wrong", "error"};

struct Outcome {
  std::string kind = "pass", detail;
};

std::vector<std::string> list_dir(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// input_0.pb, input_1.pb, ... (numeric order) of a data set.
std::vector<std::string> numbered(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (size_t i = 0; pare::file_exists(pare::join_path(dir, prefix + std::to_string(i) + ".pb")); ++i)
    out.push_back(pare::join_path(dir, prefix + std::to_string(i) + ".pb"));
  return out;
}

std::string one_line(std::string s) {
  s = s.substr(0, s.find('\n'));
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// "" when `got` matches `want` as ONNX's runner compares, else what differs.
std::string compare(const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined()) return "the output was not produced";
  if (got.scalar_type() != want.scalar_type())
    return std::string("dtype ") + c10::toString(got.scalar_type()) + ", expected " + c10::toString(want.scalar_type());
  if (got.sizes() != want.sizes()) return "shape " + c10::str(got.sizes()) + ", expected " + c10::str(want.sizes());
  if (got.numel() == 0) return "";
  const at::Tensor g = got.cpu();
  if (!at::isFloatingType(want.scalar_type())) {
    if (at::equal(g, want)) return "";
    const int64_t at = g.ne(want).flatten().nonzero()[0].item<int64_t>();
    return "element " + std::to_string(at) + " is " + c10::str(g.flatten()[at].item()) + ", expected " +
           c10::str(want.flatten()[at].item());
  }
  const at::Tensor a = g.to(at::kDouble), b = want.to(at::kDouble);
  const at::Tensor both_nan = a.isnan().logical_and(b.isnan());
  const at::Tensor same_inf = a.isinf().logical_and(a.eq(b));
  const at::Tensor close = (a - b).abs().le(1e-7 + 1e-3 * b.abs()).logical_or(both_nan).logical_or(same_inf);
  if (close.all().item<bool>()) return "";
  const int64_t at = close.logical_not().flatten().nonzero()[0].item<int64_t>();
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld is %.9g, expected %.9g (rtol 1e-3, atol 1e-7)", (long long)at,
                a.flatten()[at].item<double>(), b.flatten()[at].item<double>());
  return buf;
}

// A loaded model on one engine: the interpreter (core::Module) or the edge runtime (pare_rt).
class Engine {
 public:
  Engine(const std::string& engine, const std::string& model) {
    if (engine == "rt") {
      rt_ = std::make_unique<pare::rt::Model>(pare::exporter::load_rt_model(model));
      for (const auto& v : rt_->outputs()) names_.push_back(v.name);
    } else {
      pare::core::Graph g = pare::core::load_onnx(model);
      for (const auto& v : g.outputs) names_.push_back(v.name);
      module_ = std::make_unique<pare::core::Module>(std::move(g), pare::core::Module::Use::kFrozen);
    }
  }
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs) {
    if (module_) return module_->forward(inputs);
    std::vector<pare::rt::TensorView> views;
    for (auto& t : inputs) {
      t = t.contiguous();
      views.push_back(pare::exporter::rt_view(t));
    }
    std::vector<at::Tensor> out;
    for (const auto& v : rt_->run(views)) out.push_back(pare::exporter::from_rt(v));
    return out;
  }
  const std::string& output_name(size_t i) const { return names_.at(i); }

 private:
  std::unique_ptr<pare::core::Module> module_;
  std::unique_ptr<pare::rt::Model> rt_;
  std::vector<std::string> names_;
};

// Runs one test folder (model.onnx and test_data_set_*/) on `engine` ("torch" or "rt").
Outcome run_test(const std::string& dir, const std::string& engine) {
  const std::string model = pare::join_path(dir, "model.onnx");
  Outcome o;
  try {
    // Inputs and outputs that are not tensors pare has: sequences, optionals, strings.
    const auto m = pare::reader::read_model(model);
    for (const auto* list : {&m.inputs, &m.outputs})
      for (const auto& v : *list)
        if (!v.is_tensor || v.elem_type == 8)
          return {"not-runnable", "'" + v.name + "' is " + (v.is_tensor ? "a string tensor" : "not a tensor")};
    Engine e(engine, model);
    for (const auto& set : list_dir(dir, "test_data_set_")) {
      const std::string sd = pare::join_path(dir, set);
      std::vector<at::Tensor> inputs;
      for (const auto& f : numbered(sd, "input_")) inputs.push_back(pare::core::load_tensor_pb(f));
      const auto wants = numbered(sd, "output_");
      const std::vector<at::Tensor> outputs = e.run(inputs);
      if (outputs.size() != wants.size())
        return {"wrong", set + ": " + std::to_string(outputs.size()) + " outputs, expected " + std::to_string(wants.size())};
      for (size_t i = 0; i < wants.size(); ++i) {
        const std::string diff = compare(outputs[i], pare::core::load_tensor_pb(wants[i]));
        if (!diff.empty()) return {"wrong", set + ": output " + std::to_string(i) + " ('" + e.output_name(i) + "'): " + diff};
      }
    }
  } catch (const pare::InputError& e) {
    return {"refused", one_line(e.what())};
  } catch (const std::exception& e) {
    return {"error", one_line(e.what())};
  }
  return o;
}

// The op family of a test: its model's first node's op type.
std::string family_of(const std::string& dir) {
  try {
    const auto m = pare::reader::read_model(pare::join_path(dir, "model.onnx"));
    return m.nodes.empty() ? "?" : m.nodes[0].op_type;
  } catch (const std::exception&) {
    return "?";
  }
}

struct Listing {
  std::string kind, reason;
};

// The expectations file: "NAME OUTCOME REASON..." per line; '#' comments.
std::map<std::string, Listing> read_expected(const std::string& path) {
  std::map<std::string, Listing> out;
  std::ifstream in(path);
  PARE_CHECK(in.good(), "cannot read the expectations file '", path, "'");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, kind, reason;
    ls >> name >> kind;
    std::getline(ls, reason);
    reason.erase(0, reason.find_first_not_of(' '));
    PARE_CHECK(std::find(std::begin(kOutcomes) + 1, std::end(kOutcomes), kind) != std::end(kOutcomes), path, ":", n,
               ": outcome '", kind, "' is none of refused, not-runnable, wrong, error");
    PARE_CHECK(out.emplace(name, Listing{kind, reason}).second, path, ":", n, ": '", name, "' is listed twice");
  }
  return out;
}

void write_expected(const std::string& path, const std::map<std::string, Outcome>& results,
                    const std::map<std::string, Listing>& before, const std::string& engine, const std::string& data) {
  std::ostringstream s;
  s << "# ONNX node tests (" << data << ") that " << (engine == "rt" ? "pare_rt (--engine rt)" : "pare's interpreter")
    << " does not pass, with the outcome\n"
       "# and the reason: tests/conformance/onnx_node_tests.cpp. Written by `onnx_node_tests --update`,\n"
       "# which keeps the reasons written by hand (those starting with '[').\n";
  for (const auto& [name, o] : results) {
    if (o.kind == "pass") continue;
    auto it = before.find(name);
    const bool keep = it != before.end() && it->second.kind == o.kind && it->second.reason.rfind("[", 0) == 0;
    s << name << " " << o.kind << " " << (keep ? it->second.reason : o.detail) << "\n";
  }
  pare::write_file_atomic(path, s.str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/include/onnx/backend/test/data/node", expected, engine = "torch";
  std::vector<std::string> only;
  bool update = false, verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--expected" && i + 1 < argc) expected = argv[++i];
    else if (a == "--only" && i + 1 < argc) only.push_back(argv[++i]);
    else if (a == "--engine" && i + 1 < argc) engine = argv[++i];
    else if (a == "--update") update = true;
    else if (a == "-v") verbose = true;
    else {
      std::fprintf(stderr, "usage: onnx_node_tests [--data DIR] [--engine torch|rt] [--expected FILE] [--update] "
                           "[--only SUBSTRING]... [-v]\n");
      return 2;
    }
  }
  if (engine != "torch" && engine != "rt") {
    std::fprintf(stderr, "onnx_node_tests: --engine takes torch or rt, got '%s'\n", engine.c_str());
    return 2;
  }
  try {
    const auto tests = list_dir(data, "test_");
    PARE_CHECK(!tests.empty(), "no ONNX node tests in '", data, "' (scripts/install-deps installs libonnx-testdata)");
    // --update may write a list that does not exist yet.
    const bool none = expected.empty() || (update && !std::ifstream(expected).good());
    const auto listed = none ? std::map<std::string, Listing>() : read_expected(expected);
    std::map<std::string, Outcome> results;
    std::map<std::string, std::map<std::string, int>> families;
    std::map<std::string, int> totals;
    int unexpected = 0;
    for (const auto& t : tests) {
      if (!only.empty() && std::none_of(only.begin(), only.end(), [&](const std::string& o) { return t.find(o) != std::string::npos; }))
        continue;
      const std::string dir = pare::join_path(data, t);
      const Outcome o = run_test(dir, engine);
      results[t] = o;
      ++totals[o.kind];
      ++families[family_of(dir)][o.kind];
      auto it = listed.find(t);
      const std::string want = it == listed.end() ? "pass" : it->second.kind;
      if (o.kind != want && !expected.empty() && !update) {
        ++unexpected;
        std::printf("UNEXPECTED %s: %s, listed as %s%s%s\n", t.c_str(), o.kind.c_str(), want.c_str(),
                    o.detail.empty() ? "" : ": ", o.detail.c_str());
        if (o.kind == "pass") std::printf("  it passes now: remove it from %s\n", expected.c_str());
      } else if (verbose) {
        std::printf("%s: %s%s%s\n", t.c_str(), o.kind.c_str(), o.detail.empty() ? "" : ": ", o.detail.c_str());
      }
    }
    for (const auto& [name, l] : listed)
      if (only.empty() && !results.count(name)) {
        ++unexpected;
        std::printf("UNEXPECTED %s is listed but is not a test in %s\n", name.c_str(), data.c_str());
      }
    std::printf("\n%-28s", "op family");
    for (const char* k : kOutcomes) std::printf(" %12s", k);
    std::printf("\n");
    for (const auto& [f, counts] : families) {
      if (counts.size() == 1 && counts.count("pass") && !verbose) continue;  // the all-pass families are counted below
      std::printf("%-28s", f.c_str());
      for (const char* k : kOutcomes) std::printf(" %12d", counts.count(k) ? counts.at(k) : 0);
      std::printf("\n");
    }
    int all = 0;
    for (auto& [k, n] : totals) all += n;
    std::printf("\n%d tests:", all);
    for (const char* k : kOutcomes) std::printf(" %d %s,", totals[k], k);
    const int runnable = all - totals["not-runnable"];
    std::printf(" %.1f%% of the %d runnable ones pass\n", runnable ? 100.0 * totals["pass"] / runnable : 0.0, runnable);
    if (update) {
      write_expected(expected, results, listed, engine, data);
      std::printf("wrote %s\n", expected.c_str());
      return 0;
    }
    if (unexpected) std::printf("%d tests did not end as listed in %s\n", unexpected, expected.c_str());
    return unexpected ? 1 : 0;
  } catch (const pare::Error& e) {
    std::fprintf(stderr, "onnx_node_tests: %s\n", e.what());
    return 2;
  }
}
