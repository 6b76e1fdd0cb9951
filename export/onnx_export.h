// Writes a core::Graph as a compact file for a target: ONNX with pruned weights stored as sparse
// initializers (COO) where that makes the file smaller, metadata saying how it was made, and for
// pare_rt the guarantee that the runtime loads it.
//
//   ExportResult r = export_model(g, "student.rt.onnx",
//                                 ExportOptions().target(Target::kRt).sparse(SparseMode::kAuto));
//   std::cout << to_text(r);   // 1066440 dense -> 321112 written, 3 of 6 initializers sparse
//
// A COO initializer stores each nonzero as its value plus an int64 linear index: 8 + element-size
// bytes per nonzero against element-size bytes per element dense. So it pays below a density of
// 1/3 for float32 and 1/9 for int8 (a 90%-pruned fp32 layer shrinks about 3.3x; a 90%-pruned int8
// layer barely does). Readers (ONNX Runtime, pare, pare_rt) make sparse initializers dense at load:
// the file is smaller, memory and speed at run time are those of the dense model.
//
// Masking a negative weight leaves -0.0, which core's writer keeps (its sparse form is lossless,
// bit for bit) and would therefore store as a value. The export writes every floating-point zero as
// +0.0 first: the same number, and the pruned positions can go.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"

namespace pare::exporter {

/// Where the file is going. kOnnx: any ONNX runtime (the ONNX checker passes it); kRt: pare_rt
/// must also load it, else nothing is written.
enum class Target { kOnnx, kRt };

/// Which initializers become sparse_initializer (COO).
///  - kAuto: those whose COO entry is smaller than their dense one (protobuf framing included);
///  - kOn: every initializer with at least one zero, whether that is smaller or not
///    (for runtimes or tools that want the sparse form; the file may grow). Scalars and empty
///    tensors stay dense in every mode: ONNX has no sparse form for them;
///  - kOff: none.
enum class SparseMode { kAuto, kOn, kOff };

/// "onnx" / "rt".
const char* target_name(Target t);
/// "auto" / "on" / "off".
const char* sparse_mode_name(SparseMode m);
/// Parses "onnx" or "rt"; throws InputError naming `option` otherwise.
Target parse_target(const std::string& s, const std::string& option = "target");
/// Parses "auto", "on" or "off"; throws InputError naming `option` otherwise.
SparseMode parse_sparse_mode(const std::string& s, const std::string& option = "sparse");

/// Options of export_model.
struct ExportOptions {
  /// The target (default: ONNX).
  ExportOptions& target(Target v) { target_ = v; return *this; }
  /// Which initializers to store sparse (default: auto).
  ExportOptions& sparse(SparseMode v) { sparse_ = v; return *this; }
  /// One more metadata_props entry (added to the model's own pare.normalize, pare.quantization,
  /// ...; replaces an entry of the same key). pare.version and pare.export are pare's own.
  ExportOptions& metadata(const std::string& key, const std::string& value) {
    metadata_[key] = value;
    return *this;
  }

  Target target_ = Target::kOnnx;
  SparseMode sparse_ = SparseMode::kAuto;
  std::map<std::string, std::string> metadata_;
};

/// How one initializer was written, and why.
struct InitializerDecision {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t elements = 0, nonzeros = 0;
  int64_t dense_bytes = 0, sparse_bytes = 0;  ///< its entry in the file either way (0 for scalars, empty)
  bool sparse = false;                        ///< written as sparse_initializer
  std::string why;                            ///< "smaller as COO", "no zeros", ...
  /// nonzeros / elements.
  double density() const { return elements ? double(nonzeros) / double(elements) : 0; }
};

/// What export_model wrote.
struct ExportResult {
  std::string path;
  Target target = Target::kOnnx;
  SparseMode sparse = SparseMode::kAuto;
  int64_t bytes_dense = 0;    ///< the same model with every initializer dense (what save_onnx writes)
  int64_t bytes_written = 0;  ///< the file written
  std::vector<InitializerDecision> initializers;  ///< every initializer, in name order

  /// Initializers written sparse.
  int sparse_count() const;
  /// Nonzeros / elements over the initializers written sparse (0 when none).
  double sparse_density() const;
};

/// `t` with every -0.0 made +0.0 (`t` itself, no copy, when it holds none or is not floating).
at::Tensor positive_zeros(const at::Tensor& t);

/// Decides, per initializer of `g`, whether `mode` writes it sparse, with both sizes (zeros counted
/// after positive_zeros, as export_model writes them).
std::vector<InitializerDecision> plan_sparse(const core::Graph& g, SparseMode mode);

/// Writes `g` to `path` for `opts.target_`, atomically: floating-point zeros as +0.0, the
/// initializers plan_sparse picks as sparse_initializer, the model's metadata plus pare.version and
/// pare.export (target, sparse mode, how many initializers went sparse) and `opts.metadata_`.
/// Throws InputError for a metadata key pare.version or pare.export, and for --target rt when
/// pare_rt cannot load the result (naming the node and pare_rt's reason); Error when the ONNX
/// checker rejects the model or it exceeds protobuf's 2 GB limit. Nothing is written on failure.
ExportResult export_model(const core::Graph& g, const std::string& path, const ExportOptions& opts = {});

/// The result as `pare export --json` prints it.
nlohmann::json to_json(const ExportResult& r);
/// A few lines for people: bytes before and after, what went sparse at which density.
std::string to_text(const ExportResult& r);

}  // namespace pare::exporter
