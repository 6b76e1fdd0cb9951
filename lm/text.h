// Text data for language models: the documents of a spec, and a held-out split of them.
//
//   text:FILE[,FILE...]       paragraphs: documents separated by blank lines or by a line holding
//                             only "%" (the fortune format of /usr/share/games/fortunes)
//   jsonl:FILE[:FIELD]        one JSON object per line, its string FIELD (default "text")
//
//   std::vector<std::string> docs = lm::load_text("text:/usr/share/games/fortunes/computers", "test");
#pragma once

#include <string>
#include <vector>

namespace pare::lm {

/// The documents of `spec` in file order. `split` is "all", "train" (9 documents in 10) or "test"
/// (every 10th: documents 9, 19, 29, ...), so the two never share a document. Throws InputError
/// naming the file (and line) for a missing file, a line of jsonl that is not a JSON object with a
/// string FIELD, or a split with no document.
std::vector<std::string> load_text(const std::string& spec, const std::string& split = "all");

/// The documents of a jsonl text (one JSON object per line, its string `field`); `what` names it in
/// errors.
std::vector<std::string> parse_jsonl(const std::string& text, const std::string& field, const std::string& what);

/// True when `spec` is text data (text:... or jsonl:...).
bool is_text_spec(const std::string& spec);

/// The files `spec` reads (text: each file; jsonl: the one file). Throws InputError for a spec of
/// another kind.
std::vector<std::string> text_files(const std::string& spec);

/// `spec` for messages: a text: spec of more than two files as its first file and the count of the
/// others ("text:/usr/share/games/fortunes/art and 42 more files"), any other spec as it is.
std::string short_text_spec(const std::string& spec);

/// The documents of one text file's contents (paragraphs; see above). Empty documents are dropped.
std::vector<std::string> split_paragraphs(const std::string& text);

}  // namespace pare::lm
