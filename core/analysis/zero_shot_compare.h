// Paired comparison of two runs on the same zero-shot task. Both runs answer the same examples, so whether their
// accuracies differ is read from the examples where they disagree (McNemar's exact test) and the spread of the
// difference from the per-example differences: two independent standard errors, as a table of accuracies shows them,
// overstate it (the examples hard for one model are mostly hard for the other). The DTRNet paper's downstream columns
// differ by a point or two between models; this says which of such differences the examples support.
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/analysis/zero_shot_run.h"

namespace routelab {

struct PairedComparison {
  std::string task, measure;               ///< measure: "acc" or "acc_norm"
  std::int64_t run_a = 0, run_b = 0;
  std::int64_t examples = 0;
  double a = NAN, b = NAN;                 ///< the two accuracies
  double difference = NAN;                 ///< b - a
  double ci_low = NAN, ci_high = NAN;      ///< 95% interval of the difference: mean ± 1.96 sd(d) / sqrt(n) of the
                                           ///< per-example differences d = b - a (NaN below two examples)
  std::int64_t only_a = 0, only_b = 0;     ///< examples right for one run only
  double p_value = NAN;                    ///< McNemar's exact two-sided test: binomial(only_a + only_b, 1/2)
  nlohmann::json to_json() const;
};

/// `a`, `b`: 1 where an example is right, 0 where not, the same examples in the same order (ConfigError when their
/// counts differ).
PairedComparison compare_paired(const std::vector<int>& a, const std::vector<int>& b);

/// Run b against run a on every task of a that b also scored (by name), for acc and, where both have it, acc_norm.
/// A task of the same name with another number of examples is a ConfigError naming it (not the same examples); a
/// result read back without its examples' answers (stored before they were kept) is left out.
std::vector<PairedComparison> compare_reports(const ZeroShotReport& a, const ZeroShotReport& b);

/// Each later report against the first, or with `every_pair` each report against every later one (in the order
/// given): compare_reports of each pair, in that order. p-values are per comparison (no correction for their number).
std::vector<PairedComparison> compare_runs(const std::vector<ZeroShotReport>& reports, bool every_pair = false);

/// An example the two runs of a comparison answer differently for a measure: right for one, wrong for the other (the
/// discordant examples McNemar's test counts). `pred_a`, `pred_b`: each run's choice (multiple choice: the choice
/// scored highest, per character for acc_norm; -1 for cloze, where right means every answer token was the greedy one).
struct Disagreement {
  std::int64_t example = 0;  ///< its index in the task file's examples
  std::int64_t label = 0, pred_a = -1, pred_b = -1;
  bool right_a = false;      ///< right for run a (and wrong for run b), else the reverse
};

/// The examples of task `task` where runs a and b disagree on `measure`, in the file's order: as many as the
/// comparison's only_a + only_b. Empty where either run lacks the task or the measure; ConfigError (as
/// compare_reports) where they scored different numbers of examples.
std::vector<Disagreement> disagreements(const ZeroShotReport& a, const ZeroShotReport& b, const std::string& task,
                                        const std::string& measure);

/// An example's text, for reading a disagreement: the prompt its choices follow and each choice. Winogrande's choices
/// are contexts sharing one continuation: each is then the whole sentence and the prompt empty. A cloze example is
/// its context and its one answer.
struct ExampleText {
  std::string prompt;
  std::vector<std::string> choices;
};
ExampleText example_text(const TaskExample& example);

/// A Markdown table of comparisons: task, measure, the two accuracies, the difference with its interval, the
/// discordant examples and the p-value.
std::string comparisons_table(const std::vector<PairedComparison>& comparisons);

}  // namespace routelab
