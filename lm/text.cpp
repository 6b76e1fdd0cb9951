#include "lm/text.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::lm {

namespace {

// A blank line, or a line holding only "%" (spaces around it allowed).
bool is_separator(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string::npos) return true;
  return line.substr(first, line.find_last_not_of(" \t\r") + 1 - first) == "%";
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t comma; (comma = s.find(',', at)) != std::string::npos; at = comma + 1) out.push_back(s.substr(at, comma - at));
  out.push_back(s.substr(at));
  return out;
}

}  // namespace

std::vector<std::string> parse_jsonl(const std::string& text, const std::string& field, const std::string& path) {
  std::vector<std::string> docs;
  size_t at = 0;
  for (int64_t lineno = 1; at < text.size(); ++lineno) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    PARE_CHECK(j.is_object(), path, ":", lineno, ": not a JSON object (jsonl holds one object per line)");
    auto it = j.find(field);
    PARE_CHECK(it != j.end() && it->is_string(), path, ":", lineno, ": no string field '", field, "'",
               it == j.end() ? "" : " (it is " + std::string(it->type_name()) + ")");
    if (!it->get_ref<const std::string&>().empty()) docs.push_back(*it);
  }
  return docs;
}

std::vector<std::string> split_paragraphs(const std::string& text) {
  std::vector<std::string> docs;
  std::string doc;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (is_separator(line)) {
      if (!doc.empty()) docs.push_back(std::move(doc));
      doc.clear();
      continue;
    }
    if (!doc.empty()) doc += '\n';
    doc += line;
  }
  if (!doc.empty()) docs.push_back(std::move(doc));
  return docs;
}

bool is_text_spec(const std::string& spec) { return spec.rfind("text:", 0) == 0 || spec.rfind("jsonl:", 0) == 0; }

std::string short_text_spec(const std::string& spec) {
  if (spec.rfind("text:", 0) != 0) return spec;
  const size_t n = static_cast<size_t>(std::count(spec.begin(), spec.end(), ',')) + 1;
  if (n <= 2) return spec;
  return spec.substr(0, spec.find(',')) + " and " + std::to_string(n - 1) + " more files";
}

std::vector<std::string> text_files(const std::string& spec) {
  if (spec.rfind("text:", 0) == 0) return split_commas(spec.substr(5));
  if (spec.rfind("jsonl:", 0) == 0) {
    const std::string rest = spec.substr(6);
    const size_t colon = rest.rfind(':');
    return {colon == std::string::npos ? rest : rest.substr(0, colon)};
  }
  throw InputError("text data spec must be 'text:FILE[,FILE...]' or 'jsonl:FILE[:FIELD]', got '" + spec + "'");
}

std::vector<std::string> load_text(const std::string& spec, const std::string& split) {
  PARE_CHECK(split == "all" || split == "train" || split == "test", "text split must be all, train or test, got '",
             split, "'");
  std::vector<std::string> docs;
  if (spec.rfind("text:", 0) == 0) {
    for (const std::string& path : split_commas(spec.substr(5))) {
      PARE_CHECK(!path.empty(), "text data spec '", spec, "' names an empty file");
      for (std::string& d : split_paragraphs(read_file(path))) docs.push_back(std::move(d));
    }
  } else if (spec.rfind("jsonl:", 0) == 0) {
    std::string path = spec.substr(6), field = "text";
    const size_t colon = path.rfind(':');
    if (colon != std::string::npos) field = path.substr(colon + 1), path = path.substr(0, colon);
    PARE_CHECK(!path.empty() && !field.empty(), "jsonl data spec must be 'jsonl:FILE[:FIELD]', got '", spec, "'");
    docs = parse_jsonl(read_file(path), field, path);
  } else {
    throw InputError("text data spec must be 'text:FILE[,FILE...]' or 'jsonl:FILE[:FIELD]', got '" + spec + "'");
  }
  if (split != "all") {
    std::vector<std::string> kept;
    for (size_t i = 0; i < docs.size(); ++i)
      if ((i % 10 == 9) == (split == "test")) kept.push_back(std::move(docs[i]));
    docs = std::move(kept);
  }
  PARE_CHECK(!docs.empty(), spec, ": no document", split == "all" ? "" : " in the " + split + " split",
             " (documents are paragraphs of text, or lines of jsonl)");
  return docs;
}

}  // namespace pare::lm
