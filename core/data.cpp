// Datasets (IDX, npy) and the DataLoader: seeded epoch orders and a background prefetch thread.
#include "core/data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"

namespace pare::core {

namespace {

// Reads a whole file through zlib; gzread passes uncompressed files through unchanged.
std::string read_maybe_gzip(const std::string& path) {
  PARE_CHECK(file_exists(path), "cannot open '", path, "': no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  PARE_CHECK(f != nullptr, "cannot open '", path, "'");
  std::string data;
  std::vector<char> buf(1 << 16);  // 64 KiB a read: a 1 MiB buffer cost more than the read on small files
  for (;;) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      throw InputError("cannot read '" + path + "': " + why + " (truncated or corrupt gzip?)");
    }
    if (n == 0) break;
    data.append(buf.data(), static_cast<size_t>(n));
  }
  // A gzip stream cut short ends without an error from gzread on some zlib versions; gzerror
  // still reports it.
  int code = Z_OK;
  const char* why = gzerror(f, &code);
  std::string msg = why ? why : "";
  gzclose(f);
  PARE_CHECK(code == Z_OK || code == Z_STREAM_END, "cannot read '", path, "': ", msg,
             " (truncated or corrupt gzip?)");
  return data;
}

uint32_t read_be32(const std::string& s, size_t off) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[off + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

std::string first_existing(const std::string& base) {
  if (file_exists(base + ".gz")) return base + ".gz";
  if (file_exists(base)) return base;
  return "";
}

// Finds DIR/NAME[.gz]; a missing file says which package provides the dataset.
std::string fashion_file(const std::string& dir, const std::string& name) {
  std::string base = join_path(dir, name);
  std::string path = first_existing(base);
  PARE_CHECK(!path.empty(), "fashion-mnist: missing '", base, ".gz' (or uncompressed '", base,
             "'); install the Debian package dataset-fashion-mnist (files in ", kFashionMnistDir,
             ") or pass fashion-mnist:DIR with the IDX files");
  return path;
}

TensorDataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  PARE_CHECK(split == "train" || split == "test",
             "fashion-mnist split must be 'train' or 'test', got '", split, "'");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string img_path = fashion_file(dir, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = fashion_file(dir, prefix + "-labels-idx1-ubyte");
  at::Tensor img = load_idx(img_path);
  at::Tensor lbl = load_idx(lbl_path);
  PARE_CHECK(img.dim() == 3 && img.size(1) == 28 && img.size(2) == 28,
             "fashion-mnist images must be [N, 28, 28], got ", img.sizes(), " in '", img_path, "'");
  PARE_CHECK(lbl.dim() == 1, "fashion-mnist labels must be [N], got ", lbl.sizes(), " in '",
             lbl_path, "'");
  PARE_CHECK(img.size(0) == lbl.size(0), "fashion-mnist: ", img.size(0), " images in '", img_path,
             "' but ", lbl.size(0), " labels in '", lbl_path, "'");
  PARE_CHECK(lbl.numel() == 0 || lbl.max().item<int64_t>() <= 9,
             "fashion-mnist labels must be 0..9, got ", lbl.max().item<int64_t>(), " in '",
             lbl_path, "'");
  TensorDataset ds;
  ds.x = img.to(at::kFloat).div_(255.0).unsqueeze(1).contiguous();
  ds.y = lbl.to(at::kLong);
  ds.name = "fashion-mnist/" + split;
  return ds;
}

// The inputs of a dataset: floating x becomes float32, integer x (token ids) int64.
at::Tensor load_npy_inputs(const std::string& spec, const std::string& xp) {
  PARE_CHECK(file_exists(xp), "cannot open '", xp, "': no such file (dataset '", spec, "')");
  at::Tensor x = load_npy(xp);
  PARE_CHECK(x.dim() >= 1, "dataset inputs must be [N, ...], got a scalar in '", xp, "'");
  if (at::isIntegralType(x.scalar_type(), /*includeBool=*/false)) return x.to(at::kLong).contiguous();
  return x.to(at::kFloat).contiguous();
}

TensorDataset load_npy_pair(const std::string& spec, const std::string& files) {
  auto comma = files.find(',');
  PARE_CHECK(!files.empty() && comma != 0 && (comma == std::string::npos ||
                 (comma + 1 < files.size() && files.find(',', comma + 1) == std::string::npos)),
             "npy dataset spec must be 'npy:X.npy,Y.npy' (or 'npy:X.npy', inputs without labels), got '",
             spec, "'");
  TensorDataset ds;
  ds.name = spec;
  if (comma == std::string::npos) {
    ds.x = load_npy_inputs(spec, files);
    return ds;
  }
  const std::string xp = files.substr(0, comma), yp = files.substr(comma + 1);
  at::Tensor x = load_npy_inputs(spec, xp);
  PARE_CHECK(file_exists(yp), "cannot open '", yp, "': no such file (dataset '", spec, "')");
  at::Tensor y = load_npy(yp);
  PARE_CHECK(y.dim() >= 1, "dataset labels must be [N], got a scalar in '", yp, "'");
  PARE_CHECK(x.size(0) == y.size(0), "dataset inputs and labels must have the same length N, got ",
             x.size(0), " in '", xp, "' and ", y.size(0), " in '", yp, "'");
  PARE_CHECK(!y.is_complex(), "dataset labels must be integers, got ", y.scalar_type(), " in '",
             yp, "'");
  if (at::isFloatingType(y.scalar_type())) {
    PARE_CHECK(y.numel() == 0 || at::equal(y, y.round()),
               "dataset labels must be whole numbers, got fractional values in '", yp, "'");
  }
  ds.x = x;
  ds.y = y.to(at::kLong).contiguous();
  return ds;
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

// splitmix64: tiny, fast, and the same on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }
};

}  // namespace

at::Tensor load_idx(const std::string& path) {
  const std::string data = read_maybe_gzip(path);
  PARE_CHECK(data.size() >= 4, "IDX file '", path, "' is truncated: ", data.size(),
             " bytes, the header needs at least 4");
  PARE_CHECK(data[0] == 0 && data[1] == 0, "'", path, "' is not an IDX file (magic must start with"
             " two zero bytes)");
  const int type = static_cast<unsigned char>(data[2]);
  const int ndim = static_cast<unsigned char>(data[3]);
  PARE_CHECK(type == 0x08, "IDX file '", path, "' must hold unsigned bytes (type 0x08), got type 0x",
             std::hex, type);
  PARE_CHECK(ndim >= 1, "IDX file '", path, "' must have at least one dimension, got 0");
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  PARE_CHECK(data.size() >= header, "IDX file '", path, "' is truncated: ", data.size(),
             " bytes, the header of ", ndim, " dims needs ", header);
  std::vector<int64_t> dims;
  uint64_t span = 1;  // a 0 counts as 1: an empty tensor's other dims still make its strides
  bool empty = false;
  for (int i = 0; i < ndim; ++i) {
    uint32_t d = read_be32(data, 4 + 4 * static_cast<size_t>(i));
    dims.push_back(d);
    const uint64_t e = std::max<uint64_t>(d, 1);
    PARE_CHECK(span <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / e, "IDX file '", path,
               "' has dims too large");
    span *= e;
    empty = empty || d == 0;
  }
  const uint64_t numel = empty ? 0 : span;
  const uint64_t payload = data.size() - header;
  PARE_CHECK(payload == numel, "IDX file '", path, "' is ",
             payload < numel ? "truncated" : "longer than its header says", ": dims ",
             at::IntArrayRef(dims), " need ", numel, " bytes of data, found ", payload);
  at::Tensor t = at::empty(dims, at::kByte);
  if (numel > 0) std::memcpy(t.data_ptr<uint8_t>(), data.data() + header, numel);
  return t;
}

TensorDataset load_dataset(const std::string& spec, const std::string& split) {
  if (spec == "fashion-mnist") return load_fashion_mnist(kFashionMnistDir, split);
  if (spec.rfind("fashion-mnist:", 0) == 0) {
    std::string dir = spec.substr(std::strlen("fashion-mnist:"));
    PARE_CHECK(!dir.empty(), "dataset spec 'fashion-mnist:DIR' needs a folder, got '", spec, "'");
    return load_fashion_mnist(dir, split);
  }
  if (spec.rfind("npy:", 0) == 0) return load_npy_pair(spec, spec.substr(4));
  throw InputError("unknown dataset '" + spec +
                   "'; expected 'fashion-mnist', 'fashion-mnist:DIR', 'npy:X.npy,Y.npy' or 'npy:X.npy'");
}

void require_labels(const TensorDataset& ds, const std::string& purpose) {
  PARE_CHECK(ds.has_labels(), "dataset '", ds.name, "' has inputs but no labels, and ", purpose,
             " needs them: give 'npy:X.npy,Y.npy'");
}

void normalize(TensorDataset& ds, const std::string& mean_std) {
  std::vector<double> v;
  std::stringstream ss(mean_std);
  std::string item;
  while (std::getline(ss, item, ',')) {
    double d = 0;
    PARE_CHECK(parse_double(item, d), "normalize expects 'MEAN,STD' (numbers), got '", mean_std,
               "'");
    v.push_back(d);
  }
  if (!mean_std.empty() && mean_std.back() == ',') v.clear();  // "1,2," is malformed
  PARE_CHECK(v.size() >= 2 && v.size() % 2 == 0, "normalize expects 'MEAN,STD' or per channel "
             "'M1,..,MC,S1,..,SC', got '", mean_std, "'");
  PARE_CHECK(ds.x.defined() && at::isFloatingType(ds.x.scalar_type()),
             "normalize needs floating-point inputs, dataset '", ds.name, "' has ",
             ds.x.defined() ? c10::toString(ds.x.scalar_type()) : "none");
  const size_t c = v.size() / 2;
  for (size_t i = c; i < v.size(); ++i)
    PARE_CHECK(v[i] > 0, "normalize needs STD > 0, got ", v[i], " in '", mean_std, "'");
  if (c == 1) {
    ds.x.sub_(v[0]).div_(v[1]);
    return;
  }
  PARE_CHECK(ds.x.dim() >= 2 && ds.x.size(1) == static_cast<int64_t>(c), "normalize got ", c,
             " channel means but dataset '", ds.name, "' has inputs ", ds.x.sizes());
  std::vector<int64_t> bshape(ds.x.dim(), 1);
  bshape[1] = static_cast<int64_t>(c);
  auto opts = at::TensorOptions().dtype(ds.x.scalar_type());
  at::Tensor mean = at::tensor(std::vector<double>(v.begin(), v.begin() + c)).to(opts).view(bshape);
  at::Tensor std = at::tensor(std::vector<double>(v.begin() + c, v.end())).to(opts).view(bshape);
  ds.x.sub_(mean).div_(std);
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  PARE_CHECK(n >= 0, "epoch_order needs n >= 0, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (!shuffle) return order;
  // Mix seed and epoch through one splitmix step each so nearby seeds/epochs are unrelated.
  SplitMix64 mix{seed};
  uint64_t s = mix.next();
  mix.state = s ^ static_cast<uint64_t>(epoch);
  SplitMix64 rng{mix.next()};
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

// ---------------------------------------------------------------------------------------------
// Augmentation

Augment parse_augment(const std::string& spec) {
  Augment a;
  if (spec == "none") return a;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item == "flip") {
      a.hflip = true;
    } else if (item.rfind("shift=", 0) == 0) {
      size_t used = 0;
      try {
        a.shift = std::stoll(item.substr(6), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      PARE_CHECK(used > 0 && used == item.size() - 6 && a.shift >= 0, "augmentation '", spec,
                 "': shift needs a number of pixels >= 0, got '", item.substr(6), "'");
    } else {
      PARE_CHECK(false, "augmentation '", spec, "': unknown item '", item,
                 "' (known: flip, shift=PIXELS, none)");
    }
  }
  PARE_CHECK(!spec.empty(), "augmentation '': expected flip, shift=PIXELS or none");
  return a;
}

void augment_batch(at::Tensor& x, const Augment& aug, uint64_t seed, int64_t epoch, int64_t first) {
  PARE_CHECK(x.dim() == 4 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
             "augmentation needs float32 image batches [N, C, H, W], got ", x.scalar_type(), " ",
             x.sizes());
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  PARE_CHECK(aug.fill.size() == 1 || static_cast<int64_t>(aug.fill.size()) == c, "augmentation fill has ",
             aug.fill.size(), " values for images with ", c, " channels");
  // One stream per (seed, epoch): sample p of the epoch starts at its own offset.
  SplitMix64 mix{seed ^ 0xA5A5A5A5A5A5A5A5ULL};
  mix.state = mix.next() ^ static_cast<uint64_t>(epoch);
  const uint64_t base = mix.next();
  std::vector<float> tmp(static_cast<size_t>(h * w));
  float* data = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    SplitMix64 rng{base ^ (static_cast<uint64_t>(first + i) * 0x9E3779B97F4A7C15ULL)};
    const bool flip = aug.hflip && (rng.next() & 1);
    const int64_t span = 2 * aug.shift + 1;
    const int64_t dx = aug.shift ? static_cast<int64_t>(rng.below(span)) - aug.shift : 0;
    const int64_t dy = aug.shift ? static_cast<int64_t>(rng.below(span)) - aug.shift : 0;
    if (!flip && dx == 0 && dy == 0) continue;
    for (int64_t ch = 0; ch < c; ++ch) {
      float* img = data + (i * c + ch) * h * w;
      const float fill = aug.fill.size() == 1 ? aug.fill[0] : aug.fill[ch];
      // out[y][x] = in[y - dy][src_x], src_x = (flip ? w - 1 - x : x) - dx
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t sy = y - dy, sx = (flip ? w - 1 - xx : xx) - dx;
          tmp[y * w + xx] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? img[sy * w + sx] : fill;
        }
      std::copy(tmp.begin(), tmp.end(), img);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// DataLoader

DataLoader::DataLoader(const TensorDataset& ds, LoaderOptions opts) : ds_(ds), opts_(std::move(opts)) {
  PARE_CHECK(opts_.batch_size_ > 0, "batch size must be > 0, got ", opts_.batch_size_);
  PARE_CHECK(opts_.prefetch_ >= 0, "prefetch must be >= 0, got ", opts_.prefetch_);
  PARE_CHECK(ds_.x.defined() && ds_.x.dim() >= 1, "dataset '", ds_.name, "' has no data");
  PARE_CHECK(!ds_.has_labels() || (ds_.y.dim() >= 1 && ds_.x.size(0) == ds_.y.size(0)),
             "dataset '", ds_.name, "' has inputs ", ds_.x.sizes(), " and labels ", ds_.y.sizes(),
             " of different lengths");
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  // With a sampler the epoch length is the sampler's; before the first epoch, assume n.
  const int64_t n = started_ ? static_cast<int64_t>(order_.size()) : ds_.size();
  const int64_t bs = opts_.batch_size_;
  return opts_.drop_last_ ? n / bs : (n + bs - 1) / bs;
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  stop_ = false;
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  PARE_CHECK(skip_batches >= 0, "skip_batches must be >= 0, got ", skip_batches);
  stop_worker();
  const int64_t n = ds_.size();
  if (opts_.sampler_) {
    order_ = opts_.sampler_(n, epoch);
    for (int64_t i : order_)
      PARE_CHECK(i >= 0 && i < n, "sampler returned index ", i, " for dataset '", ds_.name,
                 "' of ", n, " samples");
  } else {
    order_ = epoch_order(n, opts_.shuffle_, opts_.seed_, epoch);
  }
  epoch_ = epoch;
  started_ = true;
  error_ = nullptr;
  num_batches_ = batches_per_epoch();
  next_batch_ = produced_ = std::min(skip_batches, num_batches_);
  if (opts_.prefetch_ == 0 || produced_ >= num_batches_) return;

  worker_ = std::thread([this] {
    try {
      for (;;) {
        int64_t b;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] {
            return stop_ || static_cast<int>(queue_.size()) < opts_.prefetch_;
          });
          if (stop_ || produced_ >= num_batches_) return;
          b = produced_;
        }
        Batch batch = make_batch(b);  // outside the lock: the consumer keeps going meanwhile
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) return;
          queue_.push_back(std::move(batch));
          ++produced_;
        }
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  });
}

bool DataLoader::next(Batch& out) {
  if (!started_) start_epoch(0);
  if (next_batch_ >= num_batches_) return false;
  if (opts_.prefetch_ == 0) {
    out = make_batch(next_batch_++);
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_ != nullptr; });
  if (queue_.empty()) std::rethrow_exception(error_);
  out = std::move(queue_.front());
  queue_.pop_front();
  ++next_batch_;
  lock.unlock();
  cv_.notify_all();
  return true;
}

