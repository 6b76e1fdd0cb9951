#include "distill/trainer.h"

#include <torch/optim.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::distill {

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
  explicit Progress(bool enabled) : tty_(enabled && ::isatty(2)) {}
  void update(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss, double acc,
              double rate) {
    if (!tty_ || seconds_since(last_) < 0.1) return;
    last_ = Clock::now();
    double eta = rate > 0 ? (steps - step) * (static_cast<double>(batch_) / rate) : 0;
    int width = 24, done = steps ? static_cast<int>(width * step / steps) : 0;
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s%s] %lld/%lld loss %.4f acc %.2f%% %.0f samples/s ETA %s",
                 (long long)epoch, (long long)epochs, std::string(done, '#').c_str(),
                 std::string(width - done, '.').c_str(), (long long)step, (long long)steps, loss,
                 acc * 100, rate, format_eta(eta).c_str());
    std::fflush(stderr);
  }
  void set_batch(int64_t b) { batch_ = b; }
  void clear() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
  int64_t batch_ = 1;
  Clock::time_point last_ = Clock::now() - std::chrono::seconds(1);
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& params,
                                                        const TrainerOptions& o) {
  if (o.optimizer_ == "sgd")
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr_).momentum(o.momentum_).weight_decay(o.weight_decay_));
  if (o.optimizer_ == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr_).weight_decay(o.weight_decay_));
  return std::make_unique<torch::optim::Adam>(
      params, torch::optim::AdamOptions(o.lr_).weight_decay(o.weight_decay_));
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

void check_logits(const at::Tensor& logits, const at::Tensor& y, const std::string& where) {
  PARE_CHECK(logits.dim() == 2 && logits.size(0) == y.size(0), where,
             ": the model must output logits [N, classes] for N labels; got ", logits.sizes(),
             " for ", y.size(0), " labels");
  int64_t lo = y.min().item<int64_t>(), hi = y.max().item<int64_t>();
  PARE_CHECK(lo >= 0 && hi < logits.size(1), where, ": labels must lie in [0, ", logits.size(1),
             ") for a model with ", logits.size(1), " classes; got labels up to ", hi);
}

}  // namespace

void TrainerOptions::validate() const {
  PARE_CHECK(epochs_ >= 1, "--epochs must be at least 1, got ", epochs_);
  PARE_CHECK(batch_size_ >= 1, "--batch-size must be at least 1, got ", batch_size_);
  PARE_CHECK(lr_ > 0 && std::isfinite(lr_), "--lr must be a positive number, got ", lr_);
  PARE_CHECK(optimizer_ == "adam" || optimizer_ == "adamw" || optimizer_ == "sgd",
             "--optimizer must be adam, adamw or sgd, got '", optimizer_, "'");
  PARE_CHECK(weight_decay_ >= 0, "--weight-decay must be >= 0, got ", weight_decay_);
  PARE_CHECK(max_steps_ >= 0, "--max-steps must be >= 0, got ", max_steps_);
}

