// RunQuery: the runs browser's search text. A plain word must occur (case-insensitive) in the run's search text (id,
// name, architecture, seed, status, tags, notes, config columns). A comparison `key OP value`, OP one of < <= > >= =
// !=, compares one value of the run: a field (id, seed, steps, val = the last validation loss, best = the best one,
// train = the last training loss, name, arch, preset, status, device, tags) or a config key by its path ("train.lr")
// or its last part ("lr", "capacity": any path of the run's config ending in it); numbers by value, other values as
// text (= and != only, case-insensitive). A run that has the key but not a value meeting it does not match (nor does
// a run without the key: dense runs have no capacity); a key that names nothing of the run's is matched as a plain
// word instead ("x=y" in its notes). Terms side by side must all hold; `or` (also OR, |) between them makes either
// do, binding looser than the side-by-side terms; `-term` or `not term` negates one; parentheses group
// ("arch=mod (lr<0.003 or capacity=0.5) -failed"). An operator with nothing to act on is left out, a missing ")" is
// taken at the end and a stray one ignored: a query being typed always filters.
#pragma once
#include <QString>
#include <QStringList>
#include <QVariant>
#include <QVector>

#include "ui/run_progress.h"

namespace routelab {

class RunQuery {
 public:
  explicit RunQuery(const QString& text = {});

  bool empty() const { return root_ < 0; }
  /// Whether `run` meets the query; `searchText` is the text its plain words are looked for in.
  bool matches(const RunSummary& run, const QString& searchText) const;
  /// The words as typed, space-separated.
  QString text() const;

  /// The run's value of `key` (a field, or every config value whose path is or ends in it; empty: none).
  static QVector<QVariant> values(const RunSummary& run, const QString& key);

 private:
  struct Term {
    QString word;            ///< as typed
    QString key, op, value;  ///< a comparison; key empty for a plain word
  };
  /// A node of the parsed query: a term, or the conjunction, disjunction or negation of other nodes.
  struct Node {
    enum Kind { Word, All, Any, Not } kind = Word;
    Term term;
    QVector<int> children;  ///< indices into nodes_
  };
  class Parser;
  static bool meets(const QVariant& have, const Term& term);
  static bool termHolds(const Term& term, const RunSummary& run, const QString& searchText);
  bool holds(int node, const RunSummary& run, const QString& searchText) const;
  QString text_;
  QVector<Node> nodes_;
  int root_ = -1;  ///< -1: no term, every run matches
};

}  // namespace routelab
