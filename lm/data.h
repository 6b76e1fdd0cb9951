// Language-model training data: text tokenized once into a cached token file, then cut into
// windows of seq_len + 1 tokens (inputs and their next tokens).
//
//   auto ids = lm::cached_tokens(tok, "text:/usr/share/games/fortunes/fortunes", "train");
//   core::TensorDataset train = lm::token_windows(ids, 256, "fortunes (train)");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data.h"
#include "lm/tokenizer.h"

namespace pare::lm {

/// Where token files are cached: $PARE_CACHE_DIR, else $XDG_CACHE_HOME/pare, else ~/.cache/pare.
std::string cache_dir();

/// The token stream of `spec`'s `split` documents (lm/text.h; joined as lm::token_stream does),
/// read from `dir`/tokens-HASH.npy when a run before made it: HASH covers the tokenizer (its
/// vocabulary, merges, added tokens and ids), the spec, the split and every text file's bytes, so
/// a changed file or tokenizer makes a new one. `hit` says whether the cache answered.
std::vector<int64_t> cached_tokens(const Tokenizer& tok, const std::string& spec, const std::string& split,
                                   const std::string& dir = cache_dir(), bool* hit = nullptr);

/// Non-overlapping windows of seq_len + 1 tokens: x [N, seq_len] and y [N, seq_len] = x shifted by
/// one. Throws InputError when the stream holds less than one window.
core::TensorDataset token_windows(const std::vector<int64_t>& stream, int64_t seq_len, const std::string& name);

/// `count` windows of `seq_len` tokens of `spec`'s `split` (cached_tokens), drawn at random with
/// `seed` (all of them when there are fewer): the calibration inputs of pare quantize and pare prune,
/// int64 [N, seq_len].
at::Tensor calibration_windows(const Tokenizer& tok, const std::string& spec, const std::string& split,
                               int64_t seq_len, int64_t count, uint64_t seed);

}  // namespace pare::lm
