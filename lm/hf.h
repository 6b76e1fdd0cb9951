// Hugging Face checkpoints: a folder with config.json, the weights in model.safetensors or in
// shards listed by model.safetensors.index.json (mapped, not copied), and tokenizer.json.
//
//   lm::LmModel m = lm::load_hf("SmolLM2-135M/");        // or lm::load_lm("hf:SmolLM2-135M")
//   core::Module net(m.graph);                            // input_ids -> logits
#pragma once

#include <map>
#include <string>

#include "core/graph.h"
#include "lm/arch.h"
#include "lm/builder.h"
#include "lm/model.h"

namespace pare::lm {

/// True when `dir` is a folder holding config.json.
bool is_hf_dir(const std::string& dir);

/// The weights of a checkpoint folder by name: model.safetensors.index.json's shards, or
/// model.safetensors. Throws InputError naming the folder when it has neither.
std::map<std::string, at::Tensor> load_hf_weights(const std::string& dir);

/// Reads config.json and the weights, and builds the graph (lm/builder.h). Throws InputError
/// naming the file and key or tensor for anything pare does not support.
LmModel load_hf(const std::string& dir, const BuildOptions& opts = {});

}  // namespace pare::lm
