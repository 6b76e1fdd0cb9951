// The tokenizer's text stages below lm/tokenizer.h: normalizers and pre-tokenizers, each turning a
// list of pieces into a finer one. Internal to lm/.
#pragma once

#include <string>
#include <vector>

#include "lm/tokenizer.h"

namespace pare::lm {

/// A piece of text on its way to words; `at_start` when it begins at the input's first byte
/// (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
  std::string text;
  bool at_start = false;
};

/// `s` with every `from` replaced by `to` (left to right, not overlapping).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to);

/// Applies the normalizer steps to one piece's text.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

/// Runs the pre-tokenizer steps over `pieces` (each step splits every piece; empty ones dropped).
/// `source` names the input in the InputError thrown for invalid UTF-8.
std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece> pieces,
                                const std::string& source);

}  // namespace pare::lm
