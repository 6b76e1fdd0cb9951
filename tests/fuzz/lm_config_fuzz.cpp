// libFuzzer target for the language models' small text readers: a Hugging Face config.json
// (lm/arch.cpp's parse_hf_config_text: the family table, its keys and their checks), and the text
// data readers (lm/text.cpp: jsonl lines, paragraphs). They must return or throw pare::InputError;
// anything else is a bug. Seeds (tests/fuzz/corpus/lm_config): the configs transformers writes for
// the five families, and a jsonl file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "lm/arch.h"
#include "lm/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const pare::lm::LmConfig c = pare::lm::parse_hf_config_text(text, "fuzz/config.json");
    (void)c.parameter_count();
  } catch (const pare::InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "config.json: not an InputError: %s\n", e.what());
    std::abort();
  }
  try {
    (void)pare::lm::parse_jsonl(text, "text", "fuzz.jsonl");
  } catch (const pare::InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jsonl: not an InputError: %s\n", e.what());
    std::abort();
  }
  (void)pare::lm::split_paragraphs(text);
  return 0;
}
