// A stored probe as typed values: the per-token routing of the run's fixed probe text (or example) at one
// evaluation, as the trainer's probe and the token inspector write it (core/train/token_probe.h), parsed and
// validated once (Torch-free). The reader of every probe the dashboard and the figures show.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/evaluation_record.h"
#include "core/util/thread_flag.h"

namespace routelab {

struct ProbeRow;
class RunStore;

/// One layer of the probe: its per-token gate and hard decision where it reports them.
struct ProbeLayer {
  int layer = 0;
  std::string kind = "dense";
  bool routed = false;
  std::vector<double> gate;      ///< per token; empty when the layer reports none
  std::vector<double> decision;  ///< per token, 0/1; empty when none
  std::map<std::string, double> stats;
};

/// One per-token quantity of the model (its token_data), for the probed sequence: (T), (T, K), (T, L, N), ...
struct TokenSeries {
  std::string name;
  std::vector<int> shape;                   ///< per-token dimensions: {} for (T), {L, N} for (T, L, N)
  std::vector<std::vector<double>> values;  ///< [token][per-token values, row-major over shape]
  bool integral = false;                    ///< every value stored as an integer or a flag (ids, layers)

  std::size_t tokens() const { return values.size(); }
  /// The value of `token` at per-token `index` (row-major); NaN outside the stored values.
  double at(std::size_t token, std::size_t index = 0) const;
};

struct ProbePrediction {
  std::int64_t id = 0;
  std::string text;
  double prob = 0;
};

struct ProbeRecord {
  std::int64_t step = 0;
  Task task = Task::LanguageModel;
  std::vector<std::string> tokens;       ///< what the model read, as token text
  std::vector<double> next_logprob;      ///< language models: log p(actual next token); NaN where unknown
  std::vector<ProbeLayer> layers;
  std::vector<TokenSeries> token_data;
  std::vector<std::vector<ProbePrediction>> top_k;  ///< per position, most likely first (traces with k > 0)
  std::int64_t dropped_tokens = 0;                  ///< cut from the front of a text longer than the context
  // Classification.
  std::vector<std::string> labels;
  std::vector<double> class_probs;
  int predicted = -1;
  int label = -1;          ///< the probe example's gold label (-1: a typed text)
  std::string label_name;  ///< its name

  /// The token series called `name`, or null.
  const TokenSeries* series(const std::string& name) const;
};

/// Parses a probe document; `where` starts the DataError of a malformed one ("probe at step 200") naming the key
/// path ("layers[1].gate[3]: expected a number").
ProbeRecord read_probe(const nlohmann::json& doc, std::int64_t step, const std::string& where);
/// A stored probe row; its errors name the step.
ProbeRecord read_probe(const ProbeRow& row);
/// Every probe of a stored run, in step order; an unreadable one is a DataError naming the store and run, or,
/// where `unreadable` is given, skipped with that message appended. Through the ProbeRecordCache of a
/// CachedProbeReads alive on this thread, where there is one.
std::vector<ProbeRecord> read_probes(const RunStore& store, std::int64_t run_id,
                                     std::vector<std::string>* unreadable = nullptr);

/// Parsed probe documents of the runs a reader reads again and again (a live run's dashboard: a document of 100 KB an
/// evaluation at the 360M shape): read_probes through it parses only the documents it has not parsed at their run
/// and step before (told apart by their text's hash and length), so a truncated run trained again is parsed anew.
/// It holds the documents of each run's last read, of at most `max_runs` runs (8 by default; reading one more forgets
/// the least recently read run's).
class ProbeRecordCache {
 public:
  ProbeRecordCache() = default;
  explicit ProbeRecordCache(std::size_t max_runs) : max_runs_(max_runs) {}
  /// read_probes' records of `run_id`, parsing only the documents this cache has not parsed.
  std::vector<ProbeRecord> read(const RunStore& store, std::int64_t run_id, std::vector<std::string>* unreadable);
  /// The documents parsed so far (for tests: a read again parses only new or changed documents).
  std::int64_t parsed() const { return parsed_; }

 private:
  struct Entry {
    std::size_t hash = 0, length = 0;
    ProbeRecord record;
  };
  std::size_t max_runs_ = 8;
  std::map<std::int64_t, std::map<std::int64_t, Entry>> runs_;  ///< run -> step -> its document's record
  std::map<std::int64_t, std::uint64_t> last_read_;             ///< run -> when it was last read (a count of reads)
  std::uint64_t reads_ = 0;
  std::int64_t parsed_ = 0;
};
/// While alive, read_probes on this thread reads through `cache` (the store reader around a dashboard's read).
using CachedProbeReads = ScopedThreadObject<ProbeRecordCache>;

}  // namespace routelab
