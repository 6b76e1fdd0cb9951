// Tokenizer: added-token splitting, BPE merging and the decoder chain, mirroring Hugging Face
// tokenizers (tokenizers/src/models/bpe/{model,word}.rs, tokenizer/added_vocabulary.rs,
// decoders/*.rs) down to their quirks, since ids must be equal, not similar.
#include "lm/tokenizer.h"

#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "lm/pretokenize.h"
#include "lm/unicode.h"

namespace pare::lm {

namespace {

// Ids at most this (and at most 4 x the number of tokens + 1024): tables by id stay small.
constexpr int64_t kMaxId = 1 << 24;
// Words up to this many bytes are cached (tokenizers' MAX_LENGTH), at most kCacheSize of them.
constexpr size_t kCacheWordBytes = 256;
constexpr size_t kCacheSize = 10000;

std::array<uint32_t, 256> make_byte_map() {
  std::array<uint32_t, 256> map{};
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? static_cast<uint32_t>(b) : 256 + n++;
  }
  return map;
}

const std::array<uint32_t, 256>& byte_map() {
  static const std::array<uint32_t, 256> map = make_byte_map();
  return map;
}

// Leftmost-longest matching of the added tokens (tokenizers uses a daachorse automaton with
// MatchKind::LeftmostLongest; a byte trie gives the same matches for the few tokens there are).
class Trie {
 public:
  void add(const std::string& s, int32_t value) {
    int node = 0;
    for (unsigned char c : s) {
      auto it = nodes_[node].next.find(c);
      if (it == nodes_[node].next.end()) {
        nodes_.push_back({});
        it = nodes_[node].next.emplace(c, static_cast<int>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    nodes_[node].value = value;
  }
  bool empty() const { return nodes_.size() == 1; }
  // The first match at or after `from`: (start, end, value), value -1 when none.
  std::tuple<size_t, size_t, int32_t> find(const std::string& s, size_t from) const {
    for (size_t start = from; start < s.size(); ++start) {
      int node = 0, value = -1;
      size_t end = start;
      for (size_t i = start; i < s.size(); ++i) {
        auto it = nodes_[node].next.find(static_cast<unsigned char>(s[i]));
        if (it == nodes_[node].next.end()) break;
        node = it->second;
        if (nodes_[node].value >= 0) value = nodes_[node].value, end = i + 1;
      }
      if (value >= 0) return {start, end, value};
    }
    return {s.size(), s.size(), -1};
  }

 private:
  struct Node {
    std::unordered_map<unsigned char, int> next;
    int32_t value = -1;
  };
  std::vector<Node> nodes_{1};
};

// A segment of text between added tokens (token < 0) or an added token (its index in `added`).
struct Segment {
  size_t begin, end;
  int32_t token;
};

// The bytes of whitespace that start s[from, ...) (rstrip).
size_t leading_space_bytes(const std::string& s, size_t from) {
  size_t at = from, n;
  while (at < s.size() && unicode::is_whitespace(unicode::code_point_at(s, at, n)) && n > 0) at += n;
  return at - from;
}

// Where the whitespace that ends s[0, end) begins (lstrip).
size_t trailing_space_start(const std::string& s, size_t end) {
  size_t at = end;
  while (at > 0) {
    size_t b = at - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    size_t n;
    if (!unicode::is_whitespace(unicode::code_point_at(s, b, n)) || n != at - b) break;
    at = b;
  }
  return at;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_map()[b]; }

bool same_vocabulary(const Tokenizer& a, const Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size()) return false;
  for (int64_t id = 0; id < a.vocab_size(); ++id)
    if (a.id_to_token(static_cast<int32_t>(id)) != b.id_to_token(static_cast<int32_t>(id))) return false;
  return true;
}

struct Tokenizer::Impl {
  TokenizerModel m;
  std::unordered_map<std::string, int32_t> vocab;      // the BPE model's tokens
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left << 32 | right) -> (rank, merged)
  std::vector<std::string> by_id;                      // added tokens first, then the model's
  std::unordered_map<std::string, int32_t> added_ids;  // added token content -> id
  std::unordered_set<std::string> special;             // contents of the special added tokens
  // What decode reads for a normalized added token whose normalized form differs (tokenizers'
  // simple_id_to_token returns that form, so the decoder undoes the normalization).
  std::unordered_map<int32_t, std::string> decode_as;
  Trie raw_trie, normalized_trie;                      // values: index into m.added
  int32_t unk_id = -1;
  std::array<int32_t, 256> byte_token{};               // id of <0xXX>, -1 when absent
  std::array<int16_t, 0x144> unicode_byte{};           // inverse of byte_to_unicode, -1 elsewhere
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void build();
  std::vector<Segment> split_added(const std::string& s, const Trie& trie) const;
  void encode_piece(const std::string& text, bool at_start, std::vector<int32_t>& ids) const;
  void bpe(const std::string& word, std::vector<int32_t>& ids) const;
  std::vector<int32_t> merge_word(const std::string& word) const;
  std::vector<std::string> run_decoder(std::vector<std::string> tokens) const;
};

void Tokenizer::Impl::build() {
  const std::string& src = m.source;
  const int64_t limit = std::min<int64_t>(kMaxId, 4 * static_cast<int64_t>(m.vocab.size() + m.added.size()) + 1024);
  PARE_CHECK(static_cast<int64_t>(m.vocab.size()) <= limit, src, ": model.vocab has ", m.vocab.size(), " ids, more than ", limit);
  // Tokens from GGUF are raw bytes: the decoders need text.
  auto utf8 = [](const std::string& t) { return unicode::utf8_lossy(t) == t; };
  for (size_t id = 0; id < m.vocab.size(); ++id) {
    if (m.vocab[id].empty()) continue;
    PARE_CHECK(utf8(m.vocab[id]), src, ": model.vocab: token ", id, " is not valid UTF-8");
    PARE_CHECK(vocab.emplace(m.vocab[id], static_cast<int32_t>(id)).second, src, ": model.vocab: token '", m.vocab[id],
               "' has two ids");
  }
  auto id_of = [&](const std::string& t, size_t rank) {
    auto it = vocab.find(t);
    PARE_CHECK(it != vocab.end(), src, ": model.merges[", rank, "]: '", t, "' is not in model.vocab");
    return it->second;
  };
  merges.reserve(m.merges.size());
  for (size_t r = 0; r < m.merges.size(); ++r) {
    const auto& [a, b] = m.merges[r];
    const uint64_t key = static_cast<uint64_t>(id_of(a, r)) << 32 | static_cast<uint32_t>(id_of(b, r));
    merges[key] = {static_cast<int32_t>(r), id_of(a + b, r)};  // a later duplicate wins, as in tokenizers
  }
  if (!m.unk_token.empty()) {
    auto it = vocab.find(m.unk_token);
    PARE_CHECK(it != vocab.end(), src, ": model.unk_token '", m.unk_token, "' is not in model.vocab");
    unk_id = it->second;
  }
  by_id = m.vocab;
  for (size_t i = 0; i < m.added.size(); ++i) {
    const AddedToken& t = m.added[i];
    PARE_CHECK(t.id >= 0 && t.id < limit, src, ": added_tokens[", i, "]: id ", t.id, " is outside 0..", limit - 1);
    PARE_CHECK(!t.content.empty(), src, ": added_tokens[", i, "]: empty content");
    PARE_CHECK(utf8(t.content), src, ": added_tokens[", i, "]: content is not valid UTF-8");
    if (static_cast<size_t>(t.id) >= by_id.size()) by_id.resize(t.id + 1);
    by_id[t.id] = t.content;
    added_ids[t.content] = t.id;
    if (t.special) special.insert(t.content);
    const std::string pattern = t.normalized ? normalize(m.normalizer, t.content) : t.content;
    (t.normalized ? normalized_trie : raw_trie).add(pattern, static_cast<int32_t>(i));
    if (pattern != t.content) decode_as[t.id] = pattern;
    else decode_as.erase(t.id);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab.find(name);
    byte_token[b] = it == vocab.end() ? -1 : it->second;
  }
  unicode_byte.fill(-1);
  for (int b = 0; b < 256; ++b) unicode_byte[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
  for (int32_t id : m.prefix) PARE_CHECK(id >= 0 && id < static_cast<int64_t>(by_id.size()), src, ": post_processor names id ", id, " outside the vocabulary");
  for (int32_t id : m.suffix) PARE_CHECK(id >= 0 && id < static_cast<int64_t>(by_id.size()), src, ": post_processor names id ", id, " outside the vocabulary");
}

// tokenizers' AddedVocabulary::find_matches: the added tokens of `trie` in `s`, lstrip/rstrip
// swallowing the whitespace around them, and the text between them.
std::vector<Segment> Tokenizer::Impl::split_added(const std::string& s, const Trie& trie) const {
  std::vector<Segment> out;
  size_t done = 0;
  for (size_t from = 0; !trie.empty() && from < s.size();) {
    auto [start, stop, index] = trie.find(s, from);
    if (index < 0) break;
    const AddedToken& t = m.added[index];
    from = stop;
    if (t.lstrip) start = std::max(trailing_space_start(s, start), done);
    if (t.rstrip) stop += leading_space_bytes(s, stop);
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, index});
    done = stop;  // the search goes on from the match's own end, as tokenizers' automaton does
  }
  if (done < s.size() || s.empty()) out.push_back({done, s.size(), -1});
  return out;
}

std::vector<int32_t> Tokenizer::Impl::merge_word(const std::string& w) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    size_t len;
  };
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  auto add = [&](int32_t id, size_t len) {
    const auto n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, len});
  };
  int32_t unk = -1;  // a pending unk token and its byte length, as merge_word keeps it
  size_t unk_len = 0;
  for (size_t at = 0; at < w.size();) {
    size_t n = unicode::valid_utf8_length(w, at);
    if (n == 0) n = 1;
    const std::string c = w.substr(at, n);
    at += n;
    auto it = vocab.find(c);
    if (it != vocab.end()) {
      if (unk >= 0) add(unk, unk_len), unk = -1;
      add(it->second, n);
      continue;
    }
    if (m.byte_fallback) {
      bool all = true;
      for (unsigned char b : c) all = all && byte_token[b] >= 0;
      if (all) {  // the pending unk is not flushed first: tokenizers' order, kept
        for (unsigned char b : c) add(byte_token[b], 1);
        continue;
      }
    }
    if (unk_id < 0) continue;  // no unk token: the character is dropped
    if (unk >= 0 && m.fuse_unk) {
      unk_len += n;
    } else {
      if (unk >= 0) add(unk, unk_len);
      unk = unk_id, unk_len = n;
    }
  }
  if (unk >= 0) add(unk, unk_len);

  struct Merge {
    int32_t rank, pos, merged;
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  auto pair_of = [&](int32_t a, int32_t b) {
    return merges.find(static_cast<uint64_t>(sym[a].id) << 32 | static_cast<uint32_t>(sym[b].id));
  };
  std::priority_queue<Merge> queue;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i)
    if (auto it = pair_of(i, i + 1); it != merges.end()) queue.push({it->second.first, i, it->second.second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& s = sym[top.pos];
    if (s.len == 0 || s.next < 0) continue;
    const int32_t right = s.next;
    if (auto it = pair_of(top.pos, right); it == merges.end() || it->second.second != top.merged) continue;
    s.id = top.merged;
    s.len += sym[right].len;
    s.next = sym[right].next;
    sym[right].len = 0;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0)
      if (auto it = pair_of(s.prev, top.pos); it != merges.end()) queue.push({it->second.first, s.prev, it->second.second});
    if (s.next >= 0)
      if (auto it = pair_of(top.pos, s.next); it != merges.end()) queue.push({it->second.first, top.pos, it->second.second});
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : sym)
    if (s.len != 0) ids.push_back(s.id);
  return ids;
}

