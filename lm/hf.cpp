#include "lm/hf.h"

#include <sys/stat.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"

namespace pare::lm {

namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool is_hf_dir(const std::string& dir) { return is_dir(dir) && file_exists(join_path(dir, "config.json")); }

std::map<std::string, at::Tensor> load_hf_weights(const std::string& dir) {
  const std::string index = join_path(dir, "model.safetensors.index.json");
  if (file_exists(index)) return core::load_safetensors(index);
  const std::string single = join_path(dir, "model.safetensors");
  PARE_CHECK(file_exists(single), "'", dir, "' holds neither model.safetensors nor model.safetensors.index.json "
             "(pare reads safetensors checkpoints, not pytorch_model.bin)");
  return core::load_safetensors(single);
}

LmModel load_hf(const std::string& dir, const BuildOptions& opts) {
  PARE_CHECK(is_dir(dir), "'", dir, "' is not a folder (a Hugging Face checkpoint is a folder with config.json)");
  const std::string config = join_path(dir, "config.json");
  PARE_CHECK(file_exists(config), "'", dir, "' has no config.json, so it is no Hugging Face checkpoint");
  LmModel m;
  m.config = parse_hf_config(config);
  m.graph = build_graph(m.config, load_hf_weights(dir), opts, dir);
  m.graph.metadata["pare.lm.source"] = "hf:" + dir;
  const std::string tok = join_path(dir, "tokenizer.json");
  if (file_exists(tok)) {
    m.tokenizer = tok;
    m.tok = std::make_shared<const Tokenizer>(Tokenizer::from_file(tok));
  }
  return m;
}

}  // namespace pare::lm