namespace {

// Gathers rows of a contiguous CPU tensor with memcpy: no ATen parallel region, so the prefetch
// thread never spawns intra-op threads that would compete with the training step.
// `pinned`: into page-locked memory, from which a GPU copies without blocking.
at::Tensor gather_rows(const at::Tensor& src, const int64_t* idx, int64_t count, bool pinned) {
  if (!src.is_contiguous() || !src.device().is_cpu()) {
    at::Tensor ids = at::from_blob(const_cast<int64_t*>(idx), {count}, at::kLong).to(src.device());
    at::Tensor rows = src.index_select(0, ids);
    return pinned && rows.device().is_cpu() ? rows.pin_memory() : rows;
  }
  std::vector<int64_t> sizes(src.sizes().begin(), src.sizes().end());
  sizes[0] = count;
  at::Tensor dst = at::empty(sizes, src.options().pinned_memory(pinned));
  const size_t row = static_cast<size_t>(src.numel() / std::max<int64_t>(src.size(0), 1)) *
                     src.element_size();
  const auto* s = static_cast<const char*>(src.data_ptr());
  auto* d = static_cast<char*>(dst.data_ptr());
  for (int64_t i = 0; i < count; ++i) std::memcpy(d + i * row, s + idx[i] * row, row);
  return dst;
}

}  // namespace

