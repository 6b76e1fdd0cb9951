// pare inspect MODEL [--json]
#include <iostream>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/summary.h"
#include "core/tensor_io.h"
#include "lm/model.h"

namespace pare::cli {

namespace {

// A safetensors checkpoint (or sharded index): its tensors, dtypes, shapes and total size.
void inspect_safetensors(const std::string& path, bool json) {
  std::map<std::string, std::string> meta;
  auto tensors = core::load_safetensors(path, &meta);
  int64_t params = 0, bytes = 0;
  nlohmann::json j = {{"tensors", nlohmann::json::array()}, {"metadata", meta}};
  for (auto& [name, t] : tensors) {
    params += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    j["tensors"].push_back({{"name", name}, {"dtype", core::dtype_name(t.scalar_type())},
                            {"shape", t.sizes().vec()}});
    if (!json)
      std::cout << name << " " << core::dtype_name(t.scalar_type()) << " " << t.sizes() << "\n";
  }
  j["parameters"] = params;
  j["bytes"] = bytes;
  if (json) std::cout << j.dump(2) << "\n";
  else std::cout << tensors.size() << " tensors, " << params << " elements, " << bytes << " bytes\n";
}
}  // namespace

void add_inspect(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's inputs, outputs, size, FLOPs, ops and layers");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("model", *model, "ONNX file, zoo spec (mlp:784-300-100-10, cnn, ...), .safetensors checkpoint, or language model (hf:DIR)")->required();
  cmd->add_flag("--json", *json, "Print the summary as JSON");
  cmd->callback([&action, model, json] {
    action = [model, json] {
      if (ends_with(*model, ".safetensors") || ends_with(*model, ".safetensors.index.json"))
        return inspect_safetensors(*model, *json);
      if (lm::is_lm_spec(*model)) {
        const nlohmann::json s = lm::summarize(lm::load_lm(*model));
        std::cout << (*json ? s.dump(2) + "\n" : lm::summary_text(s));
        return;
      }
      auto s = core::summarize_model(*model);
      if (*json) std::cout << core::to_json(s).dump(2) << "\n";
      else std::cout << core::to_text(s);
    };
  });
}

}  // namespace pare::cli
