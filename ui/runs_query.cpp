// RunQuery: plain words and comparisons of the runs browser's search box.
#include "ui/runs_query.h"

#include <QHash>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>

namespace routelab {

RunQuery::RunQuery(const QString& text) {
  static const QRegularExpression comparison(QStringLiteral("^([A-Za-z_][A-Za-z0-9_.]*)(<=|>=|!=|<|>|=)(.+)$"));
  for (const QString& word : text.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    Term term{word, {}, {}, {}};
    if (const auto m = comparison.match(word); m.hasMatch()) {
      term.key = m.captured(1);
      term.op = m.captured(2);
      term.value = m.captured(3);
    }
    terms_.push_back(term);
  }
}

QString RunQuery::text() const {
  QStringList words;
  for (const Term& t : terms_) words << t.word;
  return words.join(QLatin1Char(' '));
}

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

bool RunQuery::matches(const RunSummary& run, const QString& searchText) const {
  for (const Term& term : terms_) {
    const auto have = term.key.isEmpty() ? QVector<QVariant>{} : values(run, term.key);
    if (have.isEmpty()) {  // a plain word, or a key naming nothing of this run's
      if (!searchText.contains(term.word, Qt::CaseInsensitive)) return false;
      continue;
    }
    if (std::none_of(have.cbegin(), have.cend(), [&](const QVariant& v) { return meets(v, term); })) return false;
  }
  return true;
}

}  // namespace routelab