void Tokenizer::Impl::bpe(const std::string& word, std::vector<int32_t>& ids) const {
  if (m.ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) return ids.push_back(it->second);
  }
  const bool cacheable = word.size() < kCacheWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (auto it = cache.find(word); it != cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> merged = merge_word(word);
  ids.insert(ids.end(), merged.begin(), merged.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() < kCacheSize) cache.emplace(word, std::move(merged));
  }
}

// One piece between raw added tokens: normalized, split at the normalized added tokens, the rest
// pre-tokenized into words and merged.
void Tokenizer::Impl::encode_piece(const std::string& text, bool at_start, std::vector<int32_t>& ids) const {
  const std::string normalized = normalize(m.normalizer, text);
  for (const Segment& seg : split_added(normalized, normalized_trie)) {
    if (seg.token >= 0) {
      ids.push_back(m.added[seg.token].id);
      continue;
    }
    if (seg.end == seg.begin) continue;
    std::vector<Piece> words = pre_tokenize(
        m.pre_tokenizer, {Piece{normalized.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0}},
        "text to encode");
    for (const Piece& w : words) bpe(w.text, ids);
  }
}

Tokenizer::Tokenizer(TokenizerModel model) {
  auto impl = std::make_shared<Impl>();
  impl->m = std::move(model);
  impl->build();
  impl_ = std::move(impl);
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const Impl& im = *impl_;
  for (size_t at = 0; at < text.size();) {
    const size_t n = unicode::valid_utf8_length(text, at);
    PARE_CHECK(n > 0, "text to encode must be valid UTF-8; byte ", at, " is not");
    at += n;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  const bool template_given = !im.m.prefix.empty() || !im.m.suffix.empty();
  if (add_special_tokens) {
    ids.insert(ids.end(), im.m.prefix.begin(), im.m.prefix.end());
    if (!template_given && im.m.add_bos && im.m.bos_id >= 0) ids.push_back(im.m.bos_id);
  }
  for (const Segment& seg : im.split_added(text, im.raw_trie)) {
    if (seg.token >= 0) ids.push_back(im.m.added[seg.token].id);
    else if (seg.end > seg.begin) im.encode_piece(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, ids);
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), im.m.suffix.begin(), im.m.suffix.end());
    if (!template_given && im.m.add_eos && im.m.eos_id >= 0) ids.push_back(im.m.eos_id);
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    PARE_CHECK(id >= 0 && id < static_cast<int64_t>(im.by_id.size()), "token id ", id, " is outside the vocabulary (0..",
               im.by_id.size() - 1, ") of ", im.m.source);
    auto as = im.decode_as.find(id);
    const std::string& t = as != im.decode_as.end() ? as->second : im.by_id[id];
    if (t.empty() || (skip_special_tokens && im.special.count(t))) continue;  // tokenizers drops both
    tokens.push_back(t);
  }
  if (im.m.decoder.empty()) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  std::string out;
  for (const std::string& t : im.run_decoder(std::move(tokens))) out += t;
  return out;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return id >= 0 && id < static_cast<int64_t>(impl_->by_id.size()) ? impl_->by_id[id] : std::string();
}

