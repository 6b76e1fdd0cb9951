// lm/hf_export: a language model written as a Hugging Face checkpoint reads back (in pare) as the
// same config and the same tensors, bit for bit, sharded or not; what is no checkpoint (a quantized
// or missing weight, a folder of other files) is refused with nothing written. transformers' side is
// tests/peer/hf_export_test.sh. lm/gguf_export: the same for a GGUF file in F32 (llama.cpp's side:
// tests/peer/gguf_export_test.sh).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/module.h"
#include "lm/gguf_export.h"
#include "lm/hf.h"
#include "lm/hf_export.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

using testing::TempDir;

void expect_same_tensors(const std::map<std::string, at::Tensor>& want, const std::map<std::string, at::Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(testing::bitwise_equal(t, got.at(name))) << name;
  }
}

TEST(ParseByteSize, TakesTransformersSpellings) {
  EXPECT_EQ(parse_byte_size("2GB"), 2'000'000'000);
  EXPECT_EQ(parse_byte_size("500MB"), 500'000'000);
  EXPECT_EQ(parse_byte_size("100KiB"), 102'400);
  EXPECT_EQ(parse_byte_size("3GiB"), int64_t{3} << 30);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("7B"), 7);
  EXPECT_EQ(parse_byte_size("0"), 0);
}

TEST(ParseByteSize, RefusesOtherSpellings) {
  for (const char* bad : {"2gb", "1.5GB", "GB", "-1", "2 GB", "", "5XB", "99999999999999999999"})
    testing::expect_input_error([&] { parse_byte_size(bad); }, {"max_shard_size", "'" + std::string(bad) + "'"});
}

TEST(HfExport, WritesLlamaBackBitForBitInShards) {
  const LmConfig c = tiny_config("llama");
  const auto w = random_weights(c);
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  const HfExportResult r = save_hf(make_model(c, w), dir, HfExportOptions().max_shard_bytes(4000));
  EXPECT_GT(r.shards, 2);
  EXPECT_EQ(r.tensors, static_cast<int64_t>(w.size()));
  EXPECT_TRUE(file_exists(join_path(dir, "model.safetensors.index.json")));
  EXPECT_FALSE(file_exists(join_path(dir, "tokenizer.json")));
  EXPECT_FALSE(file_exists(dir + ".partial/config.json"));
  expect_same_tensors(w, load_hf_weights(dir));
  const LmConfig back = parse_hf_config(join_path(dir, "config.json"));
  EXPECT_EQ(back.family, c.family);
  EXPECT_EQ(back.vocab, c.vocab);
  EXPECT_EQ(back.hidden, c.hidden);
  EXPECT_EQ(back.layers, c.layers);
  EXPECT_EQ(back.heads, c.heads);
  EXPECT_EQ(back.kv_heads, c.kv_heads);
  EXPECT_EQ(back.head_dim, c.head_dim);
  EXPECT_EQ(back.intermediate, c.intermediate);
  EXPECT_EQ(back.max_positions, c.max_positions);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.rope_factor, c.rope_factor);
  EXPECT_EQ(back.rope_original_max, c.rope_original_max);
  EXPECT_EQ(back.norm_eps, c.norm_eps);
  EXPECT_EQ(back.tie_embeddings, false);
  EXPECT_EQ(back.bos, 1);
  EXPECT_EQ(back.eos, 2);
  EXPECT_EQ(back.pad, -1);
  const auto j = nlohmann::json::parse(read_file(join_path(dir, "config.json")));
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_FALSE(j.contains("attention_bias"));
}

