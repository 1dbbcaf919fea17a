#include "core/analysis/zero_shot_compare.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "core/util/errors.h"

namespace routelab {
namespace {

/// P(X <= k) + P(X >= n - k) for X ~ binomial(n, 1/2), k <= n / 2: the exact two-sided test of McNemar, summed in
/// logarithms (n reaches the tens of thousands).
double two_sided_binomial(std::int64_t k, std::int64_t n) {
  if (n == 0) return 1.0;
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1);
  double tail = 0;
  for (std::int64_t i = 0; i <= k; ++i)
    tail += std::exp(log_n_fact - std::lgamma(static_cast<double>(i) + 1) -
                     std::lgamma(static_cast<double>(n - i) + 1) + log_half_n);
  return std::min(1.0, 2 * tail);
}

/// Whether `sample` of `result` is right for `measure` ("acc" or "acc_norm") and the choice behind it (-1 for cloze);
/// nullopt where the result has no such measure.
std::optional<std::pair<bool, std::int64_t>> answer(const TaskResult& result, const ExampleScore& sample,
                                                   const std::string& measure) {
  if (result.kind == TaskKind::MultipleChoice) {
    const auto pred = measure == "acc" ? sample.pred : sample.pred_norm;
    if (pred < 0) return std::nullopt;
    return std::pair{pred == sample.label, pred};
  }
  if (result.kind == TaskKind::Cloze && measure == "acc") {
    const bool greedy =
        std::all_of(sample.requests.begin(), sample.requests.end(), [](const auto& r) { return r.greedy; });
    return std::pair{greedy, std::int64_t{-1}};
  }
  return std::nullopt;
}

/// 1 where example i of `result` is right for `measure`; empty where the result has no such measure.
std::vector<int> right_answers(const TaskResult& result, const std::string& measure) {
  std::vector<int> out;
  for (const auto& s : result.samples) {
    const auto a = answer(result, s, measure);
    if (!a) return {};
    out.push_back(a->first ? 1 : 0);
  }
  return out;
}

void require_same_examples(const TaskResult& a, std::int64_t run_a, const TaskResult& b, std::int64_t run_b) {
  if (a.samples.size() != b.samples.size())
    throw ConfigError(fmt::format("task {}: run {} scored {} examples, run {} {}: not the same examples", a.name, run_a,
                                  a.samples.size(), run_b, b.samples.size()));
}

}  // namespace

PairedComparison compare_paired(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size())
    throw ConfigError(fmt::format("a paired comparison needs the same examples: {} against {}", a.size(), b.size()));
  PairedComparison c;
  c.examples = static_cast<std::int64_t>(a.size());
  if (a.empty()) return c;
  double right_a = 0, right_b = 0, squares = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    right_a += a[i];
    right_b += b[i];
    const int d = b[i] - a[i];
    squares += d * d;
    c.only_a += a[i] && !b[i];
    c.only_b += b[i] && !a[i];
  }
  const auto n = static_cast<double>(a.size());
  c.a = right_a / n;
  c.b = right_b / n;
  c.difference = c.b - c.a;
  if (a.size() > 1) {
    const double variance = std::max(0.0, (squares - n * c.difference * c.difference) / (n - 1));
    const double half = 1.96 * std::sqrt(variance / n);
    c.ci_low = c.difference - half;
    c.ci_high = c.difference + half;
  }
  c.p_value = two_sided_binomial(std::min(c.only_a, c.only_b), c.only_a + c.only_b);
  return c;
}

