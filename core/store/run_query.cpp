// RunQuery: the parser, the comparisons and a stored run's values.
#include "core/store/run_query.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/config/options.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool is_or(const std::string& t) { return t == "or" || t == "OR" || t == "|"; }

}  // namespace

/// A recursive-descent parser of the words into RunQuery's nodes: or-terms of side-by-side terms of unary terms.
class RunQuery::Parser {
 public:
  Parser(const std::string& text, std::vector<Node>& nodes) : nodes_(nodes) {
    std::istringstream words(text);
    for (std::string word; words >> word;) {
      int closing = 0;
      while (!word.empty() && word.front() == '(') tokens_.emplace_back("("), word.erase(0, 1);
      while (!word.empty() && word.back() == ')') ++closing, word.pop_back();
      if (!word.empty()) tokens_.push_back(word);
      for (int i = 0; i < closing; ++i) tokens_.emplace_back(")");
    }
  }

  /// The whole query; a stray ")" ends an or-term and the rest joins it as another side-by-side term.
  int parse() {
    int root = either();
    while (!at_end()) {
      ++pos_;  // the stray ")"
      root = join(Node::All, root, either());
    }
    return root;
  }

 private:
  bool at_end() const { return pos_ >= tokens_.size(); }
  const std::string& peek() const { return tokens_[pos_]; }
  bool operand_next() const { return !at_end() && peek() != ")" && !is_or(peek()); }

  int add(Node node) {
    nodes_.push_back(std::move(node));
    return static_cast<int>(nodes_.size()) - 1;
  }
  /// `a` and `b` under one All or Any node; either alone where the other is absent (-1).
  int join(Node::Kind kind, int a, int b) {
    if (a < 0 || b < 0) return a < 0 ? b : a;
    return add({kind, {}, {a, b}});
  }
  int negate(int node) { return node < 0 ? node : add({Node::Not, {}, {node}}); }

  int either() {
    int left = all();
    while (!at_end() && is_or(peek())) {
      ++pos_;
      left = join(Node::Any, left, all());
    }
    return left;
  }

  int all() {
    int out = -1;
    while (operand_next()) out = join(Node::All, out, unary());
    return out;
  }

  int unary() {
    const std::string token = tokens_[pos_++];
    if (token == "(") {
      const int inner = either();
      if (!at_end()) ++pos_;  // its ")"; a missing one is taken at the end
      return inner;
    }
    if ((token == "not" || token == "NOT") && operand_next()) return negate(unary());
    if (token.size() > 1 && token.front() == '-') return negate(word(token.substr(1)));
    return word(token);
  }

  int word(const std::string& text) {
    static const std::regex comparison("^([A-Za-z_][A-Za-z0-9_.]*)(<=|>=|!=|<|>|=)(.+)$");
    Node node;
    node.term.word = text;
    if (std::smatch m; std::regex_match(text, m, comparison)) {
      node.term.key = m[1];
      node.term.op = m[2];
      node.term.value = m[3];
    }
    return add(std::move(node));
  }

  std::vector<Node>& nodes_;
  std::vector<std::string> tokens_;
  std::size_t pos_ = 0;
};

RunQuery::RunQuery(const std::string& text) {
  std::istringstream words(text);
  for (std::string word; words >> word;) text_ += (text_.empty() ? "" : " ") + word;
  root_ = Parser(text_, nodes_).parse();
}

bool RunQuery::holds(const std::function<bool(const Term&)>& term_holds) const {
  return root_ < 0 || holds(root_, term_holds);
}

bool RunQuery::holds(int node, const std::function<bool(const Term&)>& term_holds) const {
  const Node& n = nodes_[static_cast<std::size_t>(node)];
  const auto child = [&](int c) { return holds(c, term_holds); };
  switch (n.kind) {
    case Node::Word:
      return term_holds(n.term);
    case Node::All:
      return std::all_of(n.children.begin(), n.children.end(), child);
    case Node::Any:
      return std::any_of(n.children.begin(), n.children.end(), child);
    case Node::Not:
      return !child(n.children.front());
  }
  return false;
}

