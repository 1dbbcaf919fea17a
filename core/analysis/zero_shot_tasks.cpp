// Task files for zero-shot evaluation: each published format's fields made into the lm-evaluation-harness's prompts
// and choices (its v0.4 task definitions: piqa, arc_easy/arc_challenge, hellaswag, winogrande, boolq, mmlu,
// lambada_openai, wikitext).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/analysis/zero_shot.h"
#include "core/util/errors.h"
#include "core/util/utf8.h"

namespace routelab {
namespace {

/// Where a line of a task file is, for errors: "piqa.jsonl:12".
struct Line {
  const std::string& path;
  std::int64_t number;
  std::string where(const std::string& key) const {
    return path + ":" + std::to_string(number) + (key.empty() ? "" : ": key '" + key + "'");
  }
};

const nlohmann::json& field(const nlohmann::json& doc, const std::string& key, const Line& line) {
  const auto it = doc.find(key);
  if (it == doc.end()) throw DataError(line.where(key) + " is missing");
  return *it;
}

std::string text(const nlohmann::json& doc, const std::string& key, const Line& line) {
  const auto& value = field(doc, key, line);
  if (!value.is_string()) throw DataError(line.where(key) + " is not a string");
  return value.get<std::string>();
}

std::vector<std::string> texts(const nlohmann::json& value, const std::string& key, const Line& line) {
  if (!value.is_array() || value.empty()) throw DataError(line.where(key) + " is not a non-empty list of strings");
  std::vector<std::string> out;
  for (const auto& v : value) {
    if (!v.is_string()) throw DataError(line.where(key) + " holds a value that is not a string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

/// An index given as an integer or as the text of one ("1", as Winogrande and some ARC rows write it).
std::int64_t index_value(const nlohmann::json& doc, const std::string& key, const Line& line) {
  const auto& value = field(doc, key, line);
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_string()) {
    const auto s = value.get<std::string>();
    if (!s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
      return std::stoll(s);
  }
  throw DataError(line.where(key) + " is not an integer");
}

/// Python's str.strip() (its whitespace: Unicode's, not ASCII's alone).
std::string trim(const std::string& s) { return std::string(python_strip(s)); }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

/// The harness's HellaSwag cleaning: WikiHow's " [title]" ends a sentence, other bracketed tags go, double spaces
/// become one.
std::string hellaswag_clean(const std::string& s) {
  const auto text = replace_all(trim(s), " [title]", ". ");
  std::string out;  // re.sub(r"\[.*?\]", "", text): from a '[' to the first ']' after it with no newline between
  std::size_t at = 0;
  for (auto from = text.find('['); from != std::string::npos; from = text.find('[', from + 1)) {
    const auto to = text.find_first_of("]\n", from + 1);
    if (to == std::string::npos) break;
    if (text[to] == '\n') continue;  // no tag from here; the next '[' may open one
    out.append(text, at, from - at);
    at = to + 1;
    from = to;
  }
  out.append(text, at);
  return replace_all(out, "  ", " ");
}

/// Python's str.capitalize() on ASCII: the first letter upper case, the rest lower.
std::string capitalize(std::string s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

/// A multiple-choice example: the prompt and each choice after `delimiter`.
TaskExample choices_after(const std::string& prompt, const std::vector<std::string>& choices, std::int64_t label,
                          const std::string& delimiter, const Line& line, const std::string& label_key) {
  if (label < 0 || label >= static_cast<std::int64_t>(choices.size()))
    throw DataError(line.where(label_key) + ": " + std::to_string(label) + " is not the index of one of its " +
                    std::to_string(choices.size()) + " choices");
  TaskExample example;
  example.label = label;
  for (const auto& c : choices) {
    example.requests.push_back({prompt, delimiter + c});
    example.lengths.push_back(static_cast<double>(utf8_code_points(c)));  // len() in Python
  }
  return example;
}

TaskExample read_generic(const nlohmann::json& doc, const Line& line) {
  const auto prompt = doc.contains("context") ? text(doc, "context", line) : text(doc, "query", line);
  const std::string label_key = doc.contains("label") ? "label" : doc.contains("gold") ? "gold" : "answer";
  return choices_after(prompt, texts(field(doc, "choices", line), "choices", line), index_value(doc, label_key, line),
                       "", line, label_key);
}

TaskExample read_piqa(const nlohmann::json& doc, const Line& line) {
  return choices_after(
      "Question: " + text(doc, "goal", line) + "\nAnswer:", {text(doc, "sol1", line), text(doc, "sol2", line)},
      index_value(doc, "label", line), " ", line, "label");
}

TaskExample read_arc(const nlohmann::json& doc, const Line& line) {
  const auto& choices = field(doc, "choices", line);
  if (!choices.is_object()) throw DataError(line.where("choices") + " is not an object of \"text\" and \"label\"");
  const auto options = texts(field(choices, "text", line), "choices.text", line);
  const auto labels = texts(field(choices, "label", line), "choices.label", line);
  const auto key = text(doc, "answerKey", line);
  const auto at = std::find(labels.begin(), labels.end(), key);
  if (at == labels.end()) throw DataError(line.where("answerKey") + ": '" + key + "' is not among choices.label");
  return choices_after("Question: " + text(doc, "question", line) + "\nAnswer:", options, at - labels.begin(), " ",
                       line, "answerKey");
}

TaskExample read_hellaswag(const nlohmann::json& doc, const Line& line) {
  const auto prompt = hellaswag_clean(text(doc, "activity_label", line) + ": " + text(doc, "ctx_a", line) + " " +
                                      capitalize(text(doc, "ctx_b", line)));
  auto endings = texts(field(doc, "endings", line), "endings", line);
  for (auto& e : endings) e = hellaswag_clean(e);
  return choices_after(prompt, endings, index_value(doc, "label", line), " ", line, "label");
}

TaskExample read_winogrande(const nlohmann::json& doc, const Line& line) {
  // Partial scoring: each option fills the blank of the sentence's first part, and the rest of the sentence is the
  // one continuation scored after each.
  const auto sentence = text(doc, "sentence", line);
  const auto blank = sentence.find('_');
  if (blank == std::string::npos) throw DataError(line.where("sentence") + " has no blank '_'");
  const auto label = index_value(doc, "answer", line) - 1;  // "1" or "2"
  if (label < 0 || label > 1) throw DataError(line.where("answer") + " is not 1 or 2");
  const auto rest = " " + trim(sentence.substr(blank + 1));
  TaskExample example;
  example.label = label;
  for (const auto* key : {"option1", "option2"}) {
    example.requests.push_back({sentence.substr(0, blank) + text(doc, key, line), rest});
    example.lengths.push_back(static_cast<double>(utf8_code_points(rest)));
  }
  return example;
}

TaskExample read_boolq(const nlohmann::json& doc, const Line& line) {
  std::int64_t label = 0;
  if (doc.contains("answer") && doc.at("answer").is_boolean())
    label = doc.at("answer").get<bool>() ? 1 : 0;
  else
    label = index_value(doc, "label", line);
  return choices_after(text(doc, "passage", line) + "\nQuestion: " + text(doc, "question", line) + "?\nAnswer:",
                       {"no", "yes"}, label, " ", line, doc.contains("answer") ? "answer" : "label");
}

TaskExample read_mmlu(const nlohmann::json& doc, const Line& line) {
  const auto choices = texts(field(doc, "choices", line), "choices", line);
  if (choices.size() > 26) throw DataError(line.where("choices") + " holds more than 26 choices");
  if (doc.contains("input_formatted")) {  // tinyMMLU: the prompt as the dataset formats it
    std::int64_t label = index_value(doc, "answer", line);
    std::vector<std::string> letters;
    for (std::size_t i = 0; i < choices.size(); ++i) letters.push_back(std::string(1, static_cast<char>('A' + i)));
    return choices_after(text(doc, "input_formatted", line), letters, label, " ", line, "answer");
  }
  std::string description;  // once before any few-shot examples
  if (doc.contains("subject") && doc.at("subject").is_string() && !doc.at("subject").get<std::string>().empty())
    description = "The following are multiple choice questions (with answers) about " +
                  replace_all(doc.at("subject").get<std::string>(), "_", " ") + ".\n\n";
  std::string prompt = description + trim(text(doc, "question", line));
  std::vector<std::string> letters;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    letters.push_back(std::string(1, static_cast<char>('A' + i)));
    prompt += "\n" + letters.back() + ". " + choices[i];
  }
  std::int64_t label = 0;
  const auto& answer = field(doc, "answer", line);
  if (answer.is_string() && answer.get<std::string>().size() == 1 &&
      std::isupper(static_cast<unsigned char>(answer.get<std::string>()[0])))
    label = answer.get<std::string>()[0] - 'A';
  else
    label = index_value(doc, "answer", line);
  auto example = choices_after(prompt + "\nAnswer:", letters, label, " ", line, "answer");
  example.description = description;
  return example;
}

TaskExample read_lambada(const nlohmann::json& doc, const Line& line) {
  const auto passage = text(doc, "text", line);
  const auto space = passage.rfind(' ');
  if (space == std::string::npos || space == 0 || space + 1 == passage.size())
    throw DataError(line.where("text") + " has no last word after a space");
  TaskExample example;
  example.requests.push_back({passage.substr(0, space), passage.substr(space)});
  return example;
}

/// Words as the harness counts them, len(re.split(r"\s+", doc)): one more than the runs of Python's whitespace. And
/// UTF-8 bytes.
void count_words_and_bytes(TaskExample& example, const std::string& doc) {
  double words = 1;
  for (std::size_t at = 0; at < doc.size();) {
    if (python_space_at(doc, at) == 0) {  // a byte of a character that is not whitespace (never a space's first)
      ++at;
      continue;
    }
    words += 1;
    while (const auto n = python_space_at(doc, at)) at += n;
  }
  example.words = words;
  example.bytes = static_cast<double>(doc.size());
}

/// Python's re.sub(OPEN \s*([^CLOSE]*?)\s* CLOSE, OPEN \1 CLOSE, s): from each OPEN to the first CLOSE after it, the
/// text between stripped of whitespace, the scan going on after that CLOSE. Written out: std::regex's recursive
/// matcher overflows the stack on a span of some 100,000 characters, which a long page can hold between two quotes.
std::string strip_between(const std::string& s, char open, char close) {
  std::string out;
  out.reserve(s.size());
  std::size_t at = 0;
  for (auto from = s.find(open); from != std::string::npos; from = s.find(open, at)) {
    const auto to = s.find(close, from + 1);
    if (to == std::string::npos) break;  // nor after any later OPEN
    out.append(s, at, from - at);
    out += open;
    out += python_strip(std::string_view(s).substr(from + 1, to - from - 1));
    out += close;
    at = to + 1;
  }
  out.append(s, at);
  return out;
}

/// The harness's WikiText detokenizer (wikitext_detokenizer): the corpus's spaced punctuation and @-@ separators
/// joined again, step by step as its str.replace and re.sub calls take them.
std::string wikitext_detokenize(std::string s) {
  s = replace_all(s, "s '", "s'");
  // re.sub(r"/' [0-9]/", r"/'[0-9]/", s): the replacement is that literal text.
  for (auto at = s.find("/' "); at != std::string::npos; at = s.find("/' ", at + 1))
    if (at + 4 < s.size() && s[at + 3] >= '0' && s[at + 3] <= '9' && s[at + 4] == '/') {
      s.replace(at, 5, "/'[0-9]/");
      at += 7;
    }
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {" @-@ ", "-"}, {" @,@ ", ","}, {" @.@ ", "."}, {" : ", ": "}, {" ; ", "; "},
           {" . ", ". "}, {" ! ", "! "}, {" ? ", "? "}, {" , ", ", "}})
    s = replace_all(s, from, to);
  for (const auto& [open, close] : {std::pair{'(', ')'}, {'[', ']'}, {'{', '}'}, {'"', '"'}, {'\'', '\''}})
    s = strip_between(s, open, close);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"= = = =", "===="}, {"= = =", "==="}, {"= =", "=="}, {" \xc2\xb0 ", "\xc2\xb0"}, {" \n", "\n"},
           {"\n ", "\n"}, {" N ", " 1 "}, {" 's", "'s"}})
    s = replace_all(s, from, to);
  return s;
}

