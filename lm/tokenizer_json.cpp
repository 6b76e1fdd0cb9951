// Reads Hugging Face's tokenizer.json into a TokenizerModel, and the GGUF-named presets. Anything
// the tokenizer does not implement exactly is refused naming the file and the key.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "lm/tokenizer.h"

namespace pare::lm {

namespace {

using nlohmann::json;

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A parser that knows which file and key it is at, so every refusal names them.
struct Reader {
  const std::string& source;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(source + ": key '" + key + "': " + what);
  }
  const json& field(const json& obj, const std::string& key, const std::string& name) const {
    auto it = obj.find(name);
    if (it == obj.end()) fail(key + "." + name, "missing");
    return *it;
  }
  std::string str(const json& obj, const std::string& key, const std::string& name) const {
    const json& v = field(obj, key, name);
    if (!v.is_string()) fail(key + "." + name, std::string("must be a string, got ") + v.type_name());
    return v;
  }
  std::string str_or(const json& obj, const std::string& key, const std::string& name, const std::string& dflt) const {
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? dflt : str(obj, key, name);
  }
  bool flag(const json& obj, const std::string& key, const std::string& name, bool dflt) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) fail(key + "." + name, std::string("must be true or false, got ") + it->type_name());
    return *it;
  }
  int64_t integer(const json& v, const std::string& key) const {
    if (!v.is_number_integer()) fail(key, std::string("must be an integer, got ") + v.type_name());
    return v.get<int64_t>();
  }
  std::string type(const json& obj, const std::string& key) const {
    if (!obj.is_object()) fail(key, std::string("must be an object, got ") + obj.type_name());
    return str(obj, key, "type");
  }
  const json& array(const json& obj, const std::string& key, const std::string& name) const {
    const json& v = field(obj, key, name);
    if (!v.is_array()) fail(key + "." + name, std::string("must be an array, got ") + v.type_name());
    return v;
  }
  // {"String": s} patterns only: a regex Replace is refused.
  std::string string_pattern(const json& obj, const std::string& key) const {
    const json& p = field(obj, key, "pattern");
    if (!p.is_object() || !p.contains("String") || !p["String"].is_string())
      fail(key + ".pattern", "only {\"String\": ...} patterns are supported, got " + p.dump());
    return p["String"];
  }
  // {"type": "Sequence", `list`: [...]}: runs `each` on every element with its key; false for another type.
  template <class Each>
  bool sequence(const json& j, const std::string& key, const std::string& type, const std::string& list, Each each) const {
    if (type != "Sequence") return false;
    const json& items = array(j, key, list);
    for (size_t i = 0; i < items.size(); ++i) each(items[i], key + "." + list + "[" + std::to_string(i) + "]");
    return true;
  }
  void one_char(const std::string& s, const std::string& key) const {
    if (s.empty() || s.size() > 4) fail(key, "must be one character, got '" + s + "'");
  }

  void model(const json& j, TokenizerModel& m) const;
  void normalizer(const json& j, const std::string& key, TokenizerModel& m) const;
  void pre_tokenizer(const json& j, const std::string& key, TokenizerModel& m) const;
  void decoder(const json& j, const std::string& key, TokenizerModel& m) const;
  void post_processor(const json& j, const std::string& key, TokenizerModel& m) const;
  void added_tokens(const json& j, TokenizerModel& m) const;
};

