// pare tokenize TOKENIZER_JSON|LM [--text S] [--decode] [--no-special] [--json]
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "lm/model.h"
#include "lm/tokenizer.h"

namespace pare::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text;
  bool text_given = false, decode = false, no_special = false, json = false;
};

// One line of ids: a JSON array (--json) or ids apart by spaces.
std::vector<int32_t> parse_ids(const std::string& line, bool json, size_t lineno) {
  std::vector<int32_t> ids;
  if (json) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    PARE_CHECK(j.is_array(), "stdin:", lineno, ": expected a JSON array of token ids, got '", line, "'");
    for (const auto& v : j) {
      PARE_CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX, "stdin:", lineno,
                 ": token ids must be integers, got ", v.dump());
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return ids;
  }
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(word.c_str(), &end, 10);
    PARE_CHECK(*end == '\0' && errno == 0 && id >= INT32_MIN && id <= INT32_MAX, "stdin:", lineno, ": '", word,
               "' is not a token id");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

void print_ids(const std::vector<int32_t>& ids, bool json, std::ostream& out) {
  if (json) {
    out << nlohmann::json(ids).dump() << "\n";
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << "\n";
}

// A tokenizer.json, or the tokenizer of a language model (hf:DIR, gguf:FILE: the one in its metadata).
std::shared_ptr<const lm::Tokenizer> load_tokenizer(const std::string& spec) {
  if (!lm::is_lm_spec(spec)) return std::make_shared<const lm::Tokenizer>(lm::Tokenizer::from_file(spec));
  std::shared_ptr<const lm::Tokenizer> tok = lm::load_lm(spec).tok;
  PARE_CHECK(tok != nullptr, spec, ": the model has no tokenizer");
  return tok;
}

void tokenize(const TokenizeOptions& o) {
  const std::shared_ptr<const lm::Tokenizer> loaded = load_tokenizer(o.tokenizer);
  const lm::Tokenizer& tok = *loaded;
  std::vector<std::string> lines;
  if (o.text_given) {
    lines.push_back(o.text);
  } else {
    for (std::string line; std::getline(std::cin, line);) lines.push_back(line);
  }
  // Everything is printed at the end: a bad line leaves no partial output behind.
  std::ostringstream out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!o.decode) {
      print_ids(tok.encode(lines[i], !o.no_special), o.json, out);
      continue;
    }
    const std::string text = tok.decode(parse_ids(lines[i], o.json, i + 1), o.no_special);
    out << (o.json ? nlohmann::json(text).dump() : text) << "\n";
  }
  std::cout << out.str() << std::flush;
}

}  // namespace

void add_tokenize(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("tokenize", "Text to token ids (or back) with a Hugging Face tokenizer.json or a language model's tokenizer");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("tokenizer", o->tokenizer,
                  "tokenizer.json (byte-level BPE or SentencePiece-style BPE), or a language model whose tokenizer "
                  "to use (hf:DIR, gguf:FILE: the one in its metadata)")->required();
  auto* text = cmd->add_option("--text", o->text, "The text to encode (or ids to decode); default: each line of stdin");
  cmd->add_flag("--decode", o->decode, "Read token ids (a JSON array per line with --json) and print their text");
  cmd->add_flag("--no-special", o->no_special,
                "Encoding: no BOS/EOS from the post-processor; decoding: leave special tokens out");
  cmd->add_flag("--json", o->json, "One JSON array of ids per line (decoding: one JSON string per line)");
  cmd->callback([&action, o, text] {
    o->text_given = text->count() > 0;
    action = [o] { tokenize(*o); };
  });
}

}  // namespace pare::cli
