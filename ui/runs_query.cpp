// RunQuery: plain words and comparisons of the runs browser's search box.
#include "ui/runs_query.h"

#include <QHash>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>

namespace routelab {

/// A recursive-descent parser of the search words into RunQuery's nodes: or-terms of and-terms of unary terms.
class RunQuery::Parser {
 public:
  Parser(const QString& text, QVector<Node>& nodes) : nodes_(nodes) {
    for (QString word : text.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
      int closing = 0;
      while (word.startsWith(QLatin1Char('('))) tokens_ << QStringLiteral("("), word.remove(0, 1);
      while (word.endsWith(QLatin1Char(')'))) ++closing, word.chop(1);
      if (!word.isEmpty()) tokens_ << word;
      for (int i = 0; i < closing; ++i) tokens_ << QStringLiteral(")");
    }
  }

  /// The whole query; a stray ")" ends an or-term and the rest joins it as another side-by-side term.
  int parse() {
    int root = either();
    while (pos_ < tokens_.size()) {
      ++pos_;  // the stray ")"
      root = join(Node::All, root, either());
    }
    return root;
  }

 private:
  static bool isOr(const QString& t) {
    return t == QLatin1String("or") || t == QLatin1String("OR") || t == QLatin1String("|");
  }
  bool atEnd() const { return pos_ >= tokens_.size(); }
  const QString& peek() const { return tokens_[pos_]; }

  int add(Node node) {
    nodes_.push_back(std::move(node));
    return static_cast<int>(nodes_.size()) - 1;
  }
  /// `a` and `b` under one All or Any node; either alone where the other is absent (-1).
  int join(Node::Kind kind, int a, int b) {
    if (a < 0 || b < 0) return a < 0 ? b : a;
    return add({kind, {}, {a, b}});
  }

  int either() {
    int left = all();
    while (!atEnd() && isOr(peek())) {
      ++pos_;
      left = join(Node::Any, left, all());
    }
    return left;
  }

  int all() {
    int out = -1;
    while (!atEnd() && peek() != QLatin1String(")") && !isOr(peek())) out = join(Node::All, out, unary());
    return out;
  }

  int unary() {
    const QString token = tokens_[pos_++];
    if (token == QLatin1String("(")) {
      const int inner = either();
      if (!atEnd()) ++pos_;  // its ")"; a missing one is taken at the end
      return inner;
    }
    const bool operand = !atEnd() && peek() != QLatin1String(")") && !isOr(peek());
    if ((token == QLatin1String("not") || token == QLatin1String("NOT")) && operand) return negate(unary());
    if (token.size() > 1 && token.startsWith(QLatin1Char('-'))) return negate(word(token.mid(1)));
    return word(token);
  }

  int negate(int node) { return node < 0 ? node : add({Node::Not, {}, {node}}); }

  int word(const QString& text) {
    static const QRegularExpression comparison(QStringLiteral("^([A-Za-z_][A-Za-z0-9_.]*)(<=|>=|!=|<|>|=)(.+)$"));
    Node node;
    node.term.word = text;
    if (const auto m = comparison.match(text); m.hasMatch()) {
      node.term.key = m.captured(1);
      node.term.op = m.captured(2);
      node.term.value = m.captured(3);
    }
    return add(std::move(node));
  }