void Reader::model(const json& j, TokenizerModel& m) const {
  const json& mo = field(j, "", "model");
  const std::string type = mo.is_object() && !mo.contains("type") && mo.contains("merges") ? "BPE" : this->type(mo, "model");
  if (type != "BPE")
    fail("model.type", "'" + type + "' is not supported (pare reads BPE tokenizers: byte-level as GPT-2/Llama 3/Qwen2, "
                       "SentencePiece-style with byte fallback as Llama 2/Mistral)");
  auto dropout = mo.find("dropout");
  if (dropout != mo.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail("model.dropout", "BPE dropout is not supported, got " + dropout->dump());
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!str_or(mo, "model", name, "").empty()) fail(std::string("model.") + name, "is not supported");
  m.unk_token = str_or(mo, "model", "unk_token", "");
  m.fuse_unk = flag(mo, "model", "fuse_unk", false);
  m.byte_fallback = flag(mo, "model", "byte_fallback", false);
  m.ignore_merges = flag(mo, "model", "ignore_merges", false);
  const json& vocab = field(mo, "model", "vocab");
  if (!vocab.is_object()) fail("model.vocab", "must be an object of token: id");
  const int64_t limit = std::min<int64_t>(1 << 24, 4 * static_cast<int64_t>(vocab.size()) + 1024);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = integer(it.value(), "model.vocab." + it.key());
    if (id < 0 || id >= limit) fail("model.vocab." + it.key(), "id " + std::to_string(id) + " is outside 0.." + std::to_string(limit - 1));
    if (static_cast<size_t>(id) >= m.vocab.size()) m.vocab.resize(id + 1);
    if (it.key().empty()) fail("model.vocab", "has an empty token");
    m.vocab[id] = it.key();
  }
  const json& merges = array(mo, "model", "merges");
  m.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& mg = merges[i];
    const std::string key = "model.merges[" + std::to_string(i) + "]";
    if (mg.is_string()) {
      const std::string s = mg;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) fail(key, "must be two tokens apart by one space, got '" + s + "'");
      m.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      m.merges.emplace_back(mg[0], mg[1]);
    } else {
      fail(key, "must be \"a b\" or [\"a\", \"b\"], got " + mg.dump());
    }
  }
}

void Reader::normalizer(const json& j, const std::string& key, TokenizerModel& m) const {
  if (j.is_null()) return;
  const std::string type = this->type(j, key);
  if (sequence(j, key, type, "normalizers", [&](const json& e, const std::string& k) { normalizer(e, k, m); })) return;
  if (type == "Prepend") {
    m.normalizer.push_back({NormalizerStep::Kind::kPrepend, "", str(j, key, "prepend")});
  } else if (type == "Replace") {
    m.normalizer.push_back({NormalizerStep::Kind::kReplace, string_pattern(j, key), str(j, key, "content")});
  } else {
    fail(key + ".type", "normalizer '" + type + "' is not supported (pare has Prepend, Replace and Sequence)");
  }
}

void Reader::pre_tokenizer(const json& j, const std::string& key, TokenizerModel& m) const {
  using Kind = PreTokenizerStep::Kind;
  if (j.is_null()) return;
  const std::string type = this->type(j, key);
  if (sequence(j, key, type, "pretokenizers", [&](const json& e, const std::string& k) { pre_tokenizer(e, k, m); })) return;
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.add_prefix_space = flag(j, key, "add_prefix_space", true);
    step.use_regex = flag(j, key, "use_regex", true);
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    step.individual_digits = flag(j, key, "individual_digits", false);
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    step.replacement = str(j, key, "replacement");
    one_char(step.replacement, key + ".replacement");
    // Files before tokenizers 0.19 say add_prefix_space instead of prepend_scheme.
    step.prepend_scheme = str_or(j, key, "prepend_scheme", flag(j, key, "add_prefix_space", true) ? "always" : "never");
    if (step.prepend_scheme != "always" && step.prepend_scheme != "first" && step.prepend_scheme != "never")
      fail(key + ".prepend_scheme", "must be always, first or never, got '" + step.prepend_scheme + "'");
    step.split = flag(j, key, "split", true);
  } else if (type == "Split") {
    const json& p = field(j, key, "pattern");
    const std::string regex = p.is_object() && p.contains("Regex") && p["Regex"].is_string() ? p["Regex"].get<std::string>() : "";
    if (regex == kGpt2Pattern) step.kind = Kind::kSplitGpt2;
    else if (regex == kLlama3Pattern) step.kind = Kind::kSplitLlama3;
    else if (regex == kQwen2Pattern) step.kind = Kind::kSplitQwen2;
    else fail(key + ".pattern", "split pattern " + p.dump() + " is not one pare implements (GPT-2's, Llama 3's, Qwen2's)");
    if (str(j, key, "behavior") != "Isolated") fail(key + ".behavior", "only Isolated is supported");
    if (flag(j, key, "invert", false)) fail(key + ".invert", "only false is supported");
  } else {
    fail(key + ".type", "pre-tokenizer '" + type + "' is not supported (pare has ByteLevel, Split, Digits, Metaspace, Sequence)");
  }
  m.pre_tokenizer.push_back(step);
}