TaskExample read_document(const nlohmann::json& doc, const Line& line) {
  TaskExample example;
  if (doc.contains("page")) {  // WikiText (wikitext_document_level): words and bytes of the page as published
    const auto page = text(doc, "page", line);
    count_words_and_bytes(example, page);
    example.requests.push_back({"", wikitext_detokenize(page)});
  } else {
    const auto body = text(doc, "text", line);
    count_words_and_bytes(example, body);
    example.requests.push_back({"", body});
  }
  return example;
}

using Reader = TaskExample (*)(const nlohmann::json&, const Line&);

struct Format {
  const char* name;
  TaskKind kind;
  Reader read;
  std::vector<const char*> keys;  ///< a first line with all of these is this format
};

const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      {"generic", TaskKind::MultipleChoice, read_generic, {"choices", "label"}},
      {"piqa", TaskKind::MultipleChoice, read_piqa, {"goal", "sol1", "sol2"}},
      {"arc", TaskKind::MultipleChoice, read_arc, {"question", "choices", "answerKey"}},
      {"hellaswag", TaskKind::MultipleChoice, read_hellaswag, {"ctx_a", "ctx_b", "endings"}},
      {"winogrande", TaskKind::MultipleChoice, read_winogrande, {"sentence", "option1", "option2"}},
      {"boolq", TaskKind::MultipleChoice, read_boolq, {"passage", "question"}},
      {"mmlu", TaskKind::MultipleChoice, read_mmlu, {"question", "choices", "answer"}},
      {"lambada", TaskKind::Cloze, read_lambada, {"text"}},
      {"text", TaskKind::Perplexity, read_document, {"page"}},
  };
  return all;
}

