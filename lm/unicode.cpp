#include "lm/unicode.h"

#include <algorithm>

#include "core/error.h"

namespace pare::lm::unicode {

namespace {
bool in_ranges(const CodeRange* ranges, size_t n, uint32_t cp) {
  const CodeRange* end = ranges + n;
  const CodeRange* it = std::upper_bound(ranges, end, cp, [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// The continuation-byte bounds of the second byte after lead `b0` (Unicode Table 3-7), which rule
// out overlong forms, surrogates and code points past U+10FFFF.
bool second_byte_ok(unsigned char b0, unsigned char b1) {
  if (b0 == 0xE0) return b1 >= 0xA0 && b1 <= 0xBF;
  if (b0 == 0xED) return b1 >= 0x80 && b1 <= 0x9F;
  if (b0 == 0xF0) return b1 >= 0x90 && b1 <= 0xBF;
  if (b0 == 0xF4) return b1 >= 0x80 && b1 <= 0x8F;
  return b1 >= 0x80 && b1 <= 0xBF;
}

size_t sequence_length(unsigned char b0) {
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return 2;
  if (b0 >= 0xE0 && b0 <= 0xEF) return 3;
  if (b0 >= 0xF0 && b0 <= 0xF4) return 4;
  return 0;
}

// How many bytes from s[at] form the longest valid prefix of a UTF-8 sequence (at least 1): the
// "maximal subpart" that from_utf8_lossy replaces by one U+FFFD.
size_t maximal_subpart(std::string_view s, size_t at) {
  const auto b0 = static_cast<unsigned char>(s[at]);
  const size_t need = sequence_length(b0);
  if (need < 2 || at + 1 >= s.size() || !second_byte_ok(b0, static_cast<unsigned char>(s[at + 1]))) return 1;
  size_t n = 2;
  while (n < need && at + n < s.size() && (static_cast<unsigned char>(s[at + n]) & 0xC0) == 0x80) ++n;
  return n;
}
}  // namespace

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetterRanges, kLetterRanges_size, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, kNumberRanges_size, cp);
}

bool is_numeric(uint32_t cp) {
  return is_number(cp) || (cp >= 0x80 && in_ranges(kNumericExtraRanges, kNumericExtraRanges_size, cp));
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t valid_utf8_length(std::string_view s, size_t at) {
  const auto b0 = static_cast<unsigned char>(s[at]);
  const size_t need = sequence_length(b0);
  if (need == 0 || at + need > s.size()) return 0;
  if (need == 1) return 1;
  if (!second_byte_ok(b0, static_cast<unsigned char>(s[at + 1]))) return 0;
  for (size_t i = 2; i < need; ++i)
    if ((static_cast<unsigned char>(s[at + i]) & 0xC0) != 0x80) return 0;
  return need;
}

uint32_t code_point_at(std::string_view s, size_t at, size_t& len) {
  len = valid_utf8_length(s, at);
  if (len == 0) return 0xFFFD;
  uint32_t cp = static_cast<unsigned char>(s[at]);
  if (len > 1) {
    cp &= 0x7F >> len;
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[at + i]) & 0x3F);
  }
  return cp;
}

void decode_utf8(std::string_view s, std::vector<uint32_t>& cps, std::vector<size_t>& offsets,
                 const std::string& what) {
  cps.clear();
  offsets.clear();
  cps.reserve(s.size());
  offsets.reserve(s.size() + 1);
  for (size_t at = 0; at < s.size();) {
    size_t n;
    const uint32_t cp = code_point_at(s, at, n);
    PARE_CHECK(n > 0, what, ": text must be valid UTF-8; byte ", at, " is not");
    cps.push_back(cp);
    offsets.push_back(at);
    at += n;
  }
  offsets.push_back(s.size());
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = valid_utf8_length(bytes, at);
    if (n > 0) {
      out.append(bytes.substr(at, n));
      at += n;
    } else {
      out += "\xEF\xBF\xBD";
      at += maximal_subpart(bytes, at);
    }
  }
  return out;
}

}  // namespace pare::lm::unicode
