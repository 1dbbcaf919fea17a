// RunQuery: the search language of the runs browser, the Compare view's run filter and `routelab-cli runs --where`.
// A plain word must occur (case-insensitive) in the run's search text (id, name, architecture, seed, status, tags,
// notes; the browser adds its config columns). A comparison `key OP value`, OP one of < <= > >= = !=, compares one
// value of the run: a field (id, seed, steps, val = the last validation loss, best = the best one, train = the last
// training loss, name, arch, preset, status, device, tags) or a config key by its path ("train.lr") or its last part
// ("lr", "capacity": any path of the run's config ending in it); numbers by value, other values as text (= and !=
// only, case-insensitive). A run that has the key but not a value meeting it does not match (nor does a run without
// the key: dense runs have no capacity); a key that names nothing of the run's is matched as a plain word instead
// ("x=y" in its notes). Each tag is a value of `tags` (tags=best: the run has the tag best; tags!=best: it has not).
// Terms side by side must all hold; `or` (also OR, |) between them makes either do, binding looser than the
// side-by-side terms; `-term` or `not term` negates one; parentheses group ("arch=mod (lr<0.003 or capacity=0.5)
// -failed"). An operator with nothing to act on is left out, a missing ")" is taken at the end and a stray one ignored:
// a query being typed always filters.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace routelab {

struct RunRecord;
class RunStore;

class RunQuery {
 public:
  /// A word of the query: a comparison (key, op and value set) or a plain word (key empty).
  struct Term {
    std::string word;  ///< as typed
    std::string key, op, value;
  };
  /// A value a comparison reads: a number, or a text.
  using Value = std::variant<double, std::string>;

  explicit RunQuery(const std::string& text = {});
  bool empty() const { return root_ < 0; }
  /// The query as typed, spaces collapsed.
  const std::string& text() const { return text_; }

  /// Whether the query holds when `term_holds` says which of its terms do.
  bool holds(const std::function<bool(const Term&)>& term_holds) const;
  /// Whether `have` meets the comparison `term`: numbers by value (the term's value read as a number), text by
  /// = and != without case; a number against a value that is not one, or an order of text, meets nothing.
  static bool meets(const Value& have, const Term& term);
  /// Whether a run whose key has the values `have` (a key's last part can name several config keys; the tags are
  /// one value each) meets `term`: != where none of them equals the value, any other comparison where one meets it.
  static bool meets_any(const std::vector<Value>& have, const Term& term);
  /// The names of the run fields a comparison reads (id, seed, steps, val, best, train, name, arch, preset, status,
  /// device, tags).
  static const std::vector<std::string>& fields();

 private:
  struct Node {
    enum Kind { Word, All, Any, Not } kind = Word;
    Term term;
    std::vector<int> children;  ///< indices into nodes_
  };
  class Parser;
  bool holds(int node, const std::function<bool(const Term&)>& term_holds) const;
  std::string text_;
  std::vector<Node> nodes_;
  int root_ = -1;  ///< -1: no term, every run matches
};

/// Whether a stored run meets `query` (`routelab-cli runs --where`): its fields, its config (`config_json`; a
/// key of every section, a value list or object as its JSON text) and its search text (id, name, arch, seed,
/// status, tags, notes).
bool run_matches(const RunQuery& query, const RunRecord& run);

/// The runs of `store` (archived ones too with `include_archived`) that meet `where`, in the store's listing order.
std::vector<RunRecord> runs_where(const RunStore& store, const std::string& where, bool include_archived);
/// The ids of the runs of `store` that meet `where` (archived ones too with `include_archived`), in id order (the
/// order they were made: a sweep's points), for the commands' `--where`. A ConfigError naming the query and the
/// store where no run meets it.
std::vector<std::int64_t> run_ids_where(const RunStore& store, const std::string& where, bool include_archived);

}  // namespace routelab