TEST(HfExport, WritesGpt2ConvWeightsAsStoredAndLeavesOutTheTiedHead) {
  const LmConfig c = tiny_config("gpt2");
  const auto w = random_weights(c);
  TempDir tmp;
  const HfExportResult r = save_hf(make_model(c, w), tmp.file("gpt2"));
  EXPECT_EQ(r.shards, 1);
  EXPECT_TRUE(file_exists(tmp.file("gpt2/model.safetensors")));
  expect_same_tensors(w, load_hf_weights(tmp.file("gpt2")));  // no lm_head, no constants
  const auto j = nlohmann::json::parse(read_file(tmp.file("gpt2/config.json")));
  EXPECT_EQ(j["n_embd"], 16);
  EXPECT_EQ(j["n_inner"], 24);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_FALSE(j.contains("hidden_size"));
  // And pare loads it back as the graph it came from.
  const LmModel back = load_hf(tmp.file("gpt2"));
  EXPECT_EQ(back.graph.initializers.size(), make_model(c, w).graph.initializers.size());
}

// A Module of the graph trains the checkpoint's tensors and nothing else (GPT-2's GELU constants,
// once [1] tensors, were trained too, and the exported checkpoint lost what they learned).
TEST(HfExport, AModuleTrainsExactlyTheTensorsTheCheckpointHolds) {
  for (const char* family : {"llama", "gpt2"}) {
    const LmConfig c = tiny_config(family);
    const auto w = random_weights(c);
    int64_t want = 0, got = 0;
    for (const auto& [name, t] : w) want += t.numel();
    const core::Module m(make_model(c, w).graph);
    for (const auto& p : m.parameters()) got += p.numel();
    EXPECT_EQ(got, want) << family;
  }
}

TEST(HfExport, WritesBfloat16WeightsAsTheyAre) {
  LmConfig c = tiny_config("qwen3");
  c.dtype = "bfloat16";
  auto w = random_weights(c);
  for (auto& [name, t] : w) t = t.to(at::kBFloat16);
  TempDir tmp;
  const HfExportResult r = save_hf(make_model(c, w), tmp.file("ckpt"));
  EXPECT_EQ(r.config.dtype, "bfloat16");
  expect_same_tensors(w, load_hf_weights(tmp.file("ckpt")));
  const LmConfig back = parse_hf_config(tmp.file("ckpt/config.json"));
  EXPECT_EQ(back.dtype, "bfloat16");
  EXPECT_EQ(back.family, c.family);
}

TEST(HfExport, UntiesAHeadThatNoLongerEqualsTheEmbedding) {
  LmConfig c = tiny_config("llama");
  c.tie_embeddings = true;
  const auto w = random_weights(c);
  LmModel m = make_model(c, w);
  at::Tensor& head = m.graph.initializers.at("model.embed_tokens.weight.T");
  head = head.clone() * 2;  // as training the two apart would leave them
  TempDir tmp;
  save_hf(m, tmp.file("ckpt"));
  const auto got = load_hf_weights(tmp.file("ckpt"));
  ASSERT_TRUE(got.count("lm_head.weight"));
  EXPECT_TRUE(testing::bitwise_equal(got.at("lm_head.weight"), head.t().contiguous()));
  EXPECT_FALSE(parse_hf_config(tmp.file("ckpt/config.json")).tie_embeddings);
  // Left equal, the head stays tied and is not written.
  save_hf(make_model(c, w), tmp.file("tied"));
  EXPECT_FALSE(load_hf_weights(tmp.file("tied")).count("lm_head.weight"));
}

TEST(HfExport, WritesAPrunedMlpWithItsNewWidth) {
  const LmConfig c = tiny_config("llama");
  const auto w = random_weights(c);
  LmModel m = make_model(c, w);
  for (auto& [name, t] : m.graph.initializers) {  // keep 16 of the 24 hidden units in every layer
    if (name.find("gate_proj.weight") != std::string::npos || name.find("up_proj.weight") != std::string::npos)
      t = t.narrow(1, 0, 16).contiguous();
    if (name.find("down_proj.weight") != std::string::npos) t = t.narrow(0, 0, 16).contiguous();
  }
  TempDir tmp;
  save_hf(m, tmp.file("ckpt"));
  EXPECT_EQ(parse_hf_config(tmp.file("ckpt/config.json")).intermediate, 16);
  EXPECT_TRUE(testing::bitwise_equal(load_hf_weights(tmp.file("ckpt")).at("model.layers.1.mlp.down_proj.weight"),
                                     w.at("model.layers.1.mlp.down_proj.weight").narrow(1, 0, 16).contiguous()));
}