EvalResult evaluate(core::Module& model, const core::TensorDataset& ds, int64_t batch_size) {
  bool was_training = model.is_training();
  model.eval();
  at::NoGradGuard no_grad;
  core::DataLoader loader(ds, core::LoaderOptions().batch_size(batch_size).prefetch(2));
  loader.start_epoch(0);
  auto t0 = Clock::now();
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  core::Batch b;
  while (loader.next(b)) {
    at::Tensor logits = model.forward({b.x})[0];
    check_logits(logits, b.y, "evaluating on '" + ds.name + "'");
    loss_sum += at::cross_entropy_loss(logits, b.y, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(b.y).sum().item<int64_t>();
    n += b.y.size(0);
  }
  model.train(was_training);
  EvalResult r;
  r.samples = n;
  r.seconds = seconds_since(t0);
  r.accuracy = n ? static_cast<double>(correct) / n : 0;
  r.loss = n ? loss_sum / n : 0;
  r.samples_per_s = r.seconds > 0 ? n / r.seconds : 0;
  return r;
}

Trainer::Trainer(core::Module& model, TrainerOptions opts) : model_(model), opts_(std::move(opts)) {
  opts_.validate();
}

std::vector<EpochStats> Trainer::fit(const core::TensorDataset& train, const core::TensorDataset* val) {
  at::manual_seed(opts_.seed_);
  auto optimizer = make_optimizer(model_.parameters(), opts_);
  core::DataLoader loader(train, core::LoaderOptions()
                                     .batch_size(opts_.batch_size_)
                                     .shuffle(true)
                                     .seed(opts_.seed_)
                                     .drop_last(false)
                                     .prefetch(2));
  const int64_t steps_per_epoch = loader.batches_per_epoch();
  int64_t total_steps = steps_per_epoch * opts_.epochs_;
  if (opts_.max_steps_ > 0) total_steps = std::min(total_steps, opts_.max_steps_);
  Progress progress(opts_.progress_);
  progress.set_batch(opts_.batch_size_);
  std::vector<EpochStats> history;
  std::string metrics;
  int64_t step = 0;

  for (int64_t epoch = 0; epoch < opts_.epochs_ && step < total_steps; ++epoch) {
    model_.train();
    loader.start_epoch(epoch);
    EpochStats st;
    st.epoch = epoch + 1;
    auto t0 = Clock::now();
    double loss_sum = 0;
    int64_t correct = 0;
    core::Batch b;
    while (step < total_steps && loader.next(b)) {
      if (opts_.cosine_ || opts_.warmup_steps_ > 0) {
        double lr = opts_.lr_;
        if (step < opts_.warmup_steps_) lr *= static_cast<double>(step + 1) / opts_.warmup_steps_;
        else if (opts_.cosine_)
          lr *= 0.5 * (1 + std::cos(M_PI * (step - opts_.warmup_steps_) /
                                    std::max<int64_t>(1, total_steps - opts_.warmup_steps_)));
        set_lr(*optimizer, lr);
      }
      at::Tensor logits = model_.forward({b.x})[0];
      if (step == 0) check_logits(logits, b.y, "training on '" + train.name + "'");
      at::Tensor loss = at::cross_entropy_loss(logits, b.y);
      // On the CPU reading the loss costs nothing: check every step, before the update.
      double l = loss.item<double>();
      if (!std::isfinite(l))
        throw Error("training diverged: the loss is " + std::to_string(l) + " at step " +
                    std::to_string(step + 1) + " (epoch " + std::to_string(epoch + 1) +
                    "); lower --lr or check the data for NaN/Inf");
      optimizer->zero_grad();
      loss.backward();
      optimizer->step();
      ++step;
      ++st.steps;
      const int64_t n = b.y.size(0);
      st.samples += n;
      loss_sum += l * n;
      correct += logits.detach().argmax(1).eq(b.y).sum().item<int64_t>();
      for (auto& cb : step_cbs_) cb(step, l);
      progress.update(epoch + 1, opts_.epochs_, st.steps, steps_per_epoch, loss_sum / st.samples,
                      static_cast<double>(correct) / st.samples,
                      st.samples / std::max(1e-9, seconds_since(t0)));
    }
    st.seconds = seconds_since(t0);
    st.train_loss = loss_sum / std::max<int64_t>(1, st.samples);
    st.train_accuracy = static_cast<double>(correct) / std::max<int64_t>(1, st.samples);
    st.samples_per_s = st.samples / std::max(1e-9, st.seconds);
    if (val) {
      auto r = evaluate(model_, *val, opts_.eval_batch_size_);
      st.val_loss = r.loss;
      st.val_accuracy = r.accuracy;
    }
    progress.clear();
    if (opts_.progress_) {
      std::fprintf(stderr, "epoch %lld/%lld: loss %.4f acc %.2f%%", (long long)st.epoch,
                   (long long)opts_.epochs_, st.train_loss, st.train_accuracy * 100);
      if (val) std::fprintf(stderr, " | val loss %.4f acc %.2f%%", st.val_loss, st.val_accuracy * 100);
      std::fprintf(stderr, " | %.0f samples/s, %.1f s\n", st.samples_per_s, st.seconds);
    }
    nlohmann::json j = {{"epoch", st.epoch}, {"steps", step}, {"train_loss", st.train_loss},
                        {"train_accuracy", st.train_accuracy}, {"samples", st.samples},
                        {"seconds", st.seconds}, {"samples_per_s", st.samples_per_s}};
    if (val) {
      j["val_loss"] = st.val_loss;
      j["val_accuracy"] = st.val_accuracy;
    }
    metrics += j.dump() + "\n";
    if (!opts_.metrics_path_.empty()) write_file_atomic(opts_.metrics_path_, metrics);
    for (auto& cb : epoch_cbs_) cb(st);
    history.push_back(st);
  }
  return history;
}

}  // namespace pare::distill
