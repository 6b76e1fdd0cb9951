// pare export MODEL --target onnx|rt --out FILE [--sparse auto|on|off] [--metadata KEY=VALUE ...] [--json]
// pare export LM --target hf --out DIR [--max-shard-size 2GB] [--metadata KEY=VALUE ...] [--json]
// pare export LM --target gguf --out FILE [--type f16|f32|bf16|q8_0|q5_0|q4_0|q4_k] [--metadata KEY=VALUE ...] [--json]
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/onnx_io.h"
#include "export/onnx_export.h"
#include "lm/gguf_export.h"
#include "lm/hf_export.h"
#include "lm/model.h"

namespace pare::cli {

namespace {

struct ExportArgs {
  std::string model, out, target, sparse, max_shard_size, type;
  std::vector<std::string> metadata;
  bool json = false;
};

std::vector<std::pair<std::string, std::string>> metadata_pairs(const ExportArgs& a) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : a.metadata) {
    const auto eq = kv.find('=');
    PARE_CHECK(eq != std::string::npos && eq > 0, "--metadata takes KEY=VALUE, got '", kv, "'");
    out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

// exporter::ExportResult or lm::HfExportResult, whose to_json / to_text are found by argument type.
template <class Result>
void print_result(const ExportArgs& a, const Result& r) {
  if (a.json) {
    nlohmann::json j = to_json(r);
    j["model"] = a.model;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << to_text(r);
  }
}

// A Hugging Face checkpoint folder or a GGUF file needs a language model's config, which only an LM
// source has: a plain ONNX graph does not say which family and dimensions it is.
lm::LmModel load_lm_for(const ExportArgs& a) {
  PARE_CHECK(a.sparse.empty(), "--sparse applies to --target onnx and rt, not ", a.target);
  PARE_CHECK(lm::is_lm_spec(a.model), "--target ", a.target, " writes language models, and '", a.model, "' is none: "
             "give hf:DIR, gguf:FILE, a folder holding config.json or a .gguf file (an ONNX file or zoo model carries "
             "no language-model config to write)");
  return lm::load_lm(a.model);
}

void run_export_hf(const ExportArgs& a) {
  PARE_CHECK(a.type.empty(), "--type applies to --target gguf, not hf");
  lm::HfExportOptions opts;
  if (!a.max_shard_size.empty()) opts.max_shard_bytes(lm::parse_byte_size(a.max_shard_size));
  for (const auto& [key, value] : metadata_pairs(a)) opts.metadata(key, value);
  print_result(a, lm::save_hf(load_lm_for(a), a.out, opts));
}

void run_export_gguf(const ExportArgs& a) {
  PARE_CHECK(a.max_shard_size.empty(), "--max-shard-size applies to --target hf, not gguf (one file)");
  lm::GgufExportOptions opts;
  opts.type(lm::parse_gguf_type(a.type.empty() ? "f16" : a.type));
  for (const auto& [key, value] : metadata_pairs(a)) opts.metadata(key, value);
  print_result(a, lm::save_gguf(load_lm_for(a), a.out, opts));
}

void run_export(const ExportArgs& a) {
  if (a.target == "hf") return run_export_hf(a);
  if (a.target == "gguf") return run_export_gguf(a);
  PARE_CHECK(a.max_shard_size.empty(), "--max-shard-size applies to --target hf, not ", a.target);
  PARE_CHECK(a.type.empty(), "--type applies to --target gguf, not ", a.target);
  exporter::ExportOptions opts;
  opts.target(exporter::parse_target(a.target)).sparse(exporter::parse_sparse_mode(a.sparse.empty() ? "auto" : a.sparse));
  for (const auto& [key, value] : metadata_pairs(a)) opts.metadata(key, value);
  core::Graph g;
  if (lm::is_lm_spec(a.model)) {  // with its config and tokenizer, so that pare reads the file back as one
    lm::LmModel m = lm::load_lm(a.model);
    for (auto& [key, value] : lm::onnx_metadata(m)) m.graph.metadata[key] = value;
    g = std::move(m.graph);
  } else {
    g = core::load_model(a.model);
  }
  print_result(a, exporter::export_model(g, a.out, opts));
}

}  // namespace

void add_export(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "export", "Write a model for a target: ONNX with pruned weights as sparse initializers, a file pare_rt loads, or "
                "a language model as a Hugging Face checkpoint folder or a GGUF file for llama.cpp");
  cmd->footer(
      "--sparse: a sparse (COO) initializer stores each nonzero as its value and an int64 index, so it is smaller "
      "below a density of 1/3 for float32 and 1/9 for int8. auto stores sparse exactly the initializers it makes "
      "smaller; on stores sparse every initializer with a zero, smaller or not (scalars and empty tensors stay dense); "
      "off stores none. "
      "Readers (ONNX Runtime, pare, pare_rt) make them dense at load. The model's metadata is kept; pare.version and "
      "pare.export (how it was exported) are added. --target rt: pare_rt must load the result, else the command "
      "exits 2 naming the node and why, and writes nothing. --target hf (language models only: hf:DIR, gguf:FILE): "
      "config.json, the weights as safetensors under their Hugging Face names, sharded past --max-shard-size with "
      "model.safetensors.index.json, and tokenizer.json, tokenizer_config.json, special_tokens_map.json and "
      "chat_template.jinja when the model's folder has them; the folder is written whole (staged as OUT.partial, "
      "then swapped in), and an existing OUT must be a checkpoint or empty. --target gguf (language models "
      "with a byte-level BPE tokenizer): one GGUF v3 file as llama.cpp's convert_hf_to_gguf.py writes it (llama, "
      "qwen2, qwen3, gpt2; Mistral as llama): llama.cpp's metadata and tensor names, the tokenizer, matrices in "
      "--type, norms and biases in F32. Bytes per weight: f32 4, f16 and bf16 2, q8_0 1.0625 (34 per 32), q5_0 "
      "0.6875 (22 per 32), q4_0 0.5625 (18 per 32), q4_k 0.5625 (144 per 256); q4_k matrices whose rows are not a "
      "multiple of 256 are written q5_0, as llama-quantize falls back; quantized rows must hold whole blocks of 32, "
      "else the command exits 2 naming the tensor. Quantization is ggml's reference rounding (round to "
      "nearest, as llama-quantize without an importance matrix).\n");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("model", a->model,
                  "ONNX file or zoo spec (mlp:784-300-100-10, cnn, ...); for --target hf and gguf a language model "
                  "(hf:DIR, gguf:FILE)")->required();
  cmd->add_option("--target", a->target,
                  "onnx: an ONNX file for any runtime (onnx.checker passes it); rt: also checked to load in "
                  "pare_rt, the oneDNN edge runtime (pare run --engine rt); hf: a Hugging Face checkpoint folder "
                  "(transformers' from_pretrained loads it); gguf: a GGUF file for llama.cpp")
      ->check(CLI::IsMember({"onnx", "rt", "hf", "gguf"}))
      ->required();
  cmd->add_option("--out,-o", a->out,
                  "The file to write (a folder for --target hf); written atomically, nothing on failure")->required();
  cmd->add_option("--sparse", a->sparse,
                  "Which initializers to store as sparse_initializer (COO): auto (default), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "--target hf: the most bytes in one safetensors file before the weights are sharded, as "
                  "transformers spells it: 2GB (default), 500MB, 100KiB, or bytes; 0 never shards");
  cmd->add_option("--type", a->type,
                  "--target gguf: the matrices' ggml type: f16 (default, as convert_hf_to_gguf.py), f32, bf16, q8_0, "
                  "q5_0, q4_0, q4_k")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q5_0", "q4_0", "q4_k"}));
  cmd->add_option("--metadata", a->metadata, "KEY=VALUE: one more metadata_props entry (--target hf: safetensors __metadata__ entry; gguf: a string "
                  "key such as general.name; repeat the option for more)")
      ->allow_extra_args(false);
  cmd->add_flag("--json", a->json, "Print the summary as JSON (bytes, and per initializer: density, sizes, decision; for hf: tensors, shards, files)");
  cmd->callback([&action, a] { action = [a] { run_export(*a); }; });
}

}  // namespace pare::cli
