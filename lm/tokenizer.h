// Language-model tokenizers: text to token ids and back, exactly as Hugging Face `tokenizers` does
// it for the BPE models of GPT-2, Llama 2 and 3, Mistral, TinyLlama, Qwen2 and SmolLM2.
//
//   lm::Tokenizer tok = lm::Tokenizer::from_file("tokenizer.json");
//   std::vector<int32_t> ids = tok.encode("Hello world");     // BOS first where the file says so
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
//
// Encoding, as tokenizers runs it: (1) the added tokens are split out of the text (leftmost,
// longest first; those marked `normalized` are looked for after normalization); (2) each other
// piece is normalized (Prepend, Replace) and (3) pre-tokenized into words (the GPT-2, Llama 3 and
// Qwen2 split patterns, Digits, ByteLevel's bytes-to-unicode map, Metaspace); (4) BPE merges each
// word by merge rank; (5) the post-processor's template adds BOS/EOS when special tokens are asked
// for. Decoding runs the decoder chain (ByteLevel, or Replace/ByteFallback/Fuse/Strip, Metaspace).
//
// Two ways in: a tokenizer.json (from_file), or a TokenizerModel filled by hand or from GGUF
// metadata (tokenizer.ggml.*), with set_pipeline naming the kind and llama.cpp's pre-tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pare::lm {

/// One normalizer step (tokenizer.json "normalizer", in order).
struct NormalizerStep {
  enum class Kind {
    kPrepend,  ///< Prepend `content` to a non-empty piece.
    kReplace,  ///< Replace every occurrence of `pattern` by `content`.
  };
  Kind kind = Kind::kReplace;
  std::string pattern, content;
};

/// One pre-tokenizer step (tokenizer.json "pre_tokenizer", in order); each splits every word further.
struct PreTokenizerStep {
  enum class Kind {
    kSplitGpt2,    ///< GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kSplitLlama3,  ///< Llama 3's (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kSplitQwen2,   ///< as Llama 3 with \p{N} (one digit) for \p{N}{1,3}
    kDigits,       ///< numbers apart: each digit alone (`individual_digits`) or runs of digits
    kByteLevel,    ///< optional prefix space, GPT-2 split when `use_regex`, then bytes to unicode
    kMetaspace,    ///< spaces to `replacement`, prepended per `prepend_scheme`, split before it if `split`
  };
  Kind kind = Kind::kByteLevel;
  bool individual_digits = false;         ///< kDigits
  bool add_prefix_space = false;          ///< kByteLevel
  bool use_regex = true;                  ///< kByteLevel
  std::string replacement = "\u2581";     ///< kMetaspace ("▁")
  std::string prepend_scheme = "always";  ///< kMetaspace: always, first (only at the text's start) or never
  bool split = true;                      ///< kMetaspace
};

/// One decoder step (tokenizer.json "decoder", in order), applied to the list of token strings.
struct DecoderStep {
  enum class Kind {
    kByteLevel,     ///< unicode back to bytes, all tokens joined, invalid UTF-8 as U+FFFD
    kReplace,       ///< `pattern` to `content` in every token
    kByteFallback,  ///< runs of <0xXX> tokens to the text they encode (U+FFFD per byte if invalid)
    kFuse,          ///< all tokens joined into one
    kStrip,         ///< up to `start` leading and `stop` trailing `content` characters off every token
    kMetaspace,     ///< `replacement` to " ", dropped at the start of the first token unless prepend_scheme is never
  };
  Kind kind = Kind::kFuse;
  std::string pattern, content;
  int start = 0, stop = 0;
  std::string replacement = "\u2581";
  std::string prepend_scheme = "always";
};

/// A token matched literally in the text before anything else (tokenizer.json "added_tokens";
/// GGUF token types 3 control = special, 4 user-defined = not special).
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;     ///< skipped by decode(..., skip_special_tokens = true)
  bool normalized = false;  ///< matched in the normalized text (else in the raw text)
  bool lstrip = false;      ///< swallows the whitespace before it
  bool rstrip = false;      ///< swallows the whitespace after it
};

