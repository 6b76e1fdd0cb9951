#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "lm/pretokenize.h"
#include "lm/tokenizer.h"
#include "lm/unicode.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

using Ids = std::vector<int32_t>;

// A BPE over single letters a..e plus `extra` tokens, merging in the order given.
TokenizerModel letters(std::vector<std::string> extra, std::vector<std::pair<std::string, std::string>> merges) {
  TokenizerModel m;
  m.kind = TokenizerModel::Kind::kSentencePieceBpe;
  m.vocab = {"a", "b", "c", "d", "e"};
  for (auto& t : extra) m.vocab.push_back(t);
  m.merges = std::move(merges);
  return m;
}

std::vector<std::string> words(const std::vector<PreTokenizerStep>& steps, const std::string& text) {
  std::vector<std::string> out;
  for (const Piece& p : pre_tokenize(steps, {Piece{text, true}}, "test")) out.push_back(p.text);
  return out;
}

PreTokenizerStep split(PreTokenizerStep::Kind kind) {
  PreTokenizerStep s;
  s.kind = kind;
  return s;
}

// A tokenizer.json around `model`, with the other keys given as JSON text.
std::string tokenizer_json(const std::string& model, const std::string& rest = "") {
  return R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,)"
         R"("pre_tokenizer":null,"post_processor":null,"decoder":null,"model":)" + model + rest + "}";
}
const char* const kBpe = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";

TEST(ByteToUnicode, PrintableBytesAreThemselvesTheRestShiftPast255) {
  EXPECT_EQ(byte_to_unicode('!'), static_cast<uint32_t>('!'));
  EXPECT_EQ(byte_to_unicode('~'), static_cast<uint32_t>('~'));
  EXPECT_EQ(byte_to_unicode(0xA1), 0xA1u);
  EXPECT_EQ(byte_to_unicode(0), 0x100u);
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);  // "Ġ"
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);
  std::set<uint32_t> all;
  for (int b = 0; b < 256; ++b) all.insert(byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(all.size(), 256u);
}