TEST(HfExport, RefusesWeightsThatAreNoCheckpointWritingNothing) {
  const LmConfig c = tiny_config("llama");
  TempDir tmp;
  LmModel missing = make_model(c, random_weights(c));
  missing.graph.initializers.erase("model.layers.1.self_attn.k_proj.weight");
  testing::expect_input_error([&] { save_hf(missing, tmp.file("a")); },
                              {"LlamaForCausalLM checkpoint", "model.layers.1.self_attn.k_proj.weight", "missing"});
  LmModel quantized = make_model(c, random_weights(c));
  quantized.graph.initializers["model.layers.0.mlp.up_proj.weight"] =
      quantized.graph.initializers["model.layers.0.mlp.up_proj.weight"].to(at::kChar);
  testing::expect_input_error([&] { save_hf(quantized, tmp.file("b")); }, {"model.layers.0.mlp.up_proj.weight", "int8"});
  EXPECT_TRUE(tmp.list().empty());
}

TEST(HfExport, ReplacesACheckpointButNotAFolderOfOtherFiles) {
  const LmConfig c = tiny_config("llama");
  const LmModel m = make_model(c, random_weights(c));
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_hf(m, dir, HfExportOptions().max_shard_bytes(4000));
  save_hf(m, dir);  // the shards of the first export go with it
  EXPECT_FALSE(file_exists(join_path(dir, "model.safetensors.index.json")));
  EXPECT_TRUE(file_exists(join_path(dir, "model.safetensors")));
  make_dirs(tmp.file("notes"));
  testing::write_bytes(tmp.file("notes/todo.txt"), "keep me");
  testing::expect_input_error([&] { save_hf(m, tmp.file("notes")); }, {"notes", "no Hugging Face checkpoint"});
  EXPECT_EQ(read_file(tmp.file("notes/todo.txt")), "keep me");
  testing::expect_input_error([&] { save_hf(m, tmp.file("missing/parent/ckpt")); }, {"missing/parent"});
}

TEST(HfExport, CopiesTheTokenizerFilesBesideTheModel) {
  const LmConfig c = tiny_config("llama");
  LmModel m = make_model(c, random_weights(c));
  TempDir tmp;
  make_dirs(tmp.file("src"));
  testing::write_bytes(tmp.file("src/tokenizer.json"), "{\"model\": {}}");
  testing::write_bytes(tmp.file("src/tokenizer_config.json"), "{\"bos_token\": \"<s>\"}");
  m.tokenizer = tmp.file("src/tokenizer.json");
  const HfExportResult r = save_hf(m, tmp.file("out"));
  EXPECT_EQ(read_file(tmp.file("out/tokenizer.json")), "{\"model\": {}}");
  EXPECT_EQ(read_file(tmp.file("out/tokenizer_config.json")), "{\"bos_token\": \"<s>\"}");
  EXPECT_FALSE(file_exists(tmp.file("out/special_tokens_map.json")));
  EXPECT_EQ(r.files.size(), 4u);  // config.json, model.safetensors and the two
}

