// RunSearch: RunQuery over a RunSummary's fields, config values and search text.
#include "ui/runs_query.h"

#include <QHash>
#include <algorithm>
#include <cmath>

namespace routelab {
namespace {

QVariant finite(double v) { return std::isfinite(v) ? QVariant(v) : QVariant(NAN); }

using Field = QVariant (*)(const RunSummary&);

/// The run's fields a comparison names (RunQuery::fields()), by their lower-case names; numbers as double.
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
  };
  return fields;
}

RunQuery::Value queryValue(const QVariant& v) {
  if (v.typeId() == QMetaType::Double || v.typeId() == QMetaType::LongLong) return v.toDouble();
  return v.toString().toStdString();
}

}  // namespace

QVector<QVariant> RunSearch::values(const RunSummary& run, const QString& key) {
  if (key.compare(QLatin1String("tags"), Qt::CaseInsensitive) == 0) {  // each tag a value; "" for none
    QVector<QVariant> tags;
    for (const QString& tag : run.tags.split(QLatin1Char(','), Qt::SkipEmptyParts)) tags.push_back(tag);
    if (tags.isEmpty()) tags.push_back(QString());
    return tags;
  }
  // A field without a value (no validation yet) is there, and meets nothing.
  if (const auto field = run_fields().find(key.toLower()); field != run_fields().end()) return {(*field)(run)};
  QVector<QVariant> out;
  const QString suffix = QLatin1Char('.') + key;
  for (auto it = run.config.cbegin(); it != run.config.cend(); ++it)
    if (it.key() == key || it.key().endsWith(suffix)) out.push_back(it.value());
  return out;
}

bool RunSearch::matches(const RunSummary& run, const QString& searchText) const {
  return query_.holds([&](const RunQuery::Term& term) {
    const auto have = term.key.empty() ? QVector<QVariant>{} : values(run, QString::fromStdString(term.key));
    if (have.isEmpty())  // a plain word, or a key naming nothing of this run's
      return searchText.contains(QString::fromStdString(term.word), Qt::CaseInsensitive);
    std::vector<RunQuery::Value> values;
    for (const QVariant& v : have) values.push_back(queryValue(v));
    return RunQuery::meets_any(values, term);
  });
}

}  // namespace routelab