std::vector<PairedComparison> compare_reports(const ZeroShotReport& a, const ZeroShotReport& b) {
  std::vector<PairedComparison> out;
  for (const auto& ta : a.tasks) {
    const auto tb = std::find_if(b.tasks.begin(), b.tasks.end(), [&](const auto& t) { return t.name == ta.name; });
    if (tb == b.tasks.end() || ta.samples.empty() || tb->samples.empty()) continue;  // none: stored without answers
    require_same_examples(ta, a.run_id, *tb, b.run_id);
    for (const std::string measure : {"acc", "acc_norm"}) {
      const auto right_a = right_answers(ta, measure), right_b = right_answers(*tb, measure);
      if (right_a.empty() || right_b.empty()) continue;
      auto c = compare_paired(right_a, right_b);
      c.task = ta.name;
      c.measure = measure;
      c.run_a = a.run_id;
      c.run_b = b.run_id;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<PairedComparison> compare_runs(const std::vector<ZeroShotReport>& reports, bool every_pair) {
  std::vector<PairedComparison> out;
  for (std::size_t a = 0; a < reports.size(); ++a) {
    if (a > 0 && !every_pair) break;
    for (std::size_t b = a + 1; b < reports.size(); ++b)
      for (auto& c : compare_reports(reports[a], reports[b])) out.push_back(std::move(c));
  }
  return out;
}

std::vector<Disagreement> disagreements(const ZeroShotReport& report_a, const ZeroShotReport& report_b,
                                        const std::string& task, const std::string& measure) {
  const auto named = [&](const ZeroShotReport& r) -> const TaskResult* {
    const auto t = std::find_if(r.tasks.begin(), r.tasks.end(), [&](const TaskResult& x) { return x.name == task; });
    return t == r.tasks.end() ? nullptr : &*t;
  };
  const TaskResult* pa = named(report_a);
  const TaskResult* pb = named(report_b);
  if (!pa || !pb || pa->samples.empty() || pb->samples.empty()) return {};
  const TaskResult& a = *pa;
  const TaskResult& b = *pb;
  require_same_examples(a, report_a.run_id, b, report_b.run_id);
  std::vector<Disagreement> out;
  for (std::size_t i = 0; i < a.samples.size(); ++i) {
    const auto x = answer(a, a.samples[i], measure), y = answer(b, b.samples[i], measure);
    if (!x || !y) return {};
    if (x->first == y->first) continue;
    out.push_back({static_cast<std::int64_t>(i), a.samples[i].label, x->second, y->second, x->first});
  }
  return out;
}

ExampleText example_text(const TaskExample& example) {
  ExampleText text;
  const auto& r = example.requests;
  if (r.empty()) return text;
  const bool shared_context =
      std::all_of(r.begin(), r.end(), [&](const TaskRequest& q) { return q.context == r.front().context; });
  if (shared_context || r.size() == 1) {
    text.prompt = r.front().context;
    for (const auto& q : r) text.choices.push_back(q.continuation);
  } else {  // Winogrande: the choices are contexts ending where the shared continuation begins
    for (const auto& q : r) text.choices.push_back(q.context + q.continuation);
  }
  return text;
}

nlohmann::json PairedComparison::to_json() const {
  const auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"task", task},         {"measure", measure},   {"run_a", run_a},           {"run_b", run_b},
          {"examples", examples}, {"a", number(a)},       {"b", number(b)},           {"difference", number(difference)},
          {"ci_low", number(ci_low)}, {"ci_high", number(ci_high)}, {"only_a", only_a}, {"only_b", only_b},
          {"p_value", number(p_value)}};
}

std::string comparisons_table(const std::vector<PairedComparison>& comparisons) {
  std::ostringstream out;
  out << "| task | measure | run a | run b | b - a (95% interval) | right for a only | for b only | p (McNemar) |\n"
      << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : comparisons)
    out << fmt::format("| {} | {} | {} {:.4f} | {} {:.4f} | {:+.4f} ({:+.4f}, {:+.4f}) | {} | {} | {:.3g} |\n", c.task,
                       c.measure, c.run_a, c.a, c.run_b, c.b, c.difference, c.ci_low, c.ci_high, c.only_a, c.only_b,
                       c.p_value);
  return out.str();
}

}  // namespace routelab
