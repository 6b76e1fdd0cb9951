// Engines: how pare executes a model (a teacher while distilling, `pare eval`, `pare run`,
// `pare bench` alike). Every engine runs in eval mode under no-grad, so its outputs never require
// grad and its BatchNorm running statistics never move.
//
//   auto model = engine::load("runs/cnn.onnx");        // or "cnn" (zoo), "t.pt" (TorchScript), "cache:DIR"
//   auto out = model->forward(x, {"relu2"});           // out["logits"], out["relu2"]
//   auto fast = engine::load("cnn.int8.onnx", 0, engine::Kind::kRt);   // on pare_rt
//
// Kinds:
//   TorchEngine        a core::Graph (ONNX file or zoo spec) on libtorch: logits plus any
//                      intermediate value
//   RtEngine           an ONNX file or zoo spec run by pare_rt (rt/), the oneDNN inference
//                      runtime: no autograd, int8 kernels for a QDQ model (--teacher-engine rt)
//   ShardedEngine      a graph sharded over the ranks of a process group (tensor or pipeline parallel)
//   TorchScriptEngine  a torch.jit module (.pt/.ts/.torchscript): a black box yielding logits
//   CachedEngine       a teacher's outputs read back from a cache (engine/cache.h)
// Combining engines (an ensemble of teachers) is distillation's business: distill/teacher.h.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "core/module.h"
#include "dist/shard.h"
#include "rt/rt.h"

namespace pare::engine {

/// A model as pare runs it: under no-grad, in eval mode. As a teacher, its forward is computed once
/// per step and reused by every loss that needs it.
class Engine {
 public:
  virtual ~Engine() = default;

  /// Logits for a batch, plus the named intermediate values (for hint / attention losses). The
  /// returned map holds "logits" and every name in `values` ("logits" may itself be requested).
  /// Results are on `x`'s device and never require grad. Throws InputError naming the teacher and
  /// the value if it cannot provide one, or naming the teacher when it cannot run on `x`.
  virtual std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                              const std::vector<std::string>& values) = 0;

  /// forward() on a loader batch; teachers that look samples up by dataset row (CachedEngine)
  /// override it and use `b.rows`.
  virtual std::unordered_map<std::string, at::Tensor> forward_batch(const core::Batch& b,
                                                                    const std::vector<std::string>& values) {
    return forward(b.x, values);
  }

  /// Logits only: forward(x, {}).at("logits").
  at::Tensor logits(const at::Tensor& x) { return forward(x, {}).at("logits"); }

  /// True if the teacher can return intermediate value `name` (graph teachers: any value in the
  /// graph; black boxes and ensembles: none besides "logits").
  virtual bool has_value(const std::string& name) const = 0;

  /// Number of output classes (the logits' last dim), found by a probe forward on the first row
  /// of `example` (a batch, [N, ...] with N >= 1) the first time it is needed, then remembered.
  /// The default probes logits() once and remembers the answer.
  virtual int64_t num_classes(const at::Tensor& example);

  /// For messages: "graph teacher 'cnn.onnx'".
  virtual std::string describe() const = 0;

  /// True when forward() is collective (ShardedEngine): every rank must call it, the same number
  /// of times, even with an empty batch.
  virtual bool collective() const { return false; }

  /// Moves the teacher's weights to `d`; inputs on another device are copied there per forward.
  virtual void to(const at::Device& d) = 0;

 private:
  std::optional<int64_t> classes_;
};

/// A core::Graph (ONNX file or zoo spec) run by core::Module in eval mode under at::NoGradGuard.
/// The first graph output is the logits. The graph must have exactly one input; a floating-point
/// batch is cast to the input's dtype when that is floating too (a float64 .npy feeds a float32 model).
class TorchEngine : public Engine {
 public:
  /// `name` is used in messages (usually the spec or file it came from). Throws InputError for a
  /// malformed graph, or one without exactly one input or without outputs.
  TorchEngine(core::Graph g, std::string name);

  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override;
  std::string describe() const override;
  void to(const at::Device& d) override;

  /// The module that runs the graph (always in eval mode).
  const core::Module& module() const { return module_; }
  const std::string& name() const { return name_; }

 private:
  core::Module module_;
  std::string name_;
};

