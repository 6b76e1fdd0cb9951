#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/types.h>  // before clip_grad.h, which uses it without including it
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/onnx_io.h"
#include "core/tensor_io.h"
#include "dist/ddp.h"
#include "train/checkpoint.h"

namespace pare::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string format_eta(double s) {
  int t = static_cast<int>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d", t / 60, t % 60);
  return buf;
}

// A one-line progress bar on stderr, redrawn at most 10 times a second; silent when stderr is
// not a terminal (logs get one line per epoch instead).
class Progress {
 public:
  Progress(bool enabled, int64_t batch) : tty_(enabled && ::isatty(2)), batch_(batch) {}
  void update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss,
              double acc, double rate) {
    if (!tty_ || seconds_since(last_) < 0.1) return;
    last_ = Clock::now();
    double eta = rate > 0 ? (batches - batch) * (static_cast<double>(batch_) / rate) : 0;
    int width = 24, done = batches ? static_cast<int>(width * batch / batches) : 0;
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s%s] %lld/%lld loss %.4f acc %.2f%% %.0f samples/s ETA %s",
                 (long long)epoch, (long long)epochs, std::string(done, '#').c_str(),
                 std::string(width - done, '.').c_str(), (long long)batch, (long long)batches, loss,
                 acc * 100, rate, format_eta(eta).c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
  int64_t batch_;
  Clock::time_point last_ = Clock::now() - std::chrono::seconds(1);
};

// A language model's logits [N, T, vocab] with next-token labels [N, T] count token by token:
// as logits [N T, vocab] and labels [N T].
std::pair<at::Tensor, at::Tensor> per_token(const at::Tensor& logits, const at::Tensor& y) {
  if (logits.dim() == 3 && y.dim() == 2) return {logits.reshape({-1, logits.size(2)}), y.reshape({-1})};
  return {logits, y};
}

void check_logits(const at::Tensor& sequence_logits, const at::Tensor& labels, const std::string& where) {
  const auto [logits, y] = per_token(sequence_logits, labels);
  PARE_CHECK(logits.dim() == 2 && logits.size(0) == y.size(0), where,
             ": the model must output logits [N, classes] for N labels; got ", logits.sizes(),
             " for ", y.size(0), " labels");
  int64_t hi = y.max().item<int64_t>(), lo = y.min().item<int64_t>();
  PARE_CHECK(lo >= 0 && hi < logits.size(1), where, ": labels must lie in [0, ", logits.size(1),
             ") for a model with ", logits.size(1), " classes; got labels up to ", hi);
}

// The fields of an epoch's statistics and of a run's state (Trainer::State, but its history),
// each listed once with its JSON name, for the metrics file and checkpoints alike.
template <class Stats, class F>
void stats_fields(Stats& st, F&& f) {
  f("epoch", st.epoch);
  f("steps", st.steps);
  f("samples", st.samples);
  f("train_loss", st.train_loss);
  f("train_accuracy", st.train_accuracy);
  f("seconds", st.seconds);
  f("samples_per_s", st.samples_per_s);
}
template <class State, class F>
void state_fields(State& st, F&& f) {
  f("epoch", st.epoch);
  f("batch", st.batch);
  f("step", st.step);
  f("samples", st.samples);
  f("correct", st.correct);
  f("epochs_since_best", st.epochs_since_best);
  f("loss_sum", st.loss_sum);
  f("best_val", st.best_val);
  f("seconds", st.seconds);
  f("part_sums", st.part_sums);
}
// Visitors: write each field into a JSON object, or read it back.
auto to_json_of(nlohmann::json& j) {
  return [&j](const char* key, const auto& v) { j[key] = v; };
}
auto from_json_of(const nlohmann::json& j) {
  return [&j](const char* key, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_integral_v<T>) v = json_int_at<T>(j, key);  // a float there is no position
    else v = j.at(key).get<T>();
  };
}