int32_t Tokenizer::token_to_id(const std::string& token) const {
  if (auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->by_id.size()); }
int32_t Tokenizer::bos_id() const { return impl_->m.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->m.eos_id; }
int32_t Tokenizer::pad_id() const { return impl_->m.pad_id; }
const TokenizerModel& Tokenizer::model() const { return impl_->m; }

namespace {

// tokenizers' ByteFallback: "<0xXX>" (6 bytes; Rust's u8::from_str_radix also takes "+X").
int byte_fallback_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) ? std::stoi(std::string(1, c), nullptr, 16) : -1; };
  if (t[3] == '+') return hex(t[4]);
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (unicode::utf8_lossy(bytes) == bytes) out.push_back(bytes);
  else for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");
  bytes.clear();
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  for (std::string& t : tokens) {
    const int b = byte_fallback_value(t);
    if (b >= 0) {
      bytes += static_cast<char>(b);
      continue;
    }
    flush_bytes(bytes, out);
    out.push_back(std::move(t));
  }
  flush_bytes(bytes, out);
  return out;
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  unicode::decode_utf8(s, cps, offs, "token");
  return cps;
}

std::string strip(const std::string& t, uint32_t content, int start, int stop) {
  const std::vector<uint32_t> c = code_points(t);
  size_t from = 0, to = c.size();
  for (int i = 0; i < start && from < c.size() && c[from] == content; ++i) ++from;
  for (int i = 0; i < stop && to > from && c[to - 1] == content; ++i) --to;
  std::string out;
  for (size_t i = from; i < to; ++i) unicode::append_utf8(c[i], out);
  return out;
}

}  // namespace