/// An ONNX file or zoo spec run by pare_rt on the CPU: the frozen teacher needs no autograd, so the
/// oneDNN runtime (weights reordered once, int8 kernels for a QDQ teacher) takes the place of the
/// libtorch interpreter. The first graph output is the logits; intermediate values for hints are
/// computed when asked for (the model is reloaded with them as outputs, kept out of fusions).
/// Floating batches are cast to float32; the input must be contiguous on the CPU.
class RtEngine : public Engine {
 public:
  /// Throws InputError naming the spec when it is not an ONNX file or zoo spec pare_rt can run.
  RtEngine(const std::string& spec, uint64_t seed = 0);
  ~RtEngine() override;

  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override;
  std::string describe() const override;
  /// Stays on the CPU: batches from another device are copied to it, the logits back.
  void to(const at::Device& d) override;

  const rt::Model& model() const { return *model_; }

 private:
  std::string spec_;
  uint64_t seed_;
  std::unique_ptr<rt::Model> model_;
  std::vector<std::string> extra_;  ///< the intermediate values model_ returns after the logits
};

/// Which engine runs a graph (ONNX file or zoo spec): libtorch or pare_rt.
enum class Kind { kTorch, kRt };
/// "torch" or "rt" as a Kind; throws InputError naming `option` otherwise.
Kind parse_kind(const std::string& s, const std::string& option);

/// A graph teacher sharded over the ranks of a process group (dist::ShardedModel): tensor parallel
/// or pipeline. It yields logits only, and its forward is collective: every rank calls it with its
/// own batch, the same number of times in the same order. Floating batches are cast to the input's
/// dtype as in TorchEngine. Runs on the CPU.
class ShardedEngine : public Engine {
 public:
  /// `max_stage_bytes`: a pipeline stage's weight limit (dist::pipeline_stage). Throws InputError for
  /// a graph without exactly one input or without outputs.
  ShardedEngine(const core::Graph& g, std::string name, dist::TeacherParallel mode,
                 std::shared_ptr<dist::ProcessGroup> pg, int64_t max_stage_bytes = 0);
  ~ShardedEngine() override;

  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override { return name == "logits"; }
  /// From the graph's shapes, without a (collective) forward.
  int64_t num_classes(const at::Tensor& example) override;
  std::string describe() const override;
  bool collective() const override { return true; }
  /// Stays on the CPU (sharded teachers do not run on GPUs yet): batches from another device are
  /// copied to it, the logits back.
  void to(const at::Device& d) override;

  const dist::ShardReport& report() const { return model_->report(); }

 private:
  std::unique_ptr<dist::ShardedModel> model_;
  std::string name_;
  at::ScalarType input_dtype_;
  int64_t classes_ = 0;
};

/// A TorchScript module (torch::jit::load) used as a black box yielding logits: the output itself
/// when it is a tensor, the first element when it is a tuple or list. Loaded onto the CPU with its
/// floating-point parameters and buffers cast to float32, run in eval() mode under no-grad on
/// float32 inputs (floating batches of other dtypes are cast; integer token ids pass unchanged);
/// logits are returned as float32.
class TorchScriptEngine : public Engine {
 public:
  /// Throws InputError naming `path` when the file is missing or is not a TorchScript archive.
  explicit TorchScriptEngine(const std::string& path);
  ~TorchScriptEngine() override;

  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override;
  std::string describe() const override;
  void to(const at::Device& d) override;

  const std::string& path() const { return path_; }

 private:
  struct Impl;  // keeps <torch/script.h> out of this header
  std::unique_ptr<Impl> impl_;
  std::string path_;
  at::Device device_ = at::kCPU;
};

/// Builds an engine from a spec: "cache:DIR" -> CachedEngine (pare teacher-cache); a zoo spec
/// (weights seeded with `seed`) or an ONNX file ("*.onnx", or any existing file without a
/// TorchScript suffix) -> TorchEngine; "*.pt", "*.ts", "*.torchscript" -> TorchScriptEngine.
/// Throws InputError naming the file when it is missing or cannot be loaded.
/// With Kind::kRt, ONNX and zoo specs run on pare_rt (RtEngine); caches and TorchScript are
/// refused then.
std::unique_ptr<Engine> load(const std::string& spec, uint64_t seed = 0, Kind kind = Kind::kTorch);

/// The graph of a graph spec (zoo spec or ONNX file), with load's messages.
/// Throws InputError naming the spec when it is missing, or a cache or TorchScript teacher.
core::Graph load_graph(const std::string& spec, uint64_t seed = 0);

/// Checks a teacher (any engine) and a student agree: the same number of classes (logits' last dim) on the first
/// row of `example`. The student runs in eval mode under no-grad; its train/eval mode is restored.
/// Throws InputError "graph teacher 'x' has K classes but student 'y' has M" otherwise.
void check_compatible(Engine& teacher, core::Module& student, const at::Tensor& example);

}  // namespace pare::engine
