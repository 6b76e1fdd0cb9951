// Normalizers and pre-tokenizers as tokenizers runs them. The split patterns are hand-written
// matchers of the exact regexes (Oniguruma semantics: alternatives tried in order, greedy with
// backtracking), so no regex engine is needed and an unknown pattern is refused, never approximated.
#include "lm/pretokenize.h"

#include "core/error.h"
#include "lm/unicode.h"

namespace pare::lm {

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

struct Text {
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;  // byte offset of each code point, then the length
};

bool is_other(uint32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }  // [^\s\p{L}\p{N}]

size_t run(const std::vector<uint32_t>& c, size_t i, bool (*in)(uint32_t)) {
  while (i < c.size() && in(c[i])) ++i;
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d, case-insensitive when `fold` (Unicode simple case folding: 's' also
// matches U+017F LATIN SMALL LETTER LONG S). Returns the end, or i.
size_t match_contraction(const std::vector<uint32_t>& c, size_t i, bool fold) {
  if (c[i] != '\'' || i + 1 >= c.size()) return i;
  auto is = [&](size_t k, char lower) {
    if (k >= c.size()) return false;
    if (c[k] == static_cast<uint32_t>(lower)) return true;
    if (!fold) return false;
    return c[k] == static_cast<uint32_t>(lower - 'a' + 'A') || (lower == 's' && c[k] == 0x17F);
  };
  if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return i + 2;
  if ((is(i + 1, 'r') || is(i + 1, 'v')) && is(i + 2, 'e')) return i + 3;
  if (is(i + 1, 'l') && is(i + 2, 'l')) return i + 3;
  return i;
}

// \s+(?!\S) then \s+: a whitespace run, less its last character when a non-space follows it and it
// is longer than one.
size_t match_spaces(const std::vector<uint32_t>& c, size_t i) {
  if (!is_whitespace(c[i])) return i;
  const size_t k = run(c, i, is_whitespace);
  return (k < c.size() && k - i >= 2) ? k - 1 : k;
}

// ' ?X+': an optional space, then a run of class X.
size_t match_space_run(const std::vector<uint32_t>& c, size_t i, bool (*in)(uint32_t)) {
  size_t j = i;
  if (c[j] == ' ' && j + 1 < c.size() && in(c[j + 1])) ++j;
  return in(c[j]) ? run(c, j, in) : i;
}

size_t match_gpt2(const std::vector<uint32_t>& c, size_t i) {
  size_t e;
  if ((e = match_contraction(c, i, false)) > i) return e;
  if ((e = match_space_run(c, i, is_letter)) > i) return e;
  if ((e = match_space_run(c, i, is_number)) > i) return e;
  if ((e = match_space_run(c, i, is_other)) > i) return e;
  return match_spaces(c, i);
}

bool is_cr_lf(uint32_t c) { return c == '\r' || c == '\n'; }

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1).
size_t match_llama3(const std::vector<uint32_t>& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  size_t e;
  if ((e = match_contraction(c, i, true)) > i) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_cr_lf(c[i]) && !is_letter(c[i]) && !is_number(c[i])) {
    if (i + 1 < n && is_letter(c[i + 1])) return run(c, i + 1, is_letter);
  } else if (is_letter(c[i])) {
    return run(c, i, is_letter);
  }
  if (is_number(c[i])) {  // \p{N}{1,max_digits}
    e = i;
    while (e < n && e - i < max_digits && is_number(c[e])) ++e;
    return e;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  if ((e = match_space_run(c, i, is_other)) > i) return run(c, e, is_cr_lf);
  // \s*[\r\n]+: the whitespace run up to its last CR or LF
  if (is_whitespace(c[i])) {
    const size_t k = run(c, i, is_whitespace);
    for (size_t j = k; j > i; --j)
      if (is_cr_lf(c[j - 1])) return j;
  }
  return match_spaces(c, i);
}

// Splits `piece` at the matches of `match` (Isolated: matches and the text between them become
// pieces of their own).
template <class Match>
void split_isolated(const Piece& piece, const Text& t, Match match, std::vector<Piece>& out) {
  size_t last = 0;  // code point index where the pending unmatched text starts
  auto emit = [&](size_t from, size_t to) {
    if (from < to)
      out.push_back({piece.text.substr(t.offsets[from], t.offsets[to] - t.offsets[from]), piece.at_start && from == 0});
  };
  for (size_t i = 0; i < t.cps.size();) {
    const size_t e = match(t.cps, i);
    if (e == i) {
      ++i;
      continue;
    }
    emit(last, i);
    emit(i, e);
    last = i = e;
  }
  emit(last, t.cps.size());
}

// Digits: every number character alone (individual) or runs of them together (contiguous).
void split_digits(const Piece& piece, const Text& t, bool individual, std::vector<Piece>& out) {
  split_isolated(piece, t, [individual](const std::vector<uint32_t>& c, size_t i) {
    if (!unicode::is_numeric(c[i])) return i;
    return individual ? i + 1 : run(c, i, unicode::is_numeric);
  }, out);
}

void byte_level(const PreTokenizerStep& step, Piece piece, const std::string& source, std::vector<Piece>& out) {
  if (step.add_prefix_space && piece.text.rfind(' ', 0) != 0) piece.text.insert(0, " ");
  std::vector<Piece> words;
  if (step.use_regex) {
    Text t;
    unicode::decode_utf8(piece.text, t.cps, t.offsets, source);
    split_isolated(piece, t, match_gpt2, words);
  } else {
    words.push_back(std::move(piece));
  }
  for (Piece& w : words) {
    std::string mapped;
    mapped.reserve(w.text.size() * 2);
    for (unsigned char b : w.text) unicode::append_utf8(byte_to_unicode(b), mapped);
    out.push_back({std::move(mapped), w.at_start});
  }
}

void metaspace(const PreTokenizerStep& step, Piece piece, std::vector<Piece>& out) {
  std::string s = replace_all(piece.text, " ", step.replacement);
  const bool prepend = step.prepend_scheme == "always" || (step.prepend_scheme == "first" && piece.at_start);
  if (prepend && s.rfind(step.replacement, 0) != 0) s.insert(0, step.replacement);
  if (!step.split) {
    out.push_back({std::move(s), piece.at_start});
    return;
  }
  // MergedWithNext: each piece starts at a replacement character.
  size_t from = 0;
  for (size_t hit = s.find(step.replacement, 1); hit != std::string::npos && !step.replacement.empty();
       hit = s.find(step.replacement, hit + step.replacement.size())) {
    if (hit > from) out.push_back({s.substr(from, hit - from), piece.at_start && from == 0});
    from = hit;
  }
  if (from < s.size()) out.push_back({s.substr(from), piece.at_start && from == 0});
}

void apply_step(const PreTokenizerStep& step, Piece piece, const std::string& source, std::vector<Piece>& out) {
  using Kind = PreTokenizerStep::Kind;
  if (step.kind == Kind::kByteLevel) return byte_level(step, std::move(piece), source, out);
  if (step.kind == Kind::kMetaspace) return metaspace(step, std::move(piece), out);
  Text t;
  unicode::decode_utf8(piece.text, t.cps, t.offsets, source);
  switch (step.kind) {
    case Kind::kSplitGpt2: return split_isolated(piece, t, match_gpt2, out);
    case Kind::kSplitLlama3:
      return split_isolated(piece, t, [](const std::vector<uint32_t>& c, size_t i) { return match_llama3(c, i, 3); }, out);
    case Kind::kSplitQwen2:
      return split_isolated(piece, t, [](const std::vector<uint32_t>& c, size_t i) { return match_llama3(c, i, 1); }, out);
    case Kind::kDigits: return split_digits(piece, t, step.individual_digits, out);
    default: PARE_ASSERT(false, "pre-tokenizer step ", static_cast<int>(step.kind), " has no implementation");
  }
}

}  // namespace

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) out.append(s, at, hit - at) += to;
  return out.append(s, at, std::string::npos);
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const NormalizerStep& s : steps) {
    if (s.kind == NormalizerStep::Kind::kPrepend) {
      if (!text.empty()) text.insert(0, s.content);
    } else {
      text = replace_all(text, s.pattern, s.content);
    }
  }
  return text;
}

std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece> pieces,
                                const std::string& source) {
  for (const PreTokenizerStep& step : steps) {
    std::vector<Piece> next;
    next.reserve(pieces.size() * 2);
    for (Piece& p : pieces)
      if (!p.text.empty()) apply_step(step, std::move(p), source, next);
    pieces = std::move(next);
  }
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& p : pieces)
    if (!p.text.empty()) out.push_back(std::move(p));
  return out;
}

}  // namespace pare::lm