void Reader::decoder(const json& j, const std::string& key, TokenizerModel& m) const {
  using Kind = DecoderStep::Kind;
  if (j.is_null()) return;
  const std::string type = this->type(j, key);
  if (sequence(j, key, type, "decoders", [&](const json& e, const std::string& k) { decoder(e, k, m); })) return;
  DecoderStep d;
  if (type == "ByteLevel") {
    d.kind = Kind::kByteLevel;
  } else if (type == "Replace") {
    d.kind = Kind::kReplace;
    d.pattern = string_pattern(j, key);
    d.content = str(j, key, "content");
  } else if (type == "ByteFallback") {
    d.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    d.kind = Kind::kFuse;
  } else if (type == "Strip") {
    d.kind = Kind::kStrip;
    d.content = str(j, key, "content");
    one_char(d.content, key + ".content");
    d.start = static_cast<int>(std::clamp<int64_t>(integer(field(j, key, "start"), key + ".start"), 0, 1 << 20));
    d.stop = static_cast<int>(std::clamp<int64_t>(integer(field(j, key, "stop"), key + ".stop"), 0, 1 << 20));
  } else if (type == "Metaspace") {
    d.kind = Kind::kMetaspace;
    d.replacement = str(j, key, "replacement");
    one_char(d.replacement, key + ".replacement");
    d.prepend_scheme = str_or(j, key, "prepend_scheme", flag(j, key, "add_prefix_space", true) ? "always" : "never");
  } else {
    fail(key + ".type", "decoder '" + type + "' is not supported (pare has ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                        "Metaspace, Sequence)");
  }
  m.decoder.push_back(d);
}

void Reader::post_processor(const json& j, const std::string& key, TokenizerModel& m) const {
  if (j.is_null()) return;
  const std::string type = this->type(j, key);
  if (type == "ByteLevel") return;  // offsets only: the ids are the text's
  if (sequence(j, key, type, "processors", [&](const json& e, const std::string& k) { post_processor(e, k, m); })) return;
  if (type != "TemplateProcessing")
    fail(key + ".type", "post-processor '" + type + "' is not supported (pare has TemplateProcessing, ByteLevel, Sequence)");
  const json& single = array(j, key, "single");
  const json& specials = field(j, key, "special_tokens");
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string k = key + ".single[" + std::to_string(i) + "]";
    const json& piece = single[i];
    if (piece.contains("Sequence")) {
      if (!piece["Sequence"].is_object() || piece["Sequence"].value("id", "") != "A" || seen_a) fail(k, "the template for one text must hold sequence A once");
      seen_a = true;
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].is_object()) {
      const std::string name = str(piece["SpecialToken"], k + ".SpecialToken", "id");
      if (!specials.is_object() || !specials.contains(name)) fail(key + ".special_tokens", "has no '" + name + "'");
      for (const json& id : array(specials[name], key + ".special_tokens." + name, "ids"))
        (seen_a ? m.suffix : m.prefix).push_back(static_cast<int32_t>(integer(id, key + ".special_tokens." + name + ".ids")));
    } else {
      fail(k, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + piece.dump());
    }
  }
  if (!seen_a) fail(key + ".single", "the template never names sequence A");
}