Batch DataLoader::make_batch(int64_t b) const {
  const int64_t bs = opts_.batch_size_;
  const int64_t begin = b * bs;
  const int64_t end = std::min<int64_t>(begin + bs, static_cast<int64_t>(order_.size()));
  PARE_ASSERT(begin < end, "batch ", b, " is outside the epoch of ", order_.size(), " samples");
  Batch out;
  out.x = gather_rows(ds_.x, order_.data() + begin, end - begin, opts_.pin_memory_);
  if (ds_.has_labels()) out.y = gather_rows(ds_.y, order_.data() + begin, end - begin, opts_.pin_memory_);
  out.rows = at::from_blob(const_cast<int64_t*>(order_.data() + begin), {end - begin}, at::kLong).clone();
  if (opts_.augment_.any()) augment_batch(out.x, opts_.augment_, opts_.seed_, epoch_, begin);
  out.index = b;
  return out;
}

Batch to_device(const Batch& b, const at::Device& d) {
  if (b.x.device() == d && (!b.y.defined() || b.y.device() == d)) return b;
  Batch out = b;
  out.x = b.x.to(d, /*non_blocking=*/b.x.is_pinned());
  if (b.y.defined()) out.y = b.y.to(d, /*non_blocking=*/b.y.is_pinned());
  return out;
}

}  // namespace pare::core