bool RunQuery::meets(const Value& have, const Term& term) {
  if (const double* v = std::get_if<double>(&have)) {
    if (!std::isfinite(*v)) return false;  // a field without a value (no validation yet) meets nothing
    char* end = nullptr;
    const double wanted = std::strtod(term.value.c_str(), &end);
    if (end == term.value.c_str() || *end != '\0') return false;
    if (term.op == "<") return *v < wanted;
    if (term.op == "<=") return *v <= wanted;
    if (term.op == ">") return *v > wanted;
    if (term.op == ">=") return *v >= wanted;
    if (term.op == "=") return *v == wanted;
    return *v != wanted;
  }
  const bool same = lower(std::get<std::string>(have)) == lower(term.value);
  if (term.op == "=") return same;
  if (term.op == "!=") return !same;
  return false;  // an order of text: nothing
}

bool RunQuery::meets_any(const std::vector<Value>& have, const Term& term) {
  const auto one = [&](const Value& v) { return meets(v, term); };
  return term.op == "!=" ? std::all_of(have.begin(), have.end(), one) : std::any_of(have.begin(), have.end(), one);
}

const std::vector<std::string>& RunQuery::fields() {
  static const std::vector<std::string> names = {"id",   "seed", "steps",  "val",    "best",   "train",
                                                 "name", "arch", "preset", "status", "device", "tags"};
  return names;
}

bool run_matches(const RunQuery& query, const RunRecord& run) {
  if (query.empty()) return true;
  std::vector<std::pair<std::string, RunQuery::Value>> config;  // "section.key" -> value
  const auto doc = nlohmann::json::parse(run.config_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object())
    for (const auto& [section, values] : doc.items())
      if (values.is_object())
        for (const auto& [key, value] : values.items())
          config.emplace_back(section + "." + key, value.is_number() ? RunQuery::Value(value.get<double>())
                                                                     : RunQuery::Value(option_value_text(value)));
  const auto number = [](const std::optional<double>& v) { return RunQuery::Value(v.value_or(NAN)); };
  std::vector<RunQuery::Value> tags;  // each tag a value ("" for none: tags!=x holds, tags=x does not)
  std::istringstream list(run.tags);
  for (std::string tag; std::getline(list, tag, ',');)
    if (!tag.empty()) tags.emplace_back(tag);
  if (tags.empty()) tags.emplace_back(std::string());
  const auto field = [&](const std::string& name) -> std::optional<RunQuery::Value> {
    if (name == "id") return static_cast<double>(run.id);
    if (name == "seed") return static_cast<double>(run.seed);
    if (name == "steps") return static_cast<double>(run.last_step);
    if (name == "val") return number(run.last_val_loss);
    if (name == "best") return number(run.best_val_loss);
    if (name == "train") return number(run.last_train_loss);
    if (name == "name") return run.name;
    if (name == "arch") return run.arch;
    if (name == "preset") return run.preset;
    if (name == "status") return to_string(run.status);
    if (name == "device") return run.device;
    return std::nullopt;
  };
  const std::string search = lower(std::to_string(run.id) + " " + run.name + " " + run.arch + " seed " +
                                   std::to_string(run.seed) + " " + to_string(run.status) + " " + run.tags + " " +
                                   run.notes);
  return query.holds([&](const RunQuery::Term& term) {
    std::vector<RunQuery::Value> have;
    if (lower(term.key) == "tags") {
      have = tags;
    } else if (!term.key.empty()) {
      if (auto f = field(lower(term.key))) {
        have.push_back(std::move(*f));
      } else {
        for (const auto& [path, value] : config)
          if (path == term.key || (path.size() > term.key.size() && path.ends_with("." + term.key)))
            have.push_back(value);
      }
    }
    if (have.empty()) return search.find(lower(term.word)) != std::string::npos;  // a word, or a key naming nothing
    return RunQuery::meets_any(have, term);
  });
}

std::vector<RunRecord> runs_where(const RunStore& store, const std::string& where, bool include_archived) {
  const RunQuery query(where);
  std::vector<RunRecord> runs;
  for (auto& run : store.list_runs(include_archived))
    if (run_matches(query, run)) runs.push_back(std::move(run));
  return runs;
}

std::vector<std::int64_t> run_ids_where(const RunStore& store, const std::string& where, bool include_archived) {
  std::vector<std::int64_t> ids;
  for (const auto& run : runs_where(store, where, include_archived)) ids.push_back(run.id);
  if (ids.empty()) {
    const auto archived = include_archived ? 0 : runs_where(store, where, true).size();
    throw ConfigError("--where '" + where + "': no run of " + store.path() + " meets it" +
                      (archived > 0 ? " (" + std::to_string(archived) + " archived: add --all)" : ""));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace routelab