void Reader::added_tokens(const json& j, TokenizerModel& m) const {
  auto list = j.find("added_tokens");
  if (list == j.end() || list->is_null()) return;
  if (!list->is_array()) fail("added_tokens", "must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object()) fail(key, "must be an object");
    AddedToken a;
    const int64_t id = integer(field(t, key, "id"), key + ".id");
    if (id < 0 || id >= (1 << 24)) fail(key + ".id", "id " + std::to_string(id) + " is out of range");
    a.id = static_cast<int32_t>(id);
    a.content = str(t, key, "content");
    if (a.content.empty()) fail(key + ".content", "is empty");
    a.special = flag(t, key, "special", false);
    a.normalized = flag(t, key, "normalized", !a.special);
    a.lstrip = flag(t, key, "lstrip", false);
    a.rstrip = flag(t, key, "rstrip", false);
    if (flag(t, key, "single_word", false)) fail(key + ".single_word", "true is not supported");
    m.added.push_back(a);
  }
}

void check_rest(const Reader& r, const json& j) {
  auto trunc = j.find("truncation");
  if (trunc != j.end() && !trunc->is_null()) r.fail("truncation", "must be null (pare never truncates silently)");
  auto pad = j.find("padding");
  if (pad != j.end() && !pad->is_null() && pad->is_object() && pad->contains("strategy") && (*pad)["strategy"].is_object())
    r.fail("padding.strategy", "fixed-length padding is not supported");
}

}  // namespace

TokenizerModel parse_tokenizer_json(const std::string& text, const std::string& source) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  PARE_CHECK(j.is_object(), source, ": not a tokenizer.json (a JSON object with a \"model\")");
  const Reader r{source};
  TokenizerModel m;
  m.source = source;
  check_rest(r, j);
  r.model(j, m);
  r.normalizer(j.value("normalizer", json()), "normalizer", m);
  r.pre_tokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer", m);
  r.decoder(j.value("decoder", json()), "decoder", m);
  r.post_processor(j.value("post_processor", json()), "post_processor", m);
  r.added_tokens(j, m);
  bool byte_level = false;
  for (const auto& s : m.pre_tokenizer) byte_level |= s.kind == PreTokenizerStep::Kind::kByteLevel;
  for (const auto& d : m.decoder) byte_level |= d.kind == DecoderStep::Kind::kByteLevel;
  m.kind = byte_level ? TokenizerModel::Kind::kByteLevelBpe : TokenizerModel::Kind::kSentencePieceBpe;
  if (!m.prefix.empty()) m.bos_id = m.prefix.front();
  if (!m.suffix.empty()) m.eos_id = m.suffix.back();
  return m;
}

