// libFuzzer target for tokenizer.json (lm::Tokenizer::from_json_text: lm/tokenizer_json.cpp, then
// the maps that lm/tokenizer.cpp builds) and for encoding: the input is a tokenizer.json, optionally
// followed by a line "---" and the text to encode. Reading must give a tokenizer or throw
// pare::InputError naming the file; encoding may refuse only text that is not UTF-8; the ids it
// returns must decode without an error, with and without special tokens. Anything else (another
// exception, a crash, a leak, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "lm/tokenizer.h"

namespace {
const char* const kSource = "fuzz/tokenizer.json";
const char* const kDefaultText = "Hello  world, I'LL don't\t123456 caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC <s></s>\r\n";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find("\n---\n");
  const std::string json = sep == std::string::npos ? input : input.substr(0, sep);
  const std::string text = sep == std::string::npos ? kDefaultText : input.substr(sep + 5);
  pare::lm::Tokenizer* tok = nullptr;
  try {
    tok = new pare::lm::Tokenizer(pare::lm::Tokenizer::from_json_text(json, kSource));
  } catch (const pare::InputError& e) {
    if (std::strstr(e.what(), kSource) == nullptr) {
      std::fprintf(stderr, "tokenizer_fuzz: a refusal that does not name the file: %s\n", e.what());
      std::abort();
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_fuzz: reading threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  for (bool special : {true, false}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text, special);
    } catch (const pare::InputError& e) {
      if (std::strstr(e.what(), "UTF-8") == nullptr) {
        std::fprintf(stderr, "tokenizer_fuzz: encode refused valid text: %s\n", e.what());
        std::abort();
      }
      break;
    }
    try {
      tok->decode(ids, special);
      tok->decode(ids, !special);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tokenizer_fuzz: the ids of encode do not decode: %s\n", e.what());
      std::abort();
    }
  }
  delete tok;
  return 0;
}
