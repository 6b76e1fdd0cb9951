// A language model in pare: its config (lm/arch.h), its graph (lm/builder.h) and its tokenizer,
// from any source: a Hugging Face checkpoint folder ("hf:DIR", or a folder holding config.json) or a
// GGUF file ("gguf:FILE", or a file ending in .gguf).
//
//   lm::LmModel m = lm::load_lm("hf:ckpt");                        // input_ids -> logits
//   lm::LmModel g = lm::load_lm("hf:ckpt", lm::BuildOptions{true});  // with the KV cache
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "lm/arch.h"
#include "lm/builder.h"
#include "lm/tokenizer.h"

namespace pare::lm {

struct LmModel {
  LmConfig config;
  core::Graph graph;
  std::string tokenizer;  ///< path of tokenizer.json, "" when the source has none
  /// The tokenizer, from tokenizer.json or the GGUF metadata; null when the source has none.
  std::shared_ptr<const Tokenizer> tok;
};

/// True when `spec` names a language model source ("hf:..." or a folder holding config.json).
bool is_lm_spec(const std::string& spec);

/// A GGUF file's model (weights dequantized to fp32, lm/gguf.h). Throws InputError naming the file
/// and the key or tensor pare does not support.
LmModel load_gguf(const std::string& path, const BuildOptions& opts = {});

/// Loads the language model `spec` names; with opts.dtype its config says that type. Also an ONNX
/// file that carries onnx_metadata (`pare export LM --target onnx`, pare quantize's W8A8 of one):
/// its graph as it is, without a KV cache. Throws InputError naming the source when it is none.
LmModel load_lm(const std::string& spec, const BuildOptions& opts = {});

/// `m` built again with `opts` (a KV cache, say) from the weights its graph holds, used in place
/// where they need no conversion. Throws InputError naming `what` when a weight is missing.
LmModel rebuild(const LmModel& m, const BuildOptions& opts, const std::string& what);

/// The metadata that makes an ONNX file of `m`'s graph a language model load_lm reads back:
/// "pare.lm.config" (config.json's text) and "pare.lm.tokenizer" (tokenizer.json's, when m has one).
std::map<std::string, std::string> onnx_metadata(const LmModel& m);

/// `m` with only the decoder layers `keep` (ascending indices), renumbered from 0, with their weights;
/// the embeddings, final norm, head and tokenizer as in `m`: a depth-pruned student
/// (`pare distill --student from-teacher:layers=0,2,4`), built with `opts`. Throws InputError naming
/// `what` and the index when a layer is not one of `m`'s, and what hf_tensors throws.
LmModel keep_layers(const LmModel& m, const std::vector<int64_t>& keep, const std::string& what,
                    const BuildOptions& opts = {});

/// What `pare inspect` shows of a language model: architecture, dimensions, vocabulary,
/// parameters and bytes per block (embedding, each layer's attention / MLP / norms, final norm,
/// head), and the tokenizer.
nlohmann::json summarize(const LmModel& m);
/// summarize() as text.
std::string summary_text(const nlohmann::json& s);

/// Registers "hf:DIR" (and any folder holding config.json) with core::load_model, so that every
/// command taking a model takes a language model. The pare executable calls it at start; a
/// program using core::load_model on such specs calls it once too.
void register_model_sources();

}  // namespace pare::lm