namespace {

// A list of steps as tokenizers writes it: null, the one step, or a Sequence of them under `key`.
json steps_json(const std::vector<json>& steps, const char* key) {
  if (steps.empty()) return nullptr;
  if (steps.size() == 1) return steps.front();
  return {{"type", "Sequence"}, {key, steps}};
}

json normalizer_json(const NormalizerStep& n) {
  if (n.kind == NormalizerStep::Kind::kPrepend) return {{"type", "Prepend"}, {"prepend", n.content}};
  return {{"type", "Replace"}, {"pattern", {{"String", n.pattern}}}, {"content", n.content}};
}

json pre_tokenizer_json(const PreTokenizerStep& p) {
  using Kind = PreTokenizerStep::Kind;
  switch (p.kind) {
    case Kind::kByteLevel:
      return {{"type", "ByteLevel"}, {"add_prefix_space", p.add_prefix_space}, {"trim_offsets", true},
              {"use_regex", p.use_regex}};
    case Kind::kDigits: return {{"type", "Digits"}, {"individual_digits", p.individual_digits}};
    case Kind::kMetaspace:
      return {{"type", "Metaspace"}, {"replacement", p.replacement}, {"prepend_scheme", p.prepend_scheme},
              {"split", p.split}};
    default: {
      const char* regex = p.kind == Kind::kSplitGpt2 ? kGpt2Pattern : p.kind == Kind::kSplitLlama3 ? kLlama3Pattern : kQwen2Pattern;
      return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
    }
  }
}

json decoder_json(const DecoderStep& d) {
  using Kind = DecoderStep::Kind;
  switch (d.kind) {
    case Kind::kByteLevel:
      return {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    case Kind::kReplace: return {{"type", "Replace"}, {"pattern", {{"String", d.pattern}}}, {"content", d.content}};
    case Kind::kByteFallback: return {{"type", "ByteFallback"}};
    case Kind::kFuse: return {{"type", "Fuse"}};
    case Kind::kStrip: return {{"type", "Strip"}, {"content", d.content}, {"start", d.start}, {"stop", d.stop}};
    default:
      return {{"type", "Metaspace"}, {"replacement", d.replacement}, {"prepend_scheme", d.prepend_scheme}, {"split", true}};
  }
}

// The token of `id`: the added token's content, else the vocabulary's.
std::string token_of(const TokenizerModel& m, int32_t id) {
  for (const AddedToken& a : m.added)
    if (a.id == id) return a.content;
  return id >= 0 && static_cast<size_t>(id) < m.vocab.size() ? m.vocab[id] : "";
}

// TemplateProcessing for one text: the prefix ids, sequence A, the suffix ids.
json post_processor_json(const TokenizerModel& m) {
  std::vector<int32_t> prefix = m.prefix, suffix = m.suffix;
  if (prefix.empty() && suffix.empty()) {
    if (m.add_bos && m.bos_id >= 0) prefix = {m.bos_id};
    if (m.add_eos && m.eos_id >= 0) suffix = {m.eos_id};
  }
  if (prefix.empty() && suffix.empty()) return nullptr;
  json single = json::array(), special = json::object();
  auto add = [&](int32_t id) {
    const std::string t = token_of(m, id);
    single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
    special[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
  };
  for (int32_t id : prefix) add(id);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (int32_t id : suffix) add(id);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", special}};
}

}  // namespace

std::string tokenizer_json(const TokenizerModel& m) {
  std::vector<json> normalizers, pre, decoders;
  for (const auto& n : m.normalizer) normalizers.push_back(normalizer_json(n));
  for (const auto& p : m.pre_tokenizer) pre.push_back(pre_tokenizer_json(p));
  for (const auto& d : m.decoder) decoders.push_back(decoder_json(d));
  json vocab = json::object(), merges = json::array(), added = json::array();
  for (size_t id = 0; id < m.vocab.size(); ++id)
    if (!m.vocab[id].empty()) vocab[m.vocab[id]] = id;
  for (const auto& [a, b] : m.merges) merges.push_back({a, b});
  for (const AddedToken& a : m.added)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", a.normalized}, {"special", a.special}});
  const json model = {{"type", "BPE"}, {"dropout", nullptr},
                      {"unk_token", m.unk_token.empty() ? json() : json(m.unk_token)},
                      {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                      {"fuse_unk", m.fuse_unk}, {"byte_fallback", m.byte_fallback},
                      {"ignore_merges", m.ignore_merges}, {"vocab", vocab}, {"merges", merges}};
  const json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
                  {"normalizer", steps_json(normalizers, "normalizers")},
                  {"pre_tokenizer", steps_json(pre, "pretokenizers")}, {"post_processor", post_processor_json(m)},
                  {"decoder", steps_json(decoders, "decoders")}, {"model", model}};
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json(const TokenizerModel& m) {
  json j = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  for (auto [key, id] : {std::pair<const char*, int32_t>{"bos_token", m.bos_id}, {"eos_token", m.eos_id},
                         {"pad_token", m.pad_id}})
    if (id >= 0) j[key] = token_of(m, id);
  j["add_bos_token"] = m.add_bos;
  j["add_eos_token"] = m.add_eos;
  return j.dump(2) + "\n";
}

Tokenizer Tokenizer::from_json_text(const std::string& text, const std::string& source) {
  return Tokenizer(parse_tokenizer_json(text, source));
}

namespace {

// The id of token `t` in `m` (added tokens first), -1 when it has none.
int32_t id_of(const TokenizerModel& m, const std::string& t) {
  for (const AddedToken& a : m.added)
    if (a.content == t) return a.id;
  for (size_t id = 0; id < m.vocab.size(); ++id)
    if (m.vocab[id] == t) return static_cast<int32_t>(id);
  return -1;
}

// BOS, EOS and pad from transformers' tokenizer_config.json beside the tokenizer.json, when there is
// one: {"bos_token": "<s>" or {"content": "<s>", ...}, ...}. The ids only; the template decides
// what encode adds.
void read_special_ids(const std::string& path, TokenizerModel& m) {
  const std::string config = join_path(dir_name(path), "tokenizer_config.json");
  if (!file_exists(config)) return;
  const json j = json::parse(read_file(config), nullptr, /*allow_exceptions=*/false);
  PARE_CHECK(j.is_object(), config, ": not a JSON object");
  const Reader r{config};
  for (auto [key, id] : {std::pair<const char*, int32_t*>{"bos_token", &m.bos_id}, {"eos_token", &m.eos_id}, {"pad_token", &m.pad_id}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const std::string token = it->is_object() ? r.str(*it, key, "content") : it->is_string() ? it->get<std::string>() : "";
    if (!it->is_object() && !it->is_string()) r.fail(key, "must be a token or {\"content\": token}");
    *id = id_of(m, token);
    if (*id < 0) r.fail(key, "'" + token + "' is not a token of " + path);
  }
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  TokenizerModel m = parse_tokenizer_json(read_file(path), path);
  read_special_ids(path, m);
  return Tokenizer(std::move(m));
}

void TokenizerModel::set_pipeline(Kind k, const std::string& pre) {
  using P = PreTokenizerStep::Kind;
  using D = DecoderStep::Kind;
  kind = k;
  normalizer.clear();
  pre_tokenizer.clear();
  decoder.clear();
  auto byte_level = [](bool use_regex) {
    PreTokenizerStep s;
    s.kind = P::kByteLevel;
    s.use_regex = use_regex;
    return s;
  };
  if (k == Kind::kSentencePieceBpe) {
    PARE_CHECK(pre.empty() || pre == "default", source, ": tokenizer.ggml.pre '", pre,
               "' is not supported for a SentencePiece (llama) vocabulary");
    normalizer = {{NormalizerStep::Kind::kPrepend, "", "\u2581"}, {NormalizerStep::Kind::kReplace, " ", "\u2581"}};
    byte_fallback = true;
    DecoderStep replace{D::kReplace, "\u2581", " "}, strip{D::kStrip, "", " ", 1, 0};
    decoder = {replace, DecoderStep{D::kByteFallback}, DecoderStep{D::kFuse}, strip};
    return;
  }
  PreTokenizerStep split;
  if (pre == "gpt-2") {
    pre_tokenizer = {byte_level(true)};
  } else if (pre == "llama-bpe") {
    split.kind = P::kSplitLlama3;
    pre_tokenizer = {split, byte_level(false)};
    ignore_merges = true;
  } else if (pre == "smollm") {
    split.kind = P::kDigits;
    split.individual_digits = true;
    pre_tokenizer = {split, byte_level(true)};
  } else {
    // qwen2 too: Qwen2's tokenizer.json normalizes to NFC first, which pare does not implement yet.
    throw InputError(source + ": tokenizer.ggml.pre '" + pre +
                     "' is not supported (pare has gpt-2, llama-bpe and smollm for byte-level BPE)");
  }
  decoder = {DecoderStep{D::kByteLevel}};
}

}  // namespace pare::lm
