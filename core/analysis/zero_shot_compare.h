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
/// A task of the same name with another number of examples is a ConfigError naming it (not the same examples).
std::vector<PairedComparison> compare_reports(const ZeroShotReport& a, const ZeroShotReport& b);

/// A Markdown table of comparisons: task, measure, the two accuracies, the difference with its interval, the
/// discordant examples and the p-value.
std::string comparisons_table(const std::vector<PairedComparison>& comparisons);

}  // namespace routelab