  QVector<Node>& nodes_;
  QStringList tokens_;
  qsizetype pos_ = 0;
};

RunQuery::RunQuery(const QString& text) : text_(text.simplified()) { root_ = Parser(text_, nodes_).parse(); }

QString RunQuery::text() const { return text_; }

namespace {

QVariant finite(double v) { return std::isfinite(v) ? QVariant(v) : QVariant(); }

using Field = QVariant (*)(const RunSummary&);

/// The run's fields a comparison names, by their lower-case names; numbers as double.
const QHash<QString, Field>& run_fields() {
  static const QHash<QString, Field> fields = {
      {QStringLiteral("id"), [](const RunSummary& r) { return QVariant(static_cast<double>(r.id)); }},
      {QStringLiteral("seed"), [](const RunSummary& r) { return QVariant(static_cast<double>(r.seed)); }},
      {QStringLiteral("steps"), [](const RunSummary& r) { return QVariant(static_cast<double>(r.lastStep)); }},
      {QStringLiteral("val"), [](const RunSummary& r) { return finite(r.lastValLoss); }},
      {QStringLiteral("best"), [](const RunSummary& r) { return finite(r.bestValLoss); }},
      {QStringLiteral("train"), [](const RunSummary& r) { return finite(r.lastTrainLoss); }},
      {QStringLiteral("name"), [](const RunSummary& r) { return QVariant(r.name); }},
      {QStringLiteral("arch"), [](const RunSummary& r) { return QVariant(r.arch); }},
      {QStringLiteral("preset"), [](const RunSummary& r) { return QVariant(r.preset); }},
      {QStringLiteral("status"), [](const RunSummary& r) { return QVariant(r.status); }},
      {QStringLiteral("device"), [](const RunSummary& r) { return QVariant(r.device); }},
      {QStringLiteral("tags"), [](const RunSummary& r) { return QVariant(r.tags); }},
  };
  return fields;
}

}  // namespace

QVector<QVariant> RunQuery::values(const RunSummary& run, const QString& key) {
  // A field without a value (no validation yet) is there, and meets nothing.
  if (const auto field = run_fields().find(key.toLower()); field != run_fields().end()) return {(*field)(run)};
  QVector<QVariant> out;
  const QString suffix = QLatin1Char('.') + key;
  for (auto it = run.config.cbegin(); it != run.config.cend(); ++it)
    if (it.key() == key || it.key().endsWith(suffix)) out.push_back(it.value());
  return out;
}

bool RunQuery::meets(const QVariant& have, const Term& term) {
  if (!have.isValid()) return false;
  bool number = false;
  const double wanted = term.value.toDouble(&number);
  if (number && (have.typeId() == QMetaType::Double || have.typeId() == QMetaType::LongLong)) {
    const double v = have.toDouble();
    if (term.op == QLatin1String("<")) return v < wanted;
    if (term.op == QLatin1String("<=")) return v <= wanted;
    if (term.op == QLatin1String(">")) return v > wanted;
    if (term.op == QLatin1String(">=")) return v >= wanted;
    if (term.op == QLatin1String("=")) return v == wanted;
    return v != wanted;
  }
  const bool same = have.toString().compare(term.value, Qt::CaseInsensitive) == 0;
  if (term.op == QLatin1String("=")) return same;
  if (term.op == QLatin1String("!=")) return !same;
  return false;  // an order of text: nothing
}

bool RunQuery::termHolds(const Term& term, const RunSummary& run, const QString& searchText) {
  const auto have = term.key.isEmpty() ? QVector<QVariant>{} : values(run, term.key);
  if (have.isEmpty()) return searchText.contains(term.word, Qt::CaseInsensitive);  // a word, or a key naming nothing
  return std::any_of(have.cbegin(), have.cend(), [&](const QVariant& v) { return meets(v, term); });
}

bool RunQuery::holds(int node, const RunSummary& run, const QString& searchText) const {
  const Node& n = nodes_[node];
  const auto child = [&](int c) { return holds(c, run, searchText); };
  switch (n.kind) {
    case Node::Word:
      return termHolds(n.term, run, searchText);
    case Node::All:
      return std::all_of(n.children.cbegin(), n.children.cend(), child);
    case Node::Any:
      return std::any_of(n.children.cbegin(), n.children.cend(), child);
    case Node::Not:
      return !child(n.children.front());
  }
  return false;
}

bool RunQuery::matches(const RunSummary& run, const QString& searchText) const {
  return root_ < 0 || holds(root_, run, searchText);
}

}  // namespace routelab