const Format& format_named(const std::string& name, const std::string& where) {
  for (const auto& f : formats())
    if (name == f.name) return f;
  std::string known;
  for (const auto& f : task_formats()) known += (known.empty() ? "" : ", ") + f;
  throw ConfigError(where + ": unknown task format '" + name + "' (known: " + known + ")");
}

/// The format whose keys the first line has, most specific first (ARC's keys before MMLU's, both before generic's).
const Format& detect(const nlohmann::json& doc, const Line& line) {
  for (const auto* name : {"piqa", "arc", "hellaswag", "winogrande", "boolq", "mmlu", "text", "generic"}) {
    const auto& f = format_named(name, line.path);
    if (std::all_of(f.keys.begin(), f.keys.end(), [&](const char* k) { return doc.contains(k); })) return f;
  }
  if (doc.size() == 1 && doc.contains("text")) return format_named("lambada", line.path);
  if ((doc.contains("context") || doc.contains("query")) && doc.contains("choices"))
    return format_named("generic", line.path);
  throw DataError(line.where("") + ": its keys match no task format; name one as FILE:FORMAT (" +
                  std::to_string(task_formats().size()) + " formats: see --help)");
}

bool json_lines(const std::string& path) {
  const auto ext = std::filesystem::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json" || ext == ".ndjson";
}

}  // namespace

