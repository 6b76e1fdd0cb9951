#include "lm/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "lm/eval.h"
#include "lm/text.h"

namespace pare::lm {

namespace {

void hash_tokenizer(Hasher& h, const TokenizerModel& t) {
  for (const std::string& v : t.vocab) h.add(v);
  for (const auto& [a, b] : t.merges) h.add(a + " " + b);
  for (const AddedToken& a : t.added) h.add(std::to_string(a.id) + (a.special ? "s" : "n") + a.content);
  h.add(std::to_string(t.bos_id) + "," + std::to_string(t.eos_id) + "," + std::to_string(t.add_bos) + "," +
        std::to_string(t.add_eos) + "," + std::to_string(static_cast<int>(t.kind)) + "," + t.source);
}

}  // namespace

std::string cache_dir() {
  if (const char* d = std::getenv("PARE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return join_path(x, "pare");
  const char* home = std::getenv("HOME");
  return join_path(home && *home ? home : "/tmp", ".cache/pare");
}

std::vector<int64_t> cached_tokens(const Tokenizer& tok, const std::string& spec, const std::string& split,
                                   const std::string& dir, bool* hit) {
  Hasher h;
  hash_tokenizer(h, tok.model());
  h.add(spec);
  h.add(split);
  for (const std::string& f : text_files(spec)) h.add_file(f);
  const std::string path = join_path(dir, "tokens-" + h.hex() + ".npy");
  if (hit) *hit = file_exists(path);
  if (file_exists(path)) {
    const at::Tensor t = core::load_npy(path).to(at::kLong).contiguous();
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
  }
  const std::vector<int64_t> ids = token_stream(tok, load_text(spec, split));
  make_dirs(dir);
  core::save_npy(at::tensor(ids, at::kLong).to(at::kInt), path);
  return ids;
}

core::TensorDataset token_windows(const std::vector<int64_t>& stream, int64_t seq_len, const std::string& name) {
  PARE_CHECK_OPTION(seq_len >= 1, "seq_len", "must be at least 1, got ", seq_len);
  const int64_t n = static_cast<int64_t>(stream.size());
  const int64_t windows = n > 0 ? (n - 1) / seq_len : 0;
  PARE_CHECK(windows >= 1, name, ": ", n, " tokens, fewer than one window of ", seq_len, " + 1");
  const at::Tensor ids = at::tensor(stream, at::kLong);
  core::TensorDataset ds;
  // Window w is tokens [w * seq_len, (w + 1) * seq_len], its last token the next of the one before.
  ds.x = ids.slice(0, 0, windows * seq_len).view({windows, seq_len}).clone();
  ds.y = ids.slice(0, 1, windows * seq_len + 1).view({windows, seq_len}).clone();
  ds.name = name;
  return ds;
}

at::Tensor calibration_windows(const Tokenizer& tok, const std::string& spec, const std::string& split,
                               int64_t seq_len, int64_t count, uint64_t seed) {
  const at::Tensor windows = token_windows(cached_tokens(tok, spec, split), seq_len, spec).x;
  const int64_t n = std::min(count, windows.size(0));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return windows.index_select(0, at::randperm(windows.size(0), gen).narrow(0, 0, n));
}

}  // namespace pare::lm
