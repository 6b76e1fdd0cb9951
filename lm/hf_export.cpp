// Writes a language model as a Hugging Face checkpoint: reads the checkpoint tensors back off the
// graph by name (undoing the builder's transposed views), checks them by building the graph they
// describe, and stages config.json, the safetensors and the tokenizer files in a folder that then
// takes the place of the destination.
#include "lm/hf_export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/tensor_io.h"
#include "lm/builder.h"

namespace pare::lm {

namespace {

// The graph holds nn.Linear weights [out, in] as their transpose; GPT-2's Conv1D weights are
// [in, out] in the checkpoint and in the graph alike, but its (untied) head is an nn.Linear.
bool held_transposed(const Family& f, Role role, const std::string& name) {
  const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  return weight && is_linear_role(role) && (!f.linear_in_out || role == &TensorNames::lm_head);
}

// The tied head's view "<embed>.weight.T" still reads the embedding (the same memory, or a copy a
// pass made and left equal).
bool head_is_embedding(const at::Tensor& head_t, const at::Tensor& embed) {
  const at::Tensor back = head_t.t();
  if (back.data_ptr() == embed.data_ptr() && back.sizes() == embed.sizes() && back.strides() == embed.strides())
    return true;
  return back.sizes() == embed.sizes() && back.scalar_type() == embed.scalar_type() && at::equal(back, embed);
}

// Dimensions a pass may have changed, read off the weights: the vocabulary and the MLP width.
void refresh_dims(LmConfig& c, const std::map<std::string, at::Tensor>& w) {
  const Family& f = *c.family;
  auto embed = w.find(std::string(f.names.embed) + ".weight");
  if (embed != w.end() && embed->second.dim() == 2) c.vocab = embed->second.size(0);
  for (const auto& [name, t] : w)  // the first layer's; the builder checks that the others agree
    if (role_of(f, name) == &TensorNames::up && t.dim() == 2) {
      c.intermediate = t.size(f.linear_in_out ? 1 : 0);
      return;
    }
}

std::string source_of(const LmModel& m) {
  auto it = m.graph.metadata.find("pare.lm.source");
  return it != m.graph.metadata.end() ? it->second : std::string("the model");
}

}  // namespace

int64_t parse_byte_size(const std::string& s, const std::string& option) {
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}, {"TiB", int64_t{1} << 40},
      {"KB", 1'000}, {"MB", 1'000'000}, {"GB", 1'000'000'000}, {"TB", 1'000'000'000'000}, {"B", 1}, {"", 1}};
  const size_t digits = s.find_first_not_of("0123456789");
  const std::string number = s.substr(0, digits), unit = digits == std::string::npos ? "" : s.substr(digits);
  for (const auto& [name, scale] : kUnits) {
    if (unit != name || number.empty() || number.size() > 15) continue;
    const int64_t n = std::stoll(number);
    PARE_CHECK(n <= INT64_MAX / scale, option, " '", s, "' is too large");
    return n * scale;
  }
  throw InputError(option + " must be a number of bytes with an optional unit B, KB, MB, GB, TB (powers of 1000) "
                   "or KiB, MiB, GiB, TiB (powers of 1024), such as 2GB or 500MiB; got '" + s + "'")
      .about(option);
}

std::map<std::string, at::Tensor> hf_tensors(const LmModel& m, LmConfig& c) {
  PARE_ASSERT(c.family != nullptr);
  const Family& f = *c.family;
  const std::string what = source_of(m);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : m.graph.initializers) {
    const Role role = role_of(f, name);
    if (!role) continue;  // rotary tables, shape constants, the tied head's view
    PARE_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16,
               what, ": tensor '", name, "' is ", core::dtype_name(t.scalar_type()), "; a Hugging Face checkpoint "
               "holds float32, float16 or bfloat16 weights (export the model before quantizing it)");
    w[name] = held_transposed(f, role, name) ? t.t() : t;
  }
  const std::string embed = std::string(f.names.embed) + ".weight";
  auto head = m.graph.initializers.find(embed + ".T");
  if (c.tie_embeddings && head != m.graph.initializers.end() && w.count(embed) &&
      !head_is_embedding(head->second, w[embed])) {
    c.tie_embeddings = false;  // trained or pruned apart: the checkpoint keeps both
    w[std::string(f.names.lm_head) + ".weight"] = head->second.t();
  }
  if (w.count(embed)) {
    const at::ScalarType type = w[embed].scalar_type();
    c.dtype = core::dtype_name(type);
    for (auto& [name, t] : w)
      if (t.scalar_type() != type) t = t.to(type);
  }
  refresh_dims(c, w);
  // The builder's checks are the checkpoint's: every tensor of the row present, of the shape the
  // config says, none left over. What passes them loads back in pare and in transformers.
  try {
    c.validate(what);
    BuildOptions opts;
    opts.dtype = dtype_of(c.dtype);
    build_graph(c, w, opts, what);
  } catch (const InputError& e) {
    throw InputError(std::string("cannot write a ") + f.architecture + " checkpoint: " + e.what());
  }
  return w;
}