const std::vector<std::string>& task_formats() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& f : formats()) out.push_back(f.name);
    return out;
  }();
  return names;
}

std::string to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::MultipleChoice:
      return "multiple choice";
    case TaskKind::Cloze:
      return "cloze";
    case TaskKind::Perplexity:
      return "perplexity";
  }
  return "?";
}

TaskSpec parse_task_spec(const std::string& spec) {
  TaskSpec out;
  auto rest = spec;
  const auto eq = rest.find('=');
  if (eq != std::string::npos) {
    out.name = rest.substr(0, eq);
    rest = rest.substr(eq + 1);
  }
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos) {
    const auto format = rest.substr(colon + 1);
    if (std::find(task_formats().begin(), task_formats().end(), format) != task_formats().end()) {
      out.format = format;
      rest = rest.substr(0, colon);
    } else if (!format.empty() && std::all_of(format.begin(), format.end(), [](unsigned char c) {
                 return std::islower(c) || c == '_';
               }) && !std::filesystem::exists(rest)) {  // a word after the colon, not part of a path that exists
      format_named(format, "--task " + spec);        // names the format and the known ones
    }
  }
  out.path = rest;
  if (out.path.empty()) throw ConfigError("--task " + spec + ": no file (NAME=FILE:FORMAT)");
  if (eq != std::string::npos && out.name.empty()) throw ConfigError("--task " + spec + ": an empty name before '='");
  if (out.name.empty()) out.name = std::filesystem::path(out.path).stem().string();
  return out;
}

ZeroShotTask read_task(const TaskSpec& spec, std::int64_t limit) {
  std::ifstream file(spec.path, std::ios::binary);
  if (!file) throw DataError(spec.path + ": cannot read the task file");
  ZeroShotTask task;
  task.name = spec.name;
  task.path = spec.path;
  // JSON Lines by the file's name, or by a format named other than text (a text file is text whatever it holds).
  const bool lines = json_lines(spec.path) || (!spec.format.empty() && spec.format != "text");
  if (!lines) {  // a plain text file: one document
    std::ostringstream all;
    all << file.rdbuf();
    const auto& f = format_named(spec.format.empty() ? "text" : spec.format, spec.path);
    if (f.kind != TaskKind::Perplexity) throw DataError(spec.path + ": not JSON Lines (.jsonl), so format text only");
    task.format = f.name;
    task.kind = f.kind;
    if (trim(all.str()).empty()) throw DataError(spec.path + ": the document is empty");
    TaskExample example;
    count_words_and_bytes(example, all.str());
    example.requests.push_back({"", all.str()});
    task.examples.push_back(std::move(example));
    return task;
  }
  const Format* format = spec.format.empty() ? nullptr : &format_named(spec.format, spec.path);
  std::string text_line;
  for (std::int64_t number = 1; std::getline(file, text_line); ++number) {
    if (trim(text_line).empty()) continue;
    const Line line{spec.path, number};
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text_line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(line.where("") + ": not JSON (" + e.what() + ")");
    }
    if (!doc.is_object()) throw DataError(line.where("") + ": not a JSON object");
    if (!format) format = &detect(doc, line);
    try {
      task.examples.push_back(format->read(doc, line));
    } catch (const nlohmann::json::exception& e) {
      throw DataError(line.where("") + ": " + e.what());
    }
    if (limit > 0 && static_cast<std::int64_t>(task.examples.size()) >= limit) break;
  }
  if (task.examples.empty()) throw DataError(spec.path + ": no examples");
  task.format = format->name;
  task.kind = format->kind;
  return task;
}

}  // namespace routelab