// A byte-level BPE of c.vocab tokens without merges (token i spelled by bytes i/64 and i%64 through
// GPT-2's map), token 0 a special <|endoftext|>, BOS 1 and EOS 2 as in tiny_config.
std::shared_ptr<const Tokenizer> tiny_tokenizer(int64_t vocab) {
  TokenizerModel t;
  for (int64_t i = 0; i < vocab; ++i) {
    std::string s;
    for (uint32_t cp : {byte_to_unicode(static_cast<uint8_t>(33 + i / 64)), byte_to_unicode(static_cast<uint8_t>(33 + i % 64))})
      s += cp < 0x80 ? std::string(1, static_cast<char>(cp))
                     : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    t.vocab.push_back(i == 0 ? "<|endoftext|>" : s);
  }
  AddedToken eot;
  eot.content = "<|endoftext|>";
  eot.special = true;
  t.added.push_back(eot);
  t.bos_id = 1, t.eos_id = 2;
  t.set_pipeline(TokenizerModel::Kind::kByteLevelBpe, "gpt-2");
  return std::make_shared<const Tokenizer>(std::move(t));
}

TEST(GgufExport, WritesLlamaAndGpt2BackBitForBitInF32) {
  for (const char* family : {"llama", "gpt2"}) {
    LmConfig c = tiny_config(family);
    c.rope_factor = 0;  // llama3 scaling is not written yet
    const auto w = random_weights(c);
    LmModel m = make_model(c, w);
    m.tok = tiny_tokenizer(c.vocab);
    TempDir tmp;
    const GgufExportResult r = save_gguf(m, tmp.file("m.gguf"), GgufExportOptions().type(GgmlType::kF32));
    EXPECT_EQ(r.arch, family);
    EXPECT_EQ(r.tokenizer_pre, "gpt-2");
    EXPECT_EQ(r.bytes, static_cast<uint64_t>(read_file(tmp.file("m.gguf")).size()));
    const GgufFile f(tmp.file("m.gguf"));
    EXPECT_EQ(f.get_int("general.file_type"), 0);
    EXPECT_EQ(f.get_int(std::string(family) + ".block_count"), 2);
    EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens")[0], "<|endoftext|>");
    EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type")[0], 3);  // control
    EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
    // Read back by pare's GGUF reader, which undoes llama.cpp's q/k permutation and GPT-2's transposition.
    const LmModel back = load_gguf(tmp.file("m.gguf"));
    LmConfig written = back.config;
    expect_same_tensors(w, hf_tensors(back, written));
    EXPECT_EQ(written.heads, c.heads);
    EXPECT_EQ(written.kv_heads, c.kv_heads);
    EXPECT_EQ(written.norm_eps, static_cast<float>(c.norm_eps));
    EXPECT_TRUE(same_vocabulary(*back.tok, *m.tok));
  }
}

TEST(GgufExport, RefusesWhatGgufCannotHoldWritingNothing) {
  LmConfig c = tiny_config("llama");
  LmModel m = make_model(c, random_weights(c));
  TempDir tmp;
  testing::expect_input_error([&] { save_gguf(m, tmp.file("a.gguf")); }, {"a.gguf", "RoPE scaling"});
  c.rope_factor = 0;
  m = make_model(c, random_weights(c));
  testing::expect_input_error([&] { save_gguf(m, tmp.file("b.gguf")); }, {"b.gguf", "no tokenizer"});
  m.tok = tiny_tokenizer(c.vocab);
  testing::expect_input_error([&] { save_gguf(m, tmp.file("c.gguf"), GgufExportOptions().type(GgmlType::kQ8_0)); },
                              {"c.gguf", "tensor '", "rows of 16 values", "Q8_0's block of 32"});
  m.graph.initializers["model.norm.weight"][3] = std::numeric_limits<float>::infinity();
  testing::expect_input_error([&] { save_gguf(m, tmp.file("d.gguf")); }, {"model.norm.weight", "not finite"});
  testing::expect_input_error([&] { save_gguf(m, tmp.file("e.gguf"), GgufExportOptions().metadata("llama.block_count", "9")); },
                              {"llama.block_count", "pare writes that key itself"});
  EXPECT_TRUE(tmp.list().empty());
  testing::expect_input_error([] { parse_gguf_type("q4_1"); }, {"'q4_1'", "f32, f16, bf16, q8_0, q5_0, q4_0, q4_k"});
}

}  // namespace
}  // namespace pare::lm
