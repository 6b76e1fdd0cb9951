// libFuzzer target for training checkpoints (train::Trainer's resume, train/checkpoint.cpp): an
// input is a checkpoint's payload (safetensors), written behind a header with its right CRC so
// that the fuzzer gets past the checksum to pare's checks of the contents: the tensors, the
// optimizer's state, the RNG and the run's position. A Trainer of a small MLP resumes from it and,
// when it loads, trains on to the end. Anything but a result, pare::InputError, or the divergence
// error of a run whose loaded weights are legal but useless is a bug. Each input starts from the
// same weights.
//   checkpoint_fuzz -pare_write_seed=DIR    writes seeds (payloads of real checkpoints) to DIR
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/zoo.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace {

const std::string& scratch() {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/pare-fuzz-" + std::to_string(getpid()) + ".ckpt";
  }();
  return path;
}

struct Setup {
  pare::core::Module model{pare::core::build_zoo_model("mlp:6-5-3", 1)};
  std::vector<at::Tensor> initial;
  pare::core::TensorDataset data;
  Setup() {
    for (auto& n : model.parameter_names()) initial.push_back(model.initializer(n).detach().clone());
    data.x = at::linspace(-1, 1, 16 * 6).reshape({16, 6});
    data.y = at::arange(16, at::kLong).remainder(3);
    data.name = "fuzz";
  }
  // A Trainer for `epochs` epochs of 2 steps, from the initial weights.
  std::vector<pare::train::EpochStats> fit(int64_t epochs, int64_t checkpoint_every = 0) {
    at::NoGradGuard no_grad;
    auto names = model.parameter_names();
    for (size_t i = 0; i < names.size(); ++i) model.initializer(names[i]).copy_(initial[i]);
    auto opts = pare::train::TrainerOptions()
                    .epochs(epochs)
                    .batch_size(8)
                    .seed(3)
                    .progress(false)
                    .checkpoint(scratch())
                    .checkpoint_every(checkpoint_every)
                    .resume(true);
    pare::train::Trainer trainer(model, opts);
    at::AutoGradMode grad(true);
    return trainer.fit(data, nullptr);
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

void copy_seed(const std::string& to) {
  const std::string file = pare::read_file(scratch());
  FILE* f = std::fopen(to.c_str(), "wb");
  // The payload, after the 24-byte header.
  if (!f || std::fwrite(file.data() + 24, 1, file.size() - 24, f) != file.size() - 24 || std::fclose(f) != 0)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-pare_write_seed=", 17) == 0) {
      const std::string dir = (*argv)[i] + 17;
      std::remove(scratch().c_str());
      setup().fit(1);  // an epoch's end
      copy_seed(pare::join_path(dir, "epoch_end.safetensors"));
      std::remove(scratch().c_str());
      setup().fit(2, 3);  // mid-epoch, at step 3 of 4
      copy_seed(pare::join_path(dir, "mid_epoch.safetensors"));
      std::remove(scratch().c_str());
      std::exit(0);
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    FILE* f = std::fopen(scratch().c_str(), "wb");
    const std::string header = pare::train::checkpoint_header({reinterpret_cast<const char*>(data), size});
    if (!f || std::fwrite(header.data(), 1, header.size(), f) != header.size() ||
        std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0)
      std::abort();
  }
  try {
    setup().fit(2);
  } catch (const pare::InputError& e) {
    // the expected refusal (printed with PARE_FUZZ_VERBOSE=1, to see why a seed does not load)
    if (std::getenv("PARE_FUZZ_VERBOSE")) std::fprintf(stderr, "refused: %s\n", e.what());
  } catch (const pare::Error& e) {
    if (std::strstr(e.what(), "training diverged") == nullptr) {
      std::fprintf(stderr, "checkpoint_fuzz: resuming threw a pare::Error: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_fuzz: resuming threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
