// pare generate MODEL (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N] [--temperature T]
//               [--top-k K] [--top-p P] [--seed S] [--ignore-eos] [--threads N]
//
// lm::Generator over the model's KV-cached graph; tokens are printed as they come, the speeds at
// the end (stderr).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "lm/generate.h"
#include "lm/model.h"
#include "train/run.h"

namespace pare::cli {

namespace {

struct GenerateCli {
  std::string model, prompt;
  std::vector<int64_t> prompt_ids;
  lm::SamplingOptions sampling;
  bool ignore_eos = false, quiet = false, json = false;
  int threads = 0;
};

// Prints the text of the new tokens as they come: the decoded text grows, and what was not printed
// yet is printed once it does not end inside a character (U+FFFD: bytes of a character to come).
class TextStream {
 public:
  explicit TextStream(const lm::Tokenizer& tok) : tok_(tok) {}
  void add(int64_t id) {
    ids_.push_back(static_cast<int32_t>(id));
    const std::string text = tok_.decode(ids_, /*skip_special_tokens=*/true);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (text.size() > printed_) std::cout << text.substr(printed_) << std::flush;
    printed_ = text.size();
  }
  std::string text() const { return tok_.decode(ids_, true); }

 private:
  const lm::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

void run_generate(GenerateCli& o) {
  train::set_threads(o.threads);
  PARE_CHECK(o.prompt.empty() != o.prompt_ids.empty(), "give the prompt as --prompt TEXT or --prompt-ids IDS (one of them)");
  o.sampling.validate();
  lm::BuildOptions build;
  build.kv_cache = true;
  const lm::LmModel m = lm::load_lm(o.model, build);
  std::vector<int64_t> prompt(o.prompt_ids.begin(), o.prompt_ids.end());
  if (!o.prompt.empty()) {
    PARE_CHECK(m.tok != nullptr, o.model, ": --prompt TEXT needs the model's tokenizer, and it has none "
               "(a tokenizer.json beside config.json, or tokenizer.ggml.* in a GGUF file); give --prompt-ids");
    for (int32_t id : m.tok->encode(o.prompt)) prompt.push_back(id);
  }
  for (int64_t id : prompt)
    PARE_CHECK(id >= 0 && id < m.config.vocab, "--prompt-ids: token ", id, " is outside the vocabulary [0, ",
               m.config.vocab, ")");
  if (!o.ignore_eos && m.config.eos >= 0) o.sampling.stop.push_back(m.config.eos);
  lm::Generator gen(m.graph);
  std::vector<int64_t> out;
  std::unique_ptr<TextStream> stream;
  if (m.tok && !o.json) {
    stream = std::make_unique<TextStream>(*m.tok);
    std::cout << o.prompt << std::flush;
  }
  const lm::GenerateStats s = gen.generate(prompt, o.sampling, [&](int64_t id) {
    out.push_back(id);
    if (stream) stream->add(id);
    else if (!o.json) std::cout << (out.size() > 1 ? " " : "") << id << std::flush;
    return true;
  });
  if (o.json) {
    nlohmann::json j = {{"tokens", out}, {"prompt_tokens", s.prompt_tokens}, {"new_tokens", s.new_tokens},
                        {"prefill_seconds", s.prefill_seconds}, {"decode_seconds", s.decode_seconds},
                        {"decode_tokens_per_second", s.decode_tokens_per_second()}};
    if (m.tok) j["text"] = m.tok->decode(std::vector<int32_t>(out.begin(), out.end()), true);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << std::endl;
  }
  if (!o.quiet)
    std::fprintf(stderr, "%lld prompt tokens in %.3f s (%.1f tokens/s), %lld new tokens, decoding %.1f tokens/s\n",
                 static_cast<long long>(s.prompt_tokens), s.prefill_seconds,
                 s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0,
                 static_cast<long long>(s.new_tokens), s.decode_tokens_per_second());
}

}  // namespace

void add_generate(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("generate", "Generate text with a language model (KV-cached decoding, streamed)");
  auto o = std::make_shared<GenerateCli>();
  cmd->add_option("model", o->model, "Language model: hf:DIR (or a folder holding config.json) or gguf:FILE")->required();
  cmd->add_option("--prompt,-p", o->prompt, "The prompt, as text (tokenized with the model's tokenizer)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "The prompt as token ids, e.g. 1,2,3")->delimiter(',');
  cmd->add_option("--max-new-tokens,-n", o->sampling.max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "Softmax temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the K most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Sample among the most likely tokens whose probabilities sum to P")
      ->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Seed of the sampler")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Go on past the end-of-sequence token");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--json", o->json, "Print the new tokens and the speeds as one JSON object");
  cmd->add_flag("--quiet,-q", o->quiet, "No speeds on stderr");
  cmd->footer("Example: pare generate hf:SmolLM2-135M --prompt 'The capital of France is' -n 32 --temperature 0");
  cmd->callback([&action, o] { action = [o] { run_generate(*o); }; });
}

}  // namespace pare::cli
