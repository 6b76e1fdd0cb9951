// pipeline::load_recipe against a CommandSchema of the test's own: the recipe checker needs no
// pare executable and no CLI11, only what the schema says of each command.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "pipeline/pipeline.h"
#include "tests/test_util.h"

namespace {

using namespace pare;

// pare train knows --epochs (a value) and --fast (a flag); every other command knows nothing.
class TinySchema : public pipeline::CommandSchema {
 public:
  std::vector<std::string> options(const std::string& command) const override {
    if (command == "train") return {"epochs", "fast", "seed", "data", "out", "metrics", "checkpoint", "model"};
    return {};
  }
  bool is_flag(const std::string&, const std::string& name) const override { return name == "fast"; }
  std::string refusal(const std::vector<std::string>& args) const override {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--epochs" && args[i + 1] == "0") return "--epochs: must be at least 1";
    return "";
  }
};

std::string write_recipe(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/r.yaml";
  write_file_atomic(path, text);
  return path;
}

TEST(Recipe, StagesBecomeCommandLinesThroughTheSchema) {
  pare::testing::TempDir d;
  const auto r = pipeline::load_recipe(
      write_recipe(d.path(), "data: fashion-mnist\nseed: 3\nstages:\n  - stage: teacher\n    model: mlp:784-10\n"
                             "    epochs: 2\n    fast: true\n"),
      TinySchema());
  ASSERT_EQ(r.stages.size(), 1u);
  const auto& c = r.stages[0].command;
  auto has = [&](const std::vector<std::string>& seq) { return std::search(c.begin(), c.end(), seq.begin(), seq.end()) != c.end(); };
  EXPECT_EQ(c.front(), "train");
  EXPECT_TRUE(has({"--epochs", "2"}));
  EXPECT_TRUE(has({"--fast"}));
  EXPECT_TRUE(has({"--seed", "3"}));  // the recipe's seed, since train has --seed
  EXPECT_TRUE(r.stages[0].checkpoint);
}

TEST(Recipe, AnUnknownKeyNamesTheLineAndTheKnownKeys) {
  pare::testing::TempDir d;
  const std::string path =
      write_recipe(d.path(), "data: fashion-mnist\nstages:\n  - stage: teacher\n    model: mlp:784-10\n    lr: 1\n");
  try {
    pipeline::load_recipe(path, TinySchema());
    FAIL() << "an unknown key was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path + ":5: key 'lr': unknown key"), std::string::npos) << what;
    EXPECT_NE(what.find("epochs"), std::string::npos) << what;
  }
}

TEST(Recipe, AValueTheCommandRefusesIsAnErrorAtItsLine) {
  pare::testing::TempDir d;
  const std::string path =
      write_recipe(d.path(), "data: fashion-mnist\nstages:\n  - stage: teacher\n    model: mlp:784-10\n    epochs: 0\n");
  try {
    pipeline::load_recipe(path, TinySchema());
    FAIL() << "a refused value was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":5: key 'epochs': --epochs: must be at least 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
