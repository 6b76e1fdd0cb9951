// libFuzzer target for pipeline recipes (pipeline::load_recipe, pipeline/recipe.cpp): YAML through yaml-cpp,
// then every check of the recipe checker, each stage's keys parsed by its command's real command
// line (so this target links every command). An input is written as recipe.yaml into a scratch
// folder that also holds the files a recipe may name (teacher.onnx, model.pt, x.npy, y.npy), so
// that references resolve and the checks behind them run. load_recipe must return a recipe or
// throw pare::InputError naming the recipe; anything else (another exception, a crash, a leak) is a
// bug. The checker reads no file but the recipe: the named files may be empty.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/schema.h"
#include "core/error.h"

namespace {

const std::string& scratch() {
  static const std::string dir = [] {
    const std::string d = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/pare-fuzz-" +
                          std::to_string(getpid()) + ".recipe";
    if (mkdir(d.c_str(), 0755) != 0) std::abort();
    for (const char* f : {"teacher.onnx", "model.pt", "x.npy", "y.npy"}) {
      FILE* out = std::fopen((d + "/" + f).c_str(), "wb");
      if (!out || std::fclose(out) != 0) std::abort();
    }
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch() + "/recipe.yaml";
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  }
  try {
    static const auto commands = pare::cli::command_schema();
    const pare::pipeline::Recipe r = pare::pipeline::load_recipe(path, *commands);
    if (r.stages.empty()) {
      std::fprintf(stderr, "recipe_fuzz: a recipe without stages was accepted\n");
      std::abort();
    }
  } catch (const pare::InputError& e) {
    if (std::strncmp(e.what(), path.c_str(), path.size()) != 0) {
      std::fprintf(stderr, "recipe_fuzz: a refusal that does not name the recipe: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recipe_fuzz: the checker threw something other than InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