namespace {

// `dir`.partial, where the checkpoint is written whole before it takes the place of `dir`; removed
// when the write fails (and first, when a dead run left one).
class StagedCheckpoint {
 public:
  explicit StagedCheckpoint(const std::string& dir) : dir_(dir), path_(dir + ".partial") {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      PARE_CHECK(S_ISDIR(st.st_mode), "'", dir, "' exists and is not a folder");
      PARE_CHECK(file_exists(join_path(dir, "config.json")) || std::filesystem::is_empty(dir), "'", dir,
                 "' is a folder that holds no Hugging Face checkpoint (no config.json): the export replaces its folder "
                 "whole, so give a new or empty one");
    }
    remove_dir(path_);
    if (::mkdir(path_.c_str(), 0755) != 0) {
      const std::string why = "cannot create the folder '" + path_ + "': " + std::strerror(errno);
      if (errno == ENOENT || errno == ENOTDIR) throw InputError(why);  // the destination's parent is not there
      throw Error(why);
    }
  }
  ~StagedCheckpoint() {
    std::error_code ec;
    if (!committed_) std::filesystem::remove_all(path_, ec);
  }
  StagedCheckpoint(const StagedCheckpoint&) = delete;
  StagedCheckpoint& operator=(const StagedCheckpoint&) = delete;

  std::string file(const std::string& name) const { return join_path(path_, name); }
  // Every file with its size, by name.
  std::vector<std::pair<std::string, int64_t>> files() const {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.emplace_back(e.path().filename().string(), static_cast<int64_t>(e.file_size()));
    std::sort(out.begin(), out.end());
    return out;
  }
  void commit() {
    replace_dir(path_, dir_);
    committed_ = true;
  }

 private:
  std::string dir_, path_;
  bool committed_ = false;
};

// The tokenizer files transformers' AutoTokenizer reads, beside the model's tokenizer.json; a
// tokenizer that has no file (a GGUF's, from its metadata) is written from memory.
void copy_tokenizer_files(const LmModel& m, const StagedCheckpoint& out) {
  const std::string& tokenizer_json = m.tokenizer;
  if (tokenizer_json.empty() && m.tok) {
    write_file_atomic(out.file("tokenizer.json"), lm::tokenizer_json(m.tok->model()));
    write_file_atomic(out.file("tokenizer_config.json"), tokenizer_config_json(m.tok->model()));
    return;
  }
  if (tokenizer_json.empty()) return;
  write_file_atomic(out.file("tokenizer.json"), read_file(tokenizer_json));
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
    const std::string src = join_path(dir_name(tokenizer_json), name);
    if (file_exists(src)) write_file_atomic(out.file(name), read_file(src));
  }
}

}  // namespace

HfExportResult save_hf(const LmModel& m, const std::string& dir, const HfExportOptions& opts) {
  PARE_CHECK_OPTION(opts.max_shard_bytes_ >= 0, "max_shard_bytes", "must be 0 (no sharding) or positive, got ",
                    opts.max_shard_bytes_);
  HfExportResult r;
  r.dir = dir;
  r.config = m.config;
  const std::map<std::string, at::Tensor> tensors = hf_tensors(m, r.config);
  for (const auto& [name, t] : tensors) r.weight_bytes += static_cast<int64_t>(t.nbytes());
  r.tensors = static_cast<int64_t>(tensors.size());

  StagedCheckpoint staged(dir);
  std::map<std::string, std::string> metadata = opts.metadata_;
  metadata["format"] = "pt";  // what transformers writes, and what its older releases check
  const bool sharded = opts.max_shard_bytes_ > 0 && r.weight_bytes > opts.max_shard_bytes_;
  core::save_safetensors(tensors, staged.file(sharded ? "model.safetensors.index.json" : "model.safetensors"),
                         metadata, sharded ? opts.max_shard_bytes_ : 0);
  copy_tokenizer_files(m, staged);
  write_file_atomic(staged.file("config.json"), hf_config_json(r.config));
  r.files = staged.files();
  for (const auto& [name, bytes] : r.files)
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) ++r.shards;
  staged.commit();
  return r;
}

nlohmann::json to_json(const HfExportResult& r) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, bytes] : r.files) files[name] = bytes;
  return {{"dir", r.dir}, {"architecture", r.config.family->architecture}, {"dtype", r.config.dtype},
          {"tie_word_embeddings", r.config.tie_embeddings}, {"tensors", r.tensors}, {"weight_bytes", r.weight_bytes},
          {"shards", r.shards}, {"files", files}};
}

std::string to_text(const HfExportResult& r) {
  std::string out = "wrote " + r.dir + ": " + r.config.family->architecture + ", " + r.config.dtype + ", " +
                    std::to_string(r.tensors) + " tensors, " + std::to_string(r.weight_bytes) + " bytes of weights in " +
                    std::to_string(r.shards) + (r.shards == 1 ? " safetensors file" : " safetensors shards") +
                    (r.config.tie_embeddings ? ", tied head" : "") + "\n";
  for (const auto& [name, bytes] : r.files) out += "  " + name + "  " + std::to_string(bytes) + "\n";
  return out;
}

}  // namespace pare::lm
