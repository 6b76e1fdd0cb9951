// Datasets and the loader. Image datasets yield float32 pixels in [0, 1] as [N, C, H, W] and
// int64 labels; normalisation is an explicit option, never a silent default.
//
//   auto train = load_dataset("fashion-mnist", "train");
//   DataLoader loader(train, LoaderOptions().batch_size(128).shuffle(true).seed(1));
//   loader.start_epoch(0);
//   Batch b;
//   while (loader.next(b)) { ... b.x, b.y ... }
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace pare::core {

/// An in-memory dataset: inputs x [N, ...] and labels y [N] (int64), or no labels (y undefined)
/// when the spec names none: enough for calibration and teacher caches.
struct TensorDataset {
  at::Tensor x;
  at::Tensor y;
  std::string name;
  int64_t size() const { return x.size(0); }
  bool has_labels() const { return y.defined(); }
};

/// Throws InputError when `ds` has no labels, saying that `purpose` ("training", "evaluation")
/// needs them and how to give them.
void require_labels(const TensorDataset& ds, const std::string& purpose);

/// Default folder of the Debian package dataset-fashion-mnist.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Loads a dataset from a spec:
///   "fashion-mnist" or "fashion-mnist:DIR"   IDX files (gzipped or not), split "train" / "test";
///                                             x float32 [N, 1, 28, 28] in [0, 1], y int64 in 0..9
///   "npy:X.npy,Y.npy"                         the same arrays whatever the split; floating x becomes
///                                             float32, integer x (token ids) int64; y int64
///   "npy:X.npy"                               inputs only (no labels): calibration, teacher caches
/// Throws InputError naming the file when it is missing, truncated or the wrong shape, and on an
/// unknown spec or split.
TensorDataset load_dataset(const std::string& spec, const std::string& split = "train");

/// Applies (x - mean) / std in place of x; parses "MEAN,STD", or per channel
/// "M1,...,MC,S1,...,SC" for x [N, C, ...]. Throws InputError on a malformed string, std <= 0 or
/// non-floating x.
void normalize(TensorDataset& ds, const std::string& mean_std);

/// Reads an IDX file (optionally gzip-compressed) of unsigned bytes as a uint8 tensor with the
/// file's dims. Throws InputError naming the file when it is missing, not IDX uint8, truncated or
/// longer than its dims say.
at::Tensor load_idx(const std::string& path);

/// Random augmentation of image batches ([N, C, H, W] floating), applied by the DataLoader to each
/// sample. The draws depend only on (seed, epoch, position in the epoch), so a resumed run and a
/// distillation teacher (which sees the augmented batch itself) get exactly the same views.
struct Augment {
  bool hflip = false;              ///< mirror left-right with probability 1/2
  int64_t shift = 0;               ///< translate by up to +-shift pixels along x and y
  std::vector<float> fill = {0.f};  ///< value of the pixels shifted in: one, or one per channel
  bool any() const { return hflip || shift > 0; }
};

/// Parses "none", "flip", "shift=2" or "flip,shift=2". Throws InputError on anything else.
Augment parse_augment(const std::string& spec);

/// Applies `aug` in place to x [N, C, H, W] (float32), whose row i is sample `first + i` of epoch
/// `epoch`. Throws InputError when x is not a float32 [N, C, H, W] batch or `fill` has neither one
/// nor C values.
void augment_batch(at::Tensor& x, const Augment& aug, uint64_t seed, int64_t epoch, int64_t first);

struct Batch {
  at::Tensor x;
  at::Tensor y;
  at::Tensor rows;    ///< the dataset row of each sample (int64 [n]), for per-sample caches
  int64_t index = 0;  ///< batch number within the epoch
};

struct LoaderOptions {
  LoaderOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  LoaderOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  LoaderOptions& seed(uint64_t v) { seed_ = v; return *this; }
  LoaderOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  /// Batches prepared ahead by a background thread (0: none, batches made on next()).
  LoaderOptions& prefetch(int v) { prefetch_ = v; return *this; }
  /// Batches in pinned (page-locked) host memory, for a GPU to copy without blocking (only with a
  /// CUDA libtorch: a CPU-only one has no pinned allocator).
  LoaderOptions& pin_memory(bool v) { pin_memory_ = v; return *this; }
  /// Random augmentation of each batch (see Augment); draws seeded by seed().
  LoaderOptions& augment(Augment a) { augment_ = std::move(a); return *this; }
  /// Replaces the index order of an epoch (distributed samplers plug in here).
  LoaderOptions& sampler(std::function<std::vector<int64_t>(int64_t n, int64_t epoch)> f) {
    sampler_ = std::move(f);
    return *this;
  }

  int64_t batch_size_ = 64;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  bool drop_last_ = false, pin_memory_ = false;
  int prefetch_ = 2;
  Augment augment_;
  std::function<std::vector<int64_t>(int64_t n, int64_t epoch)> sampler_;
};

/// `b` with its inputs and labels on `d` (copied without blocking from pinned memory); `rows`
/// stay on the CPU, where per-sample caches look them up.
Batch to_device(const Batch& b, const at::Device& d);

/// The index order of an epoch: identity, or a permutation seeded by (seed, epoch) that is the
/// same on every platform (own generator, not the global torch RNG).
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

/// Batches over a TensorDataset with seeded shuffling and a background prefetch thread.
/// The dataset must outlive the loader. The prefetch thread copies rows with plain memcpy (no
/// ATen parallel region), so it never takes intra-op threads from the training step and never
/// changes the global thread count. An exception in the worker is rethrown by next().
class DataLoader {
 public:
  DataLoader(const TensorDataset& ds, LoaderOptions opts);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Begins epoch `epoch` (order depends only on seed and epoch), skipping the first
  /// `skip_batches` batches (resume mid-epoch). Any batches prepared for an earlier epoch are
  /// dropped. Throws InputError when the sampler returns an index out of range.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  /// The next batch of the epoch; false at its end. Starts epoch 0 if no epoch was started.
  bool next(Batch& out);
  int64_t batches_per_epoch() const;
  const TensorDataset& dataset() const { return ds_; }

 private:
  Batch make_batch(int64_t b) const;
  void stop_worker();

  const TensorDataset& ds_;
  LoaderOptions opts_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0, produced_ = 0, num_batches_ = 0;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  bool started_ = false;
  std::exception_ptr error_;
};

}  // namespace pare::core
