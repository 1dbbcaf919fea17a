// RunSearch: the runs browser's search box and the Compare view's run filter, in the language of RunQuery
// (core/store/run_query.h: words, comparisons of fields and config keys, or, negation, parentheses), over the
// RunSummary values the views hold.
#pragma once
#include <QString>
#include <QVariant>
#include <QVector>

#include "core/store/run_query.h"
#include "ui/run_progress.h"

namespace routelab {

class RunSearch {
 public:
  explicit RunSearch(const QString& text = {}) : query_(text.toStdString()) {}

  bool empty() const { return query_.empty(); }
  /// Whether `run` meets the query; `searchText` is the text its plain words are looked for in.
  bool matches(const RunSummary& run, const QString& searchText) const;
  /// The words as typed, spaces collapsed.
  QString text() const { return QString::fromStdString(query_.text()); }

  /// The run's value of `key` (a field of RunQuery::fields(), each of its tags, or every config value whose path is or
  /// ends in it; empty: none).
  static QVector<QVariant> values(const RunSummary& run, const QString& key);

 private:
  RunQuery query_;
};

}  // namespace routelab
