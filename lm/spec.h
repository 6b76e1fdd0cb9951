// A new language model from a spec, as the zoo makes vision models:
//
//   llama:layers=4,dim=256,heads=4,kv-heads=2,ff=688,ctx=256[,vocab=N][,tie=1][,theta=10000]
//   qwen2:... qwen3:...[,head-dim=D] gpt2:layers=..,dim=..,heads=..,ctx=..
//
// with weights initialized as transformers initializes them (normal, std 0.02; norms 1, biases 0),
// seeded. The vocabulary comes from the tokenizer when the spec does not give one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lm/arch.h"
#include "lm/model.h"

namespace pare::lm {

/// True when `spec` starts with a family's model_type and a colon ("llama:...").
bool is_new_lm_spec(const std::string& spec);

/// The config a spec names; `vocab` is used when the spec has no vocab=. Throws InputError naming
/// the spec and the key for an unknown family or key, or a value out of range.
LmConfig parse_lm_spec(const std::string& spec, int64_t vocab);

/// A model of config `c` with fresh weights (seeded), as transformers' _init_weights makes them.
LmModel init_model(const LmConfig& c, uint64_t seed);

/// A new model of `spec` (init_model) for the tokenizer `tok` read from `tokenizer_path`: its
/// vocabulary is `vocab` when > 0, else the tokenizer's (a spec's vocab= comes first), its BOS, EOS
/// and padding ids the tokenizer's. Throws what parse_lm_spec throws.
LmModel new_model(const std::string& spec, std::shared_ptr<const Tokenizer> tok, const std::string& tokenizer_path,
                  uint64_t seed, int64_t vocab = 0);

}  // namespace pare::lm