/// Everything a tokenizer is, as plain data. from_file fills it from a tokenizer.json; a GGUF
/// reader fills vocab, merges, added (from token types), the ids, and calls set_pipeline.
struct TokenizerModel {
  enum class Kind {
    kByteLevelBpe,        ///< GPT-2, Llama 3, Qwen2 (pattern; NFC not yet), SmolLM2 (tokenizer.ggml.model "gpt2")
    kSentencePieceBpe,    ///< Llama 2, Mistral, TinyLlama: "▁" for spaces, <0xXX> byte fallback ("llama")
  };
  Kind kind = Kind::kByteLevelBpe;
  /// Token text by id; "" where no model token has that id. Byte-level vocabularies spell bytes
  /// through GPT-2's bytes-to-unicode map ("Ġ" is the space), SentencePiece ones spaces as "▁".
  std::vector<std::string> vocab;
  /// Merges by rank (index 0 merges first): the two tokens whose concatenation is a vocab token.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;
  std::string unk_token;       ///< "" when characters outside the vocabulary are dropped
  bool fuse_unk = false;       ///< consecutive unknown characters make one unk token
  bool byte_fallback = false;  ///< unknown characters as their <0xXX> byte tokens
  bool ignore_merges = false;  ///< a word that is a vocab token is taken whole (Llama 3)
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;  ///< -1: none
  bool add_bos = false;  ///< encode(text, true) starts with bos_id (when `prefix` is empty)
  bool add_eos = false;  ///< encode(text, true) ends with eos_id (when `suffix` is empty)
  /// The post-processor's template for one sequence: ids before and after the text. When both are
  /// empty, add_bos / add_eos decide.
  std::vector<int32_t> prefix, suffix;
  std::string source = "tokenizer";  ///< the file it came from, for error messages

  /// Sets normalizer, pre_tokenizer and decoder (and ignore_merges, byte_fallback) the way
  /// llama.cpp names them: kind kByteLevelBpe with `pre` "gpt-2" (GPT-2, and tokenizers' plain
  /// ByteLevel), "llama-bpe" (Llama 3) or "smollm"; kind kSentencePieceBpe with pre "" or "default". Throws InputError naming `source` and `pre`
  /// for any other ("qwen2" too: Qwen2 normalizes to NFC first, which pare lacks so far).
  void set_pipeline(Kind kind, const std::string& pre);
};

/// A tokenizer ready to run: built once (vocabulary and merge maps), then encode/decode are const
/// and safe to call from several threads.
class Tokenizer {
 public:
  /// Reads a Hugging Face tokenizer.json, and BOS/EOS/pad ids from the tokenizer_config.json beside it
  /// when there is one (else BOS is the template's first token). Throws InputError naming the file and the key for a model
  /// other than BPE (WordPiece, Unigram, WordLevel), a normalizer, pre-tokenizer, split pattern,
  /// post-processor or decoder that pare does not implement, truncation, malformed content, and a
  /// tokenizer_config.json naming a token the vocabulary lacks.
  static Tokenizer from_file(const std::string& path);
  /// The same from the file's text (`source` names it in errors).
  static Tokenizer from_json_text(const std::string& text, const std::string& source);
  /// Builds the maps. Throws InputError (naming model.source) for a merge of tokens outside the
  /// vocabulary, an unk_token outside it, ids out of range, or duplicate tokens.
  explicit Tokenizer(TokenizerModel model);

  /// The ids of `text` (valid UTF-8, else InputError); `add_special_tokens` adds the template's
  /// BOS/EOS (Hugging Face's encode(text, add_special_tokens)).
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true) const;
  /// The text of `ids`; special added tokens left out when `skip_special_tokens`. Throws
  /// InputError for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// The token of `id` (added tokens first, as Hugging Face), "" for an id that has none.
  std::string id_to_token(int32_t id) const;
  /// The id of `token` (an added token or a vocab token), -1 when there is none.
  int32_t token_to_id(const std::string& token) const;
  /// One past the largest id (model vocabulary and added tokens): the embedding's row count.
  int64_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  const TokenizerModel& model() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// True when `a` and `b` spell every id with the same token (the same vocabulary, added tokens
/// included): models tokenized by them produce logits over the same tokens.
bool same_vocabulary(const Tokenizer& a, const Tokenizer& b);

/// GPT-2's bytes-to-unicode map: the character that byte `b` is spelled with in byte-level vocabularies.
uint32_t byte_to_unicode(uint8_t b);

/// Parses a tokenizer.json's text into a TokenizerModel (what from_json_text builds from).
TokenizerModel parse_tokenizer_json(const std::string& text, const std::string& source);
/// The tokenizer.json of `m` (parse_tokenizer_json's inverse, which Hugging Face `tokenizers` reads
/// too): for a tokenizer that came from a GGUF file's metadata, so a folder written from it has one.
/// BOS/EOS added by add_bos/add_eos become the post-processor's template.
std::string tokenizer_json(const TokenizerModel& m);
/// The tokenizer_config.json transformers reads beside it: the BOS, EOS and pad tokens of `m`.
std::string tokenizer_config_json(const TokenizerModel& m);

}  // namespace pare::lm
