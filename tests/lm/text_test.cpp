#include <gtest/gtest.h>

#include "core/error.h"
#include "lm/text.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

std::string write(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + name;
  testing::write_bytes(path, body);
  return path;
}

TEST(Text, ParagraphsSplitAtBlankLinesAndPercentLines) {
  const auto docs = split_paragraphs("a b\nc\n\n\nd\n%\ne f\n  %  \n\ng\n");
  ASSERT_EQ(docs.size(), 4u);
  EXPECT_EQ(docs[0], "a b\nc");
  EXPECT_EQ(docs[1], "d");
  EXPECT_EQ(docs[2], "e f");
  EXPECT_EQ(docs[3], "g");
}

TEST(Text, TrainAndTestSplitsPartitionTheDocuments) {
  std::string body;
  for (int i = 0; i < 25; ++i) body += "doc " + std::to_string(i) + "\n\n";
  const std::string spec = "text:" + write("docs.txt", body);
  const auto all = load_text(spec), train = load_text(spec, "train"), test = load_text(spec, "test");
  EXPECT_EQ(all.size(), 25u);
  EXPECT_EQ(train.size() + test.size(), 25u);
  ASSERT_EQ(test.size(), 2u);
  EXPECT_EQ(test[0], "doc 9");
  EXPECT_EQ(test[1], "doc 19");
}

TEST(Text, MessagesShortenALongListOfFiles) {
  EXPECT_EQ(lm::short_text_spec("text:/a/b,/a/c,/a/d"), "text:/a/b and 2 more files");
  EXPECT_EQ(lm::short_text_spec("text:/a/b,/a/c"), "text:/a/b,/a/c");
  EXPECT_EQ(lm::short_text_spec("jsonl:/a/b.jsonl:text"), "jsonl:/a/b.jsonl:text");
}

TEST(Text, JsonlReadsTheNamedField) {
  const std::string path = write("d.jsonl", "{\"text\": \"one\", \"body\": \"x\"}\n\n{\"text\": \"caf\\u00e9\", \"body\": \"\"}\n");
  const auto docs = load_text("jsonl:" + path);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[1], "caf\xc3\xa9");
  EXPECT_EQ(load_text("jsonl:" + path + ":body").size(), 1u);
}

TEST(Text, BadInputNamesFileAndLine) {
  const std::string path = write("bad.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
  testing::expect_input_error([&] { load_text("jsonl:" + path); }, {"bad.jsonl:2: not a JSON object"});
  const std::string nofield = write("nofield.jsonl", "{\"body\": 3}\n");
  testing::expect_input_error([&] { load_text("jsonl:" + nofield); }, {"nofield.jsonl:1: no string field 'text'"});
  testing::expect_input_error([&] { load_text("text:/nonexistent/x.txt"); }, {"/nonexistent/x.txt"});
  testing::expect_input_error([&] { load_text("csv:x"); }, {"text:FILE"});
  const std::string one = write("one.txt", "only\n");
  testing::expect_input_error([&] { load_text("text:" + one, "test"); }, {"no document in the test split"});
}

}  // namespace
}  // namespace pare::lm