nlohmann::json stats_json(const EpochStats& st) {
  nlohmann::json j = nlohmann::json::object();
  stats_fields(st, to_json_of(j));
  if (st.val_accuracy >= 0) {
    j["val_loss"] = st.val_loss;
    j["val_accuracy"] = st.val_accuracy;
  }
  for (auto& [k, v] : st.loss_parts) j["loss_" + k] = v;
  return j;
}

EpochStats stats_from_json(const nlohmann::json& j) {
  EpochStats st;
  stats_fields(st, from_json_of(j));
  st.val_loss = j.value("val_loss", -1.0);
  st.val_accuracy = j.value("val_accuracy", -1.0);
  for (auto& [k, v] : j.items())
    if (k.rfind("loss_", 0) == 0) st.loss_parts[k.substr(5)] = v.get<double>();
  return st;
}

// The default generator of GPU `d` (through the CUDA hooks: the CPU build links no CUDA symbol).
at::Generator cuda_generator(const at::Device& d) {
  return at::detail::getCUDAHooks().getDefaultGenerator(d.has_index() ? d.index() : 0);
}

// fp16's dynamic loss scaling, with torch.cuda.amp.GradScaler's defaults: the loss is multiplied by
// the scale before backward and the gradients divided by it before clipping and the step; a step
// whose gradients hold Inf or NaN is skipped and the scale halved; 2000 good steps double it.
struct LossScaler {
  bool enabled = false;
  double scale = 65536.0;
  int64_t good_steps = 0;

  at::Tensor scaled(const at::Tensor& loss) const { return enabled ? loss * scale : loss; }
  // Unscales the gradients in place; false (and the scale backed off) when one is not finite.
  bool unscale_and_update(const std::vector<at::Tensor>& params) {
    if (!enabled) return true;
    at::NoGradGuard no_grad;
    at::Tensor bad;
    for (const auto& p : params) {
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(1.0 / scale);
      at::Tensor b = g.isfinite().all().logical_not();
      bad = bad.defined() ? bad.logical_or(b) : b;
    }
    const bool ok = !bad.defined() || !bad.item<bool>();  // one device sync per step
    if (!ok) {
      scale *= 0.5;
      good_steps = 0;
    } else if (++good_steps >= 2000) {
      scale *= 2.0;
      good_steps = 0;
    }
    return ok;
  }
};

}  // namespace

void TrainerOptions::validate() const {
  PARE_CHECK_OPTION(epochs_ >= 1, "epochs", "must be at least 1, got ", epochs_);
  PARE_CHECK_OPTION(batch_size_ >= 1, "batch_size", "must be at least 1, got ", batch_size_);
  PARE_CHECK_OPTION(lr_ > 0 && std::isfinite(lr_), "lr", "must be a positive number, got ", lr_);
  PARE_CHECK_OPTION(optimizer_ == "adam" || optimizer_ == "adamw" || optimizer_ == "sgd", "optimizer",
                    "must be adam, adamw or sgd, got '", optimizer_, "'");
  PARE_CHECK_OPTION(schedule_ == "constant" || schedule_ == "step" || schedule_ == "cosine", "schedule",
                    "must be constant, step or cosine, got '", schedule_, "'");
  PARE_CHECK_OPTION(weight_decay_ >= 0, "weight_decay", "must be >= 0, got ", weight_decay_);
  PARE_CHECK_OPTION(momentum_ >= 0 && momentum_ < 1, "momentum", "must lie in [0, 1), got ", momentum_);
  PARE_CHECK_OPTION(max_steps_ >= 0, "max_steps", "must be >= 0, got ", max_steps_);
  PARE_CHECK_OPTION(warmup_steps_ >= 0, "warmup_steps", "must be >= 0, got ", warmup_steps_);
  PARE_CHECK_OPTION(step_epochs_ >= 1, "step_epochs", "must be at least 1, got ", step_epochs_);
  PARE_CHECK_OPTION(accumulate_ >= 1, "accumulate", "must be at least 1, got ", accumulate_);
  PARE_CHECK_OPTION(clip_grad_norm_ >= 0, "clip_grad_norm", "must be >= 0, got ", clip_grad_norm_);
  PARE_CHECK_OPTION(checkpoint_every_ >= 0, "checkpoint_every", "must be >= 0, got ", checkpoint_every_);
  if (resume_ && checkpoint_.empty())
    throw InputError("resume needs checkpoint (the file to resume from)").about("resume").about("checkpoint");
  PARE_CHECK_OPTION(patience_ >= 0, "patience", "must be >= 0, got ", patience_);
  core::check_precision(precision_, device_);
}