std::vector<std::string> Tokenizer::Impl::run_decoder(std::vector<std::string> tokens) const {
  using Kind = DecoderStep::Kind;
  for (const DecoderStep& d : m.decoder) {
    if (d.kind == Kind::kByteLevel) {
      std::string bytes;
      for (const std::string& t : tokens) {
        std::string mine;
        bool all = true;
        for (uint32_t cp : code_points(t)) {
          const int b = cp < unicode_byte.size() ? unicode_byte[cp] : -1;
          if (b < 0) all = false;
          else mine += static_cast<char>(b);
        }
        bytes += all ? mine : t;
      }
      tokens = {unicode::utf8_lossy(bytes)};
    } else if (d.kind == Kind::kReplace) {
      for (std::string& t : tokens) t = replace_all(t, d.pattern, d.content);
    } else if (d.kind == Kind::kByteFallback) {
      tokens = byte_fallback(std::move(tokens));
    } else if (d.kind == Kind::kFuse) {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens = {all};
    } else if (d.kind == Kind::kStrip) {
      const uint32_t content = code_points(d.content).at(0);
      for (std::string& t : tokens) t = strip(t, content, d.start, d.stop);
    } else if (d.kind == Kind::kMetaspace) {
      const bool drop_first = d.prepend_scheme != "never";
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], d.replacement, i == 0 && drop_first ? "" : " ");
    }
  }
  return tokens;
}

}  // namespace pare::lm
