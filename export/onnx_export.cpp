// Writes a core::Graph for a target: picks the initializers to store sparse (COO), stamps the
// metadata, serializes through core's one ONNX writer, has pare_rt load the bytes for --target rt,
// then writes the file atomically.
#include "export/onnx_export.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "rt/rt.h"

#ifndef PARE_VERSION
#define PARE_VERSION "0.1.0"
#endif

namespace pare::exporter {

const char* target_name(Target t) { return t == Target::kRt ? "rt" : "onnx"; }

const char* sparse_mode_name(SparseMode m) {
  switch (m) {
    case SparseMode::kAuto: return "auto";
    case SparseMode::kOn: return "on";
    case SparseMode::kOff: return "off";
  }
  return "?";
}

Target parse_target(const std::string& s, const std::string& option) {
  if (s == "onnx") return Target::kOnnx;
  if (s == "rt") return Target::kRt;
  throw InputError(option + " must be onnx or rt, got '" + s + "'").about(option);
}

SparseMode parse_sparse_mode(const std::string& s, const std::string& option) {
  if (s == "auto") return SparseMode::kAuto;
  if (s == "on") return SparseMode::kOn;
  if (s == "off") return SparseMode::kOff;
  throw InputError(option + " must be auto, on or off, got '" + s + "'").about(option);
}

int ExportResult::sparse_count() const {
  int n = 0;
  for (const auto& d : initializers) n += d.sparse ? 1 : 0;
  return n;
}

double ExportResult::sparse_density() const {
  int64_t nonzeros = 0, elements = 0;
  for (const auto& d : initializers)
    if (d.sparse) nonzeros += d.nonzeros, elements += d.elements;
  return elements ? double(nonzeros) / double(elements) : 0;
}

at::Tensor positive_zeros(const at::Tensor& t) {
  if (!at::isFloatingType(t.scalar_type()) || t.numel() == 0) return t;
  const at::Tensor negative_zero = at::logical_and(t.eq(0), at::signbit(t));
  if (!negative_zero.any().item<bool>()) return t;
  return at::where(negative_zero, at::zeros({}, t.options()), t);
}

std::vector<InitializerDecision> plan_sparse(const core::Graph& g, SparseMode mode) {
  std::vector<InitializerDecision> r;
  for (const auto& [name, original] : g.initializers) {
    const at::Tensor t = positive_zeros(original);
    InitializerDecision d;
    d.name = name;
    d.dtype = core::dtype_name(t.scalar_type());
    d.shape = t.sizes().vec();
    d.elements = t.numel();
    if (t.dim() == 0 || t.numel() == 0) {  // ONNX has no sparse form for these
      d.nonzeros = t.count_nonzero().item<int64_t>();
      d.why = t.dim() == 0 ? "a scalar" : "empty";
      r.push_back(std::move(d));
      continue;
    }
    const core::SparseCost c = core::sparse_cost(name, t);
    d.nonzeros = c.nonzeros;
    d.dense_bytes = c.dense_bytes;
    d.sparse_bytes = c.sparse_bytes;
    const bool smaller = c.sparse_bytes < c.dense_bytes;
    const bool has_zero = c.nonzeros < c.elements;
    switch (mode) {
      case SparseMode::kOff:
        d.why = "sparse off";
        break;
      case SparseMode::kOn:
        d.sparse = has_zero;
        d.why = !has_zero ? "no zeros" : smaller ? "sparse on (COO is smaller)" : "sparse on (COO is larger)";
        break;
      case SparseMode::kAuto:
        d.sparse = has_zero && smaller;
        d.why = !has_zero ? "no zeros" : smaller ? "COO is smaller" : "COO would be larger";
        break;
    }
    r.push_back(std::move(d));
  }
  return r;
}

namespace {

std::string export_line(const ExportOptions& opts, int sparse, size_t total) {
  std::ostringstream os;
  os << "pare " << PARE_VERSION << " export (target " << target_name(opts.target_) << ", sparse "
     << sparse_mode_name(opts.sparse_) << "): " << sparse << " of " << total
     << " initializers stored as sparse_initializer (COO)";
  return os.str();
}

}  // namespace

ExportResult export_model(const core::Graph& g, const std::string& path, const ExportOptions& opts) {
  for (const auto& [key, value] : opts.metadata_) {
    PARE_CHECK(!key.empty(), "export metadata needs a key, got '=", value, "'");
    PARE_CHECK(key != "pare.version" && key != "pare.export", "export metadata key '", key,
               "' is pare's own (it says which pare wrote the file and how); choose another key");
  }
  core::Graph out = g;  // initializers are shared, not copied, unless they hold a -0.0
  for (auto& [name, t] : out.initializers) t = positive_zeros(t);
  ExportResult r;
  r.path = path;
  r.target = opts.target_;
  r.sparse = opts.sparse_;
  r.initializers = plan_sparse(out, opts.sparse_);
  std::set<std::string> sparse;
  int64_t saved = 0;
  for (const auto& d : r.initializers)
    if (d.sparse) {
      sparse.insert(d.name);
      saved += d.dense_bytes - d.sparse_bytes;
    }

  for (const auto& [key, value] : opts.metadata_) out.metadata[key] = value;
  out.metadata["pare.version"] = PARE_VERSION;
  out.metadata["pare.export"] = export_line(opts, static_cast<int>(sparse.size()), r.initializers.size());

  std::string bytes;
  try {
    bytes = core::serialize_onnx(out, core::OnnxSaveOptions().sparse(sparse));
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw Error("cannot export to '" + path + "': " + e.what());
  }
  if (opts.target_ == Target::kRt) {
    // The runtime reads the very bytes that will be written.
    try {
      rt::Model::load_bytes(bytes, path);
    } catch (const std::exception& e) {
      throw InputError("cannot export to '" + path + "' for pare_rt (target rt), nothing written: pare_rt " +
                       "refuses the model: " + e.what()).about("target");
    }
  }
  write_file_atomic(path, bytes);
  r.bytes_written = static_cast<int64_t>(bytes.size());
  r.bytes_dense = r.bytes_written + saved;
  return r;
}

nlohmann::json to_json(const ExportResult& r) {
  nlohmann::json inits = nlohmann::json::array();
  for (const auto& d : r.initializers)
    inits.push_back({{"name", d.name},
                     {"dtype", d.dtype},
                     {"shape", d.shape},
                     {"elements", d.elements},
                     {"nonzeros", d.nonzeros},
                     {"density", d.density()},
                     {"dense_bytes", d.dense_bytes},
                     {"sparse_bytes", d.sparse_bytes},
                     {"sparse", d.sparse},
                     {"why", d.why}});
  return {{"out", r.path},
          {"target", target_name(r.target)},
          {"sparse_mode", sparse_mode_name(r.sparse)},
          {"bytes_dense", r.bytes_dense},
          {"bytes_written", r.bytes_written},
          {"ratio", r.bytes_written ? double(r.bytes_dense) / double(r.bytes_written) : 0.0},
          {"sparse_initializers", r.sparse_count()},
          {"sparse_density", r.sparse_density()},
          {"initializers", inits}};
}

std::string to_text(const ExportResult& r) {
  std::ostringstream os;
  char line[256];
  os << "wrote   " << r.path << " (target " << target_name(r.target)
     << (r.target == Target::kRt ? ": pare_rt loads it" : "") << ")\n";
  std::snprintf(line, sizeof line, "bytes   %lld dense -> %lld written (%.2fx smaller)\n", (long long)r.bytes_dense,
                (long long)r.bytes_written, r.bytes_written ? double(r.bytes_dense) / double(r.bytes_written) : 0.0);
  os << line;
  int64_t nonzeros = 0, elements = 0;
  for (const auto& d : r.initializers)
    if (d.sparse) nonzeros += d.nonzeros, elements += d.elements;
  std::snprintf(line, sizeof line, "sparse  %d of %zu initializers as COO (sparse %s)", r.sparse_count(),
                r.initializers.size(), sparse_mode_name(r.sparse));
  os << line;
  if (r.sparse_count()) {
    std::snprintf(line, sizeof line, ", density %.1f%% (%lld of %lld values kept)", 100 * r.sparse_density(),
                  (long long)nonzeros, (long long)elements);
    os << line;
  }
  os << "\n";
  for (const auto& d : r.initializers) {
    if (!d.sparse) continue;
    std::string shape = "[";
    for (size_t i = 0; i < d.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(d.shape[i]);
    shape += "]";
    std::snprintf(line, sizeof line, "  %-28s %-8s %-14s density %5.1f%%  %lld -> %lld bytes\n",
                  d.name.substr(0, 28).c_str(), d.dtype.c_str(), shape.c_str(), 100 * d.density(),
                  (long long)d.dense_bytes, (long long)d.sparse_bytes);
    os << line;
  }
  return os.str();
}

}  // namespace pare::exporter