EvalResult evaluate(core::Module& model, const core::TensorDataset& ds, int64_t batch_size) {
  bool was_training = model.is_training();
  model.eval();
  const at::Device d = model.device();
  EvalResult r = evaluate([&](const at::Tensor& x) { return model.forward({x.to(d)})[0].cpu(); }, ds, batch_size, "");
  model.train(was_training);
  return r;
}

EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& logits_of, const core::TensorDataset& ds,
                    int64_t batch_size, const std::string& who) {
  at::NoGradGuard no_grad;
  core::require_labels(ds, "evaluation");
  core::DataLoader loader(ds, core::LoaderOptions().batch_size(batch_size).prefetch(2));
  loader.start_epoch(0);
  auto t0 = Clock::now();
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  core::Batch b;
  while (loader.next(b)) {
    const at::Tensor out = logits_of(b.x);
    check_logits(out, b.y, (who.empty() ? "" : who + " ") + "evaluating on '" + ds.name + "'");
    const auto [logits, y] = per_token(out, b.y);
    loss_sum += at::cross_entropy_loss(logits.to(at::kFloat), y, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    n += y.size(0);
  }
  EvalResult r;
  r.samples = n;
  r.seconds = seconds_since(t0);
  r.accuracy = n ? static_cast<double>(correct) / n : 0;
  r.loss = n ? loss_sum / n : 0;
  r.samples_per_s = r.seconds > 0 ? n / r.seconds : 0;
  return r;
}

// Where the run stands: everything a checkpoint must hold besides weights and optimizer state.
struct Trainer::State {
  int64_t epoch = 0, batch = 0, step = 0;  // next epoch / batch within it / optimizer steps done
  int64_t samples = 0, correct = 0, epochs_since_best = 0;
  double loss_sum = 0, best_val = -1, seconds = 0;
  std::map<std::string, double> part_sums;
  std::vector<EpochStats> history;
  LossScaler scaler;
};

Trainer::Trainer(core::Module& model, TrainerOptions opts) : model_(model), opts_(std::move(opts)) {
  opts_.validate();
  loss_fn_ = [](core::Module& m, const core::Batch& b) {
    StepOutput out;
    out.logits = m.forward({b.x})[0];
    const auto [logits, y] = per_token(out.logits, b.y);
    out.loss = at::cross_entropy_loss(logits.to(at::kFloat), y);  // fp32 under autocast too
    return out;
  };
}

void Trainer::set_loss(LossFn fn, std::vector<at::Tensor> extra) {
  loss_fn_ = std::move(fn);
  extra_ = std::move(extra);
}

void Trainer::make_optimizer() {
  // Weight decay applies to matrices and kernels; biases, norms and other vectors are exempt.
  std::vector<at::Tensor> decay, no_decay;
  for (auto& p : model_.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  for (auto& p : extra_) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto& o = opts_;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto add = [&](std::vector<at::Tensor> params, auto options) {
    if (!params.empty())
      groups.emplace_back(std::move(params), std::make_unique<decltype(options)>(options));
  };
  if (o.optimizer_ == "sgd") {
    auto base = torch::optim::SGDOptions(o.lr_).momentum(o.momentum_).nesterov(o.nesterov_);
    add(decay, torch::optim::SGDOptions(base).weight_decay(o.weight_decay_));
    add(no_decay, torch::optim::SGDOptions(base).weight_decay(0));
    optimizer_ = std::make_shared<torch::optim::SGD>(std::move(groups), base);
  } else if (o.optimizer_ == "adamw") {
    auto base = torch::optim::AdamWOptions(o.lr_);
    add(decay, torch::optim::AdamWOptions(base).weight_decay(o.weight_decay_));
    add(no_decay, torch::optim::AdamWOptions(base).weight_decay(0));
    optimizer_ = std::make_shared<torch::optim::AdamW>(std::move(groups), base);
  } else {
    auto base = torch::optim::AdamOptions(o.lr_);
    add(decay, torch::optim::AdamOptions(base).weight_decay(o.weight_decay_));
    add(no_decay, torch::optim::AdamOptions(base).weight_decay(0));
    optimizer_ = std::make_shared<torch::optim::Adam>(std::move(groups), base);
  }
}

double Trainer::lr_at(int64_t step, int64_t total_steps, int64_t steps_per_epoch) const {
  const auto& o = opts_;
  if (step < o.warmup_steps_) return o.lr_ * static_cast<double>(step + 1) / o.warmup_steps_;
  if (o.schedule_ == "cosine") {
    double t = static_cast<double>(step - o.warmup_steps_) /
               std::max<int64_t>(1, total_steps - o.warmup_steps_);
    return o.lr_ * 0.5 * (1 + std::cos(M_PI * t));
  }
  if (o.schedule_ == "step")
    return o.lr_ * std::pow(o.gamma_, static_cast<double>(step / std::max<int64_t>(1, steps_per_epoch) / o.step_epochs_));
  return o.lr_;
}

void Trainer::save_checkpoint(const State& st) {
  if (!writer_ || opts_.checkpoint_.empty()) return;
  std::map<std::string, at::Tensor> tensors;
  for (auto& n : model_.parameter_names()) tensors["model/" + n] = model_.initializer(n);
  for (auto& n : model_.buffer_names()) tensors["model/" + n] = model_.initializer(n);
  for (size_t i = 0; i < extra_.size(); ++i) tensors["extra/" + std::to_string(i)] = extra_[i];
  tensors["rng"] = at::detail::getDefaultCPUGenerator().get_state();
  if (opts_.device_.is_cuda()) tensors["rng_cuda"] = cuda_generator(opts_.device_).get_state();
  nlohmann::json j = {{"history", nlohmann::json::array()}, {"seed", opts_.seed_}, {"batch_size", opts_.batch_size_},
                      {"optimizer", opts_.optimizer_}};
  save_optimizer(*optimizer_, tensors, j["optimizer_steps"]);
  state_fields(st, to_json_of(j));
  j["loss_scale"] = st.scaler.scale;
  j["loss_scale_good_steps"] = st.scaler.good_steps;
  for (auto& h : st.history) j["history"].push_back(stats_json(h));
  std::ostringstream payload;
  core::write_safetensors(payload, tensors, {{"state", j.dump()}});
  const std::string bytes = payload.str();
  write_file_atomic(opts_.checkpoint_, [&](std::ostream& os) { os << checkpoint_header(bytes) << bytes; });
}

bool Trainer::load_checkpoint(State& st, int64_t batches) {
  const std::string& path = opts_.checkpoint_;
  if (!opts_.resume_ || !file_exists(path)) return false;
  try {
    // Tensors land on the model's device, whichever device wrote them (a GPU checkpoint resumes
    // on the CPU and back). Everything is read and checked before anything of the run changes, so
    // a checkpoint that does not fit is never loaded half.
    const std::string file = read_file(path);
    std::map<std::string, std::string> meta;
    auto tensors = core::parse_safetensors(checkpoint_payload(file, path), path, &meta);
    at::NoGradGuard no_grad;
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // run tensor <- checkpoint tensor
    auto take = [&](const std::string& key, const std::string& what, const at::Tensor& dst) {
      auto it = tensors.find(key);
      PARE_CHECK(it != tensors.end(), "'", path, "' holds no ", what, " (a checkpoint of another model?)");
      const at::Tensor t = it->second;
      PARE_CHECK(t.sizes() == dst.sizes() && t.scalar_type() == dst.scalar_type(), "'", path, "': ", what, " is ",
                 t.scalar_type(), " ", t.sizes(), " in the checkpoint but ", dst.scalar_type(), " ", dst.sizes(),
                 " in this run");
      PARE_CHECK(!t.is_floating_point() || at::isfinite(t).all().item<bool>(), "'", path, "': ", what,
                 " holds NaN or Inf (a run never saves such a state: the file is damaged)");
      copies.emplace_back(dst, t);
    };
    for (auto& n : model_.parameter_names()) take("model/" + n, "tensor '" + n + "'", model_.initializer(n));
    for (auto& n : model_.buffer_names()) take("model/" + n, "tensor '" + n + "'", model_.initializer(n));
    for (size_t i = 0; i < extra_.size(); ++i) take("extra/" + std::to_string(i), "loss tensor " + std::to_string(i), extra_[i]);
    auto rng = tensors.find("rng");
    PARE_CHECK(rng != tensors.end(), "'", path, "' holds no random generator state");
    at::make_generator<at::CPUGeneratorImpl>().set_state(rng->second);  // a state the generator takes
    PARE_CHECK(meta.count("state"), "'", path, "' holds no run state");
    auto j = nlohmann::json::parse(meta.at("state"));
    const uint64_t seed = json_int_at<uint64_t>(j, "seed");
    const int64_t batch_size = json_int_at<int64_t>(j, "batch_size");
    if (seed != opts_.seed_ || batch_size != opts_.batch_size_ || j.at("optimizer").get<std::string>() != opts_.optimizer_)
      throw InputError(pare::detail::concat("'", path, "' was written by a run with seed ", seed,
                                      ", batch_size ", batch_size, " and optimizer ",
                                      j.at("optimizer").get<std::string>(), "; resume with the same options"))
          .about("seed")
          .about("batch_size")
          .about("optimizer");
    State loaded;
    state_fields(loaded, from_json_of(j));
    PARE_CHECK(loaded.epoch >= 0 && loaded.step >= 0 && loaded.batch >= 0 && loaded.batch <= batches &&
                   loaded.samples >= 0 && loaded.correct >= 0 && loaded.correct <= loaded.samples,
               "'", path, "': its position (epoch ", loaded.epoch, ", batch ", loaded.batch, ", step ", loaded.step,
               ") is not one of a run with ", batches, " batches an epoch");
    loaded.scaler = st.scaler;
    loaded.scaler.scale = j.value("loss_scale", st.scaler.scale);
    loaded.scaler.good_steps = j.contains("loss_scale_good_steps") ? json_int_at<int64_t>(j, "loss_scale_good_steps") : 0;
    PARE_CHECK(loaded.scaler.scale > 0 && std::isfinite(loaded.scaler.scale), "'", path, "': loss scale ",
               loaded.scaler.scale, " is not a positive number");
    for (auto& h : j.at("history")) loaded.history.push_back(stats_from_json(h));
    OptimizerStates optim = read_optimizer(*optimizer_, opts_.optimizer_, tensors, j.at("optimizer_steps"), path);
    // Everything read and checked: now change the run.
    optimizer_->state().clear();
    for (auto& [key, state] : optim) optimizer_->state()[key] = std::move(state);
    for (auto& [dst, t] : copies) dst.copy_(t);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng->second);
    // A checkpoint written on the CPU has no GPU state: the GPU's generator keeps this run's seed.
    auto rng_cuda = tensors.find("rng_cuda");
    if (opts_.device_.is_cuda() && rng_cuda != tensors.end()) {
      at::Generator g = cuda_generator(opts_.device_);
      g.set_state(rng_cuda->second);
    }
    st = std::move(loaded);
  } catch (const InputError& e) {
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw InputError("cannot resume from '" + path + "': " + e.what());  // a field of the run state
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw InputError("cannot resume from '" + path + "': " + what.substr(0, what.find('\n')));
  }
  return true;
}

bool TrainerOptions::is_writer() const { return !process_group_ || process_group_->rank() == 0; }

// What a run holds besides its State: the data order, step counts, the trained tensors, the
// data-parallel plumbing and the output it accumulates.
struct Trainer::Run {
  Run(const core::TensorDataset& train, const core::LoaderOptions& opts, bool show, int64_t batch)
      : loader(train, opts), batches(loader.batches_per_epoch()), progress(show, batch), show(show) {}
  core::DataLoader loader;
  int64_t batches, steps_per_epoch = 0, total_steps = 0;
  Progress progress;
  bool show;
  std::shared_ptr<dist::ProcessGroup> pg;  ///< set when more than one rank trains
  std::vector<at::Tensor> params;          ///< the model's parameters and the loss's extra tensors
  std::unique_ptr<dist::GradientSync> grad_sync;
  int64_t step_samples = 0;                ///< samples in the gradients accumulated so far
  std::string metrics;                     ///< the metrics file's lines so far
  // The epoch under way: when it started, and the state's clock and sample count then.
  Clock::time_point t0;
  double seconds_before = 0;
  int64_t samples_before = 0;
};

std::unique_ptr<Trainer::Run> Trainer::start_run(const core::TensorDataset& train) {
  const auto& pg = opts_.process_group_;
  const bool ddp = pg && pg->size() > 1;
  int64_t batch_size = opts_.batch_size_;
  if (ddp) {
    PARE_CHECK_OPTION(batch_size % pg->size() == 0, "batch_size", batch_size, " must be a multiple of the world size ",
                      pg->size(), ": it is the global batch, split evenly over the ranks");
    batch_size /= pg->size();
    writer_ = writer_ && pg->rank() == 0;
    if (!sampler_) {
      const uint64_t seed = opts_.seed_;
      const int64_t global = opts_.batch_size_;
      const int rank = pg->rank(), world = pg->size();
      sampler_ = [seed, global, rank, world](int64_t n, int64_t epoch) {
        return dist::shard_order(core::epoch_order(n, true, seed, epoch), global, rank, world);
      };
    }
  }
  auto loader_opts = core::LoaderOptions()
                         .batch_size(batch_size)
                         .shuffle(true)
                         .seed(opts_.seed_)
                         .augment(opts_.augment_)
                         .pin_memory(core::wants_pinned_memory(opts_.device_))
                         .prefetch(2);
  if (sampler_) loader_opts.sampler(sampler_);
  auto run = std::make_unique<Run>(train, loader_opts, opts_.progress_ && writer_, opts_.batch_size_);
  run->steps_per_epoch = (run->batches + opts_.accumulate_ - 1) / opts_.accumulate_;
  run->total_steps = run->steps_per_epoch * opts_.epochs_;
  if (opts_.max_steps_ > 0) run->total_steps = std::min(run->total_steps, opts_.max_steps_);
  run->params = model_.parameters();
  run->params.insert(run->params.end(), extra_.begin(), extra_.end());
  if (ddp) run->pg = pg;
  return run;
}

void Trainer::train_epoch(Run& run, State& st, const core::TensorDataset& train) {
  model_.train();
  run.loader.start_epoch(st.epoch, st.batch);
  run.t0 = Clock::now();
  run.seconds_before = st.seconds;
  run.samples_before = st.samples;
  core::Batch next;
  while (st.step < run.total_steps && run.loader.next(next)) {
    const core::Batch b = core::to_device(next, opts_.device_);
    if (st.batch % opts_.accumulate_ == 0) {
      optimizer_->zero_grad();
      double lr = lr_at(st.step, run.total_steps, run.steps_per_epoch);
      for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    }
    StepOutput out;
    {
      core::AutocastScope amp(opts_.device_, opts_.precision_);
      out = loss_fn_(model_, b);
    }
    if (st.step == 0 && st.batch == 0 && out.logits.defined())
      check_logits(out.logits, b.y, "training on '" + train.name + "'");
    // On the CPU reading the loss costs nothing: check every batch, before any update (on a GPU
    // this waits for the step's forward, one synchronisation per batch).
    const double l = out.loss.item<double>();
    if (!std::isfinite(l))
      throw Error("training diverged: the loss is " + std::to_string(l) + " at step " +
                  std::to_string(st.step + 1) + " (epoch " + std::to_string(st.epoch + 1) +
                  "); lower lr or check the data for NaN/Inf" +
                  (opts_.checkpoint_.empty() ? "" : "; '" + opts_.checkpoint_ + "' holds the last good state"))
          .about("lr");
    st.scaler.scaled(opts_.accumulate_ > 1 ? out.loss / static_cast<double>(opts_.accumulate_) : out.loss).backward();
    ++st.batch;
    const at::Tensor predicted = out.logits.defined() ? out.logits.detach().argmax(-1) : out.predictions;
    const at::Tensor& y = out.targets.defined() ? out.targets : b.y;
    const int64_t n = y.numel();  // samples, or tokens for a language model
    run.step_samples += n;
    st.samples += n;
    st.loss_sum += l * n;
    st.correct += predicted.eq(y).sum().item<int64_t>();
    for (auto& [k, v] : out.parts) st.part_sums[k] += v * n;
    if (st.batch % opts_.accumulate_ != 0 && st.batch != run.batches) continue;

    if (run.grad_sync) run.grad_sync->sync(run.step_samples);
    run.step_samples = 0;
    for (auto& cb : after_backward_cbs_) cb();
    if (st.scaler.unscale_and_update(run.params)) {  // fp16: skip a step whose gradients overflowed
      if (opts_.clip_grad_norm_ > 0) torch::nn::utils::clip_grad_norm_(run.params, opts_.clip_grad_norm_);
      optimizer_->step();
    }
    ++st.step;
    for (auto& cb : step_cbs_) cb(st.step, l);
    run.progress.update(st.epoch + 1, opts_.epochs_, st.batch, run.batches, st.loss_sum / st.samples,
                        static_cast<double>(st.correct) / st.samples,
                        (st.samples - run.samples_before) / std::max(1e-9, seconds_since(run.t0)));
    if (opts_.checkpoint_every_ > 0 && st.step % opts_.checkpoint_every_ == 0 && st.batch != run.batches) {
      st.seconds = run.seconds_before + seconds_since(run.t0);
      save_checkpoint(st);
    }
  }
}

EpochStats Trainer::reduce_epoch(Run& run, const State& st) const {
  EpochStats es;
  es.epoch = st.epoch + 1;
  es.steps = st.step;
  es.seconds = run.seconds_before + seconds_since(run.t0);
  // The epoch's sums over every rank (this rank's own state stays as it is, for checkpoints).
  std::vector<double> sums = {static_cast<double>(st.samples), st.loss_sum, static_cast<double>(st.correct),
                              static_cast<double>(st.samples - run.samples_before)};
  for (auto& [k, v] : st.part_sums) sums.push_back(v);
  if (run.pg) {
    at::Tensor t = at::tensor(sums, at::kDouble);
    run.pg->all_reduce(t);
    sums.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  const double samples = std::max(1.0, sums[0]);
  es.samples = static_cast<int64_t>(sums[0]);
  es.train_loss = sums[1] / samples;
  es.train_accuracy = sums[2] / samples;
  es.samples_per_s = sums[3] / std::max(1e-9, seconds_since(run.t0));
  size_t part = 4;
  for (auto& [k, v] : st.part_sums) es.loss_parts[k] = sums[part++] / samples;
  return es;
}

bool Trainer::end_epoch(Run& run, State& st, const EpochStats& es, bool validated) {
  run.progress.clear();
  if (run.show) {
    std::fprintf(stderr, "epoch %lld/%lld: loss %.4f acc %.2f%%", (long long)es.epoch, (long long)opts_.epochs_,
                 es.train_loss, es.train_accuracy * 100);
    if (validated) std::fprintf(stderr, " | val loss %.4f acc %.2f%%", es.val_loss, es.val_accuracy * 100);
    std::fprintf(stderr, " | %.0f samples/s, %.1f s\n", es.samples_per_s, es.seconds);
  }
  st.history.push_back(es);
  run.metrics += stats_json(es).dump() + "\n";
  if (writer_ && !opts_.metrics_path_.empty()) write_file_atomic(opts_.metrics_path_, run.metrics);
  bool stop = false;
  if (validated) {
    if (es.val_accuracy > st.best_val) {
      st.best_val = es.val_accuracy;
      st.epochs_since_best = 0;
      if (writer_ && !opts_.best_path_.empty()) core::save_onnx(model_.to_graph(), opts_.best_path_);
    } else if (opts_.patience_ > 0 && ++st.epochs_since_best >= opts_.patience_) {
      stop = true;
    }
  }
  for (auto& cb : epoch_cbs_) cb(es);
  st.samples = st.correct = 0;
  st.loss_sum = st.seconds = 0;
  st.part_sums.clear();
  // The epoch-end checkpoint points at the start of the next epoch.
  State next = st;
  ++next.epoch;
  next.batch = 0;
  save_checkpoint(next);
  if (stop && run.show)
    std::fprintf(stderr, "early stop: no better validation accuracy for %lld epochs (best %.2f%%)\n",
                 (long long)opts_.patience_, st.best_val * 100);
  return stop;
}

std::vector<EpochStats> Trainer::fit(const core::TensorDataset& train, const core::TensorDataset* val) {
  core::require_labels(train, "training");
  if (val) core::require_labels(*val, "validation");
  at::manual_seed(opts_.seed_);
  if (model_.device() != opts_.device_) model_.to(opts_.device_);
  for (const auto& e : extra_)
    PARE_ASSERT(e.device() == opts_.device_, "a loss tensor is on ", e.device().str(), ", the model on ",
                opts_.device_.str(), ": create it on the trainer's device");
  make_optimizer();
  std::unique_ptr<Run> run = start_run(train);
  State st;
  st.scaler.enabled = opts_.precision_ == core::Precision::kFp16;
  if (load_checkpoint(st, run->batches) && run->show)
    std::fprintf(stderr, "resuming from %s: epoch %lld, batch %lld, step %lld\n", opts_.checkpoint_.c_str(),
                 (long long)st.epoch + 1, (long long)st.batch, (long long)st.step);
  for (auto& h : st.history) run->metrics += stats_json(h).dump() + "\n";
  if (run->pg) {
    // Rank 0's weights everywhere, after any resume (a resumed run loaded the same checkpoint on
    // every rank anyway).
    std::vector<at::Tensor> state = run->params;
    for (auto& name : model_.buffer_names()) state.push_back(model_.initializer(name));
    dist::broadcast_from_rank0(*run->pg, state);
    run->grad_sync = std::make_unique<dist::GradientSync>(run->pg, run->params);
  }
  // A run resumed from a mid-epoch checkpoint taken at its last step still closes that epoch.
  for (; st.epoch < opts_.epochs_ && (st.step < run->total_steps || st.batch > 0); ++st.epoch, st.batch = 0) {
    train_epoch(*run, st, train);
    EpochStats es = reduce_epoch(*run, st);
    if (val) {
      auto r = evaluate(model_, *val, opts_.eval_batch_size_);
      es.val_loss = r.loss;
      es.val_accuracy = r.accuracy;
    }
    if (end_epoch(*run, st, es, val != nullptr)) break;
  }
  return st.history;
}

}  // namespace pare::train