TEST(Tokenizer, MergesApplyInRankOrder) {
  // "abc": b+c ranks first, so a|bc, then a+bc.
  Tokenizer first_bc(letters({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}));
  EXPECT_EQ(first_bc.encode("abc", false), (Ids{7}));
  Tokenizer only_bc(letters({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(only_bc.encode("abc", false), (Ids{0, 6}));
  Tokenizer only_ab(letters({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(only_ab.encode("abc", false), (Ids{5, 2}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  Tokenizer tok(letters({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(tok.encode("aaa", false), (Ids{5, 0}));
  EXPECT_EQ(tok.encode("aaaa", false), (Ids{5, 5}));
}

TEST(Tokenizer, IgnoreMergesTakesAVocabWordWhole) {
  // "abc" is a token but no merge reaches it: merging gives ab|c, ignore_merges the token itself.
  TokenizerModel m = letters({"ab", "abc"}, {{"a", "b"}});
  EXPECT_EQ(Tokenizer(m).encode("abc", false), (Ids{5, 2}));
  m.ignore_merges = true;
  EXPECT_EQ(Tokenizer(m).encode("abc", false), (Ids{6}));
}

TEST(Tokenizer, UnknownCharactersFallBackToBytesThenUnk) {
  TokenizerModel m = letters({"<unk>", "<0xC3>", "<0xA9>"}, {});
  m.unk_token = "<unk>";
  m.fuse_unk = true;
  EXPECT_EQ(Tokenizer(m).encode("axyb", false), (Ids{0, 5, 1}));  // x and y fused into one unk
  m.byte_fallback = true;
  EXPECT_EQ(Tokenizer(m).encode("aéb", false), (Ids{0, 6, 7, 1}));
  m.decoder = {DecoderStep{DecoderStep::Kind::kByteFallback}, DecoderStep{DecoderStep::Kind::kFuse}};
  EXPECT_EQ(Tokenizer(m).decode({0, 6, 7, 1}), "aéb");
  EXPECT_EQ(Tokenizer(m).decode({0, 6, 1}), "a\xEF\xBF\xBD" "b");  // half a character: U+FFFD
}

TEST(Tokenizer, AddedTokensSplitFirstLongestAndSpecialOnesSkippedOnDecode) {
  TokenizerModel m = letters({}, {});
  m.added = {{5, "<s>", true}, {6, "<s>x", false}, {7, "ab", false}};
  m.prefix = {5};
  Tokenizer tok(m);
  EXPECT_EQ(tok.encode("c<s>xa<s>bab", false), (Ids{2, 6, 0, 5, 1, 7}));
  EXPECT_EQ(tok.encode("c", true), (Ids{5, 2}));
  EXPECT_EQ(tok.decode({5, 2, 6}, true), "c <s>x");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok.token_to_id("<s>"), 5);
  EXPECT_EQ(tok.id_to_token(6), "<s>x");
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.bos_id(), -1);
}

TEST(Tokenizer, SentencePieceNormalizerPrependsPerPieceBetweenAddedTokens) {
  TokenizerModel m;
  m.vocab = {"<s>", "\u2581", "a", "b", "\u2581a"};
  m.merges = {{"\u2581", "a"}};
  m.added = {{0, "<s>", true}};
  m.set_pipeline(TokenizerModel::Kind::kSentencePieceBpe, "");
  Tokenizer tok(m);
  EXPECT_EQ(tok.encode("a b", false), (Ids{4, 1, 3}));
  EXPECT_EQ(tok.encode("b<s>a", false), (Ids{1, 3, 0, 4}));  // each piece gets its own "▁"
  EXPECT_EQ(tok.decode({4, 1, 3}), "a b");
}

TEST(PreTokenize, Gpt2PatternKeepsOneSpaceWithTheNextWord) {
  const std::vector<PreTokenizerStep> gpt2 = {split(PreTokenizerStep::Kind::kSplitGpt2)};
  EXPECT_EQ(words(gpt2, "Hello  world's 12ab!!  \n"),
            (std::vector<std::string>{"Hello", " ", " world", "'s", " 12", "ab", "!!", "  \n"}));
  EXPECT_EQ(words(gpt2, "I'LL"), (std::vector<std::string>{"I", "'", "LL"}));  // case-sensitive
}

TEST(PreTokenize, Llama3PatternFoldsCaseAndGroupsThreeDigits) {
  const std::vector<PreTokenizerStep> llama3 = {split(PreTokenizerStep::Kind::kSplitLlama3)};
  EXPECT_EQ(words(llama3, "I'LL 12345 ok?!\r\n\n  x"),
            (std::vector<std::string>{"I", "'LL", " ", "123", "45", " ok", "?!\r\n\n", " ", " x"}));
  EXPECT_EQ(words(llama3, "a \t\n b"), (std::vector<std::string>{"a", " \t\n", " b"}));
  EXPECT_EQ(words(llama3, "'\u017F"), (std::vector<std::string>{"'\u017F"}));  // ſ folds to s
  const std::vector<PreTokenizerStep> qwen2 = {split(PreTokenizerStep::Kind::kSplitQwen2)};
  EXPECT_EQ(words(qwen2, "123"), (std::vector<std::string>{"1", "2", "3"}));
}

TEST(PreTokenize, DigitsAndByteLevelInSequence) {
  PreTokenizerStep digits = split(PreTokenizerStep::Kind::kDigits);
  digits.individual_digits = true;
  PreTokenizerStep bytes = split(PreTokenizerStep::Kind::kByteLevel);
  EXPECT_EQ(words({digits, bytes}, "a 42"), (std::vector<std::string>{"a", "\u0120", "4", "2"}));
  // U+11DE0 is numeric to Rust (Digits) but not \p{N} to Oniguruma (scripts/gen_unicode_tables.py).
  EXPECT_EQ(words({digits}, "x\U00011DE0\U00011DE1"), (std::vector<std::string>{"x", "\U00011DE0", "\U00011DE1"}));
  EXPECT_FALSE(unicode::is_number(0x11DE0));
  bytes.add_prefix_space = true;
  bytes.use_regex = false;
  EXPECT_EQ(words({bytes}, "é"), (std::vector<std::string>{"\u0120\u00C3\u00A9"}));
}

TEST(Unicode, LossyDecodingReplacesEachMaximalBadSubpart) {
  EXPECT_EQ(unicode::utf8_lossy("a\xE2\x82" "b"), "a\xEF\xBF\xBD" "b");     // truncated 3-byte: one U+FFFD
  EXPECT_EQ(unicode::utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two bad bytes: two
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_TRUE(unicode::is_letter(0x4E2D));
  EXPECT_TRUE(unicode::is_number(0x0663));
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x1C));
}

TEST(Tokenizer, EncodeRefusesInvalidUtf8) {
  Tokenizer tok(letters({}, {}));
  testing::expect_input_error([&] { tok.encode("a\xC3"); }, {"valid UTF-8"});
  testing::expect_input_error([&] { tok.decode({99}); }, {"outside the vocabulary"});
}

TEST(TokenizerJson, ReadsByteLevelFileAndDecodes) {
  const std::string text = R"({"added_tokens":[{"id":3,"content":"<|eot|>","special":true,"normalized":false}],)"
                           R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
                           R"("post_processor":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},)"
                           R"("model":{"type":"BPE","vocab":{"a":0,"Ġ":1,"Ġa":2},"merges":[["Ġ","a"]],"ignore_merges":false}})";
  Tokenizer tok = Tokenizer::from_json_text(text, "t.json");
  EXPECT_EQ(tok.model().kind, TokenizerModel::Kind::kByteLevelBpe);
  EXPECT_EQ(tok.encode("a a<|eot|>"), (Ids{0, 2, 3}));
  EXPECT_EQ(tok.decode({0, 2, 3}, true), "a a");
  EXPECT_EQ(tok.decode({0, 2, 3}), "a a<|eot|>");
}

TEST(TokenizerJson, RefusesWhatItDoesNotImplementNamingFileAndKey) {
  testing::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  struct Case {
    std::string json, expect;
  };
  const std::vector<Case> cases = {
      {tokenizer_json(R"({"type":"WordPiece","vocab":{"a":0},"unk_token":"[UNK]"})"), "'model.type': 'WordPiece'"},
      {tokenizer_json(R"({"type":"Unigram","vocab":[["a",0.0]]})"), "'model.type': 'Unigram'"},
      {tokenizer_json(kBpe, R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Isolated","invert":false})"),
       "'pre_tokenizer.pattern'"},
      {tokenizer_json(kBpe, R"(,"normalizer":{"type":"NFC"})"), "'normalizer.type': normalizer 'NFC'"},
      {tokenizer_json(kBpe, R"(,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Whitespace"}]})"),
       "'pre_tokenizer.pretokenizers[0].type'"},
      {tokenizer_json(kBpe, R"(,"post_processor":{"type":"BertProcessing"})"), "'post_processor.type'"},
      {tokenizer_json(kBpe, R"(,"decoder":{"type":"WordPiece"})"), "'decoder.type'"},
      {tokenizer_json(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})"), "model.merges[0]: 'ab' is not in model.vocab"},
      {tokenizer_json(R"({"type":"BPE","vocab":{"a":-1},"merges":[]})"), "'model.vocab.a'"},
      {tokenizer_json(R"({"type":"BPE","vocab":{"a":0},"merges":["a"]})"), "'model.merges[0]'"},
      {tokenizer_json(R"({"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"})"), "model.unk_token '<unk>'"},
      {R"({"truncation":{"max_length":5},"model":)" + std::string(kBpe) + "}", "'truncation'"},
      {"{\"model\": [", "not a tokenizer.json"},
      {"[]", "not a tokenizer.json"},
  };
  for (const Case& c : cases) {
    testing::write_bytes(path, c.json);
    SCOPED_TRACE(c.json);
    testing::expect_input_error([&] { Tokenizer::from_file(path); }, {path, c.expect});
  }
  testing::expect_input_error([&] { Tokenizer::from_file(dir.file("missing.json")); }, {"missing.json"});
}

TEST(TokenizerJson, SpecialIdsComeFromTokenizerConfigBesideIt) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("tokenizer.json"),
                       tokenizer_json(kBpe, R"(,"added_tokens":[{"id":3,"content":"</s>","special":true}])"));
  EXPECT_EQ(Tokenizer::from_file(dir.file("tokenizer.json")).eos_id(), -1);
  testing::write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token":{"content":"</s>"},"pad_token":"ab"})");
  const Tokenizer tok = Tokenizer::from_file(dir.file("tokenizer.json"));
  EXPECT_EQ(tok.eos_id(), 3);
  EXPECT_EQ(tok.pad_id(), 2);
  EXPECT_EQ(tok.bos_id(), -1);
  testing::write_bytes(dir.file("tokenizer_config.json"), R"({"bos_token":"<s>"})");
  testing::expect_input_error([&] { Tokenizer::from_file(dir.file("tokenizer.json")); },
                              {"tokenizer_config.json", "'bos_token'", "'<s>' is not a token"});
}

TEST(TokenizerModel, GgufPresetsMatchTheirTokenizerJson) {
  TokenizerModel m;
  m.set_pipeline(TokenizerModel::Kind::kByteLevelBpe, "smollm");
  ASSERT_EQ(m.pre_tokenizer.size(), 2u);
  EXPECT_EQ(m.pre_tokenizer[0].kind, PreTokenizerStep::Kind::kDigits);
  EXPECT_TRUE(m.pre_tokenizer[0].individual_digits);
  EXPECT_EQ(m.pre_tokenizer[1].kind, PreTokenizerStep::Kind::kByteLevel);
  m.set_pipeline(TokenizerModel::Kind::kByteLevelBpe, "llama-bpe");
  EXPECT_EQ(m.pre_tokenizer[0].kind, PreTokenizerStep::Kind::kSplitLlama3);
  EXPECT_TRUE(m.ignore_merges);
  testing::expect_input_error([&] { m.set_pipeline(TokenizerModel::Kind::kByteLevelBpe, "deepseek-llm"); }, {"deepseek-llm"});
  testing::expect_input_error([&] { m.set_pipeline(TokenizerModel::Kind::kByteLevelBpe, "qwen2"); }, {"qwen2"});
}

TEST(TokenizerJson, WritesWhatItReadsForEveryGgufPipeline) {
  for (const char* pre : {"gpt-2", "llama-bpe", "smollm", "default"}) {
    const bool spm = std::string(pre) == "default";
    TokenizerModel m;
    m.vocab = {"<s>", "</s>", "a", "b", "ab", spm ? "\u2581" : "\u0120", spm ? "\u2581ab" : "\u0120ab", "1"};
    m.merges = {{"a", "b"}, {m.vocab[5], "ab"}};
    for (int32_t id : {0, 1}) {
      AddedToken a;
      a.id = id, a.content = m.vocab[id], a.special = true;
      m.added.push_back(a);
    }
    m.bos_id = 0, m.eos_id = 1, m.add_bos = true;
    m.set_pipeline(spm ? TokenizerModel::Kind::kSentencePieceBpe : TokenizerModel::Kind::kByteLevelBpe, pre);
    const Tokenizer original(m);
    const TokenizerModel back = parse_tokenizer_json(tokenizer_json(m), "written");
    const Tokenizer reread(back);
    EXPECT_TRUE(same_vocabulary(original, reread)) << pre;
    EXPECT_EQ(back.merges, m.merges) << pre;
    EXPECT_EQ(back.pre_tokenizer.size(), m.pre_tokenizer.size()) << pre;
    EXPECT_EQ(back.decoder.size(), m.decoder.size()) << pre;
    EXPECT_EQ(back.prefix, std::vector<int32_t>{0}) << pre;  // add_bos became the template
    for (const char* text : {"ab ab", " ab1 a</s>", "b"})
      EXPECT_EQ(reread.encode(text), original.encode(text)) << pre << ": " << text;
    const auto config = nlohmann::json::parse(tokenizer_config_json(m));
    EXPECT_EQ(config["bos_token"], "<s>");
    EXPECT_EQ(config["eos_token"], "</s>");
  }
}

}  // namespace
}  // namespace pare::lm
