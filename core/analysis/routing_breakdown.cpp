// The routing breakdown (routing_breakdown.h): one traced eval-mode forward per batch of windows, each routed layer's
// decisions and gates counted per group of tokens.
#include "core/analysis/routing_breakdown.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/config/experiment_config.h"
#include "core/data/dataset.h"
#include "core/data/tokenizer.h"
#include "core/models/language_model.h"
#include "core/store/run_store.h"
#include "core/train/evaluation.h"
#include "core/train/step.h"
#include "core/util/content_hash.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::vector<std::string>& class_labels() {
  static const std::vector<std::string> labels = {"space",      "newline",  "punctuation", "digit",
                                                  "word start", "mid-word", "other"};
  return labels;
}

enum class CharKind { Space, Newline, Letter, Digit, Punct };

CharKind char_kind(char32_t c) {
  if (c == U' ' || c == U'\t' || c == U'\u21E5' || c == U'\u00A0' || c == U'\u3000') return CharKind::Space;
  if (c == U'\n' || c == U'\r' || c == U'\u23CE') return CharKind::Newline;
  if (c >= U'0' && c <= U'9') return CharKind::Digit;
  if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) return CharKind::Letter;
  if (c < 0x80) return CharKind::Punct;
  // Latin-1's symbols, general and CJK punctuation, arrows and other symbol blocks; every other code point (letters
  // of any script) counts as a letter.
  if (c < 0xC0 || c == 0xD7 || c == 0xF7 || (c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF0F))
    return CharKind::Punct;
  return CharKind::Letter;
}

/// The text's code points, or none where it is not valid UTF-8 (a byte piece's display is).
std::u32string code_points(const std::string& text) {
  if (find_invalid_utf8(text) != std::string::npos) return {};
  return utf8_to_u32(text);
}

/// A piece shown as a marker rather than text: "<0x0A>", "<U+0001>", "<unk>", "<s>", "⟨17⟩".
bool is_marker(const std::u32string& cps) {
  if (cps.size() < 2) return false;
  return (cps.front() == U'<' && cps.back() == U'>') || (cps.front() == U'\u27E8' && cps.back() == U'\u27E9');
}

/// Bucket b of the position buckets holds positions [4^b - 1 ... ): 0 | 1-3 | 4-15 | 16-63 | ...
std::size_t position_bucket(std::int64_t position) {
  std::size_t b = 0;
  for (std::int64_t end = 1; position >= end; end *= 4) ++b;
  return b;
}

std::string position_label(std::size_t bucket, std::int64_t context) {
  if (bucket == 0) return "0";
  std::int64_t lo = 1;
  for (std::size_t i = 1; i < bucket; ++i) lo *= 4;
  const auto hi = std::min(lo * 4 - 1, context - 1);
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

std::string percent(double share) {
  if (std::isnan(share)) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << 100.0 * share;
  return s.str();
}

std::string number(double v, int digits) {
  std::ostringstream s;
  s << std::setprecision(digits) << v;
  return s.str();
}

/// Group of every token of the sample for one grouping: a flat vector over the sample's tokens (window-major).
using Assignment = std::vector<std::size_t>;

/// The sample's tokens and what the forwards found, flat over (window, position).
struct Sample {
  std::vector<std::int64_t> ids;
  std::vector<double> nll;  ///< -log p(target) at each position
  std::int64_t context = 0;
  std::int64_t windows = 0;
  /// per routed layer, per token: decision (0/1) and gate (NaN where the layer has none)
  std::vector<std::vector<std::uint8_t>> decision;
  std::vector<std::vector<float>> gate;
};

void add_trace(Sample& sample, std::vector<RoutedLayerInfo>& layers, const std::vector<LayerTrace>& trace,
               std::int64_t rows, std::int64_t T) {
  std::size_t r = 0;
  for (const auto& layer : trace) {
    if (!layer.routed || !layer.decision.defined()) continue;
    if (sample.windows == 0) {
      layers.push_back({layer.layer, layer.kind});
      sample.decision.emplace_back();
      sample.gate.emplace_back();
    } else if (r >= layers.size() || layers[r].layer != layer.layer) {
      throw ConfigError("routing breakdown: the model's routed layers differ from one forward to the next");
    }
    const auto d = layer.decision.detach().to(torch::kCPU, torch::kByte).reshape({rows * T}).contiguous();
    sample.decision[r].insert(sample.decision[r].end(), d.data_ptr<std::uint8_t>(),
                              d.data_ptr<std::uint8_t>() + d.numel());
    if (layer.gate.defined()) {
      const auto g = layer.gate.detach().to(torch::kCPU, torch::kFloat).reshape({rows * T}).contiguous();
      sample.gate[r].insert(sample.gate[r].end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    } else {
      sample.gate[r].insert(sample.gate[r].end(), static_cast<std::size_t>(rows * T), std::nanf(""));
    }
    ++r;
  }
  if (sample.windows > 0 && r != layers.size())
    throw ConfigError("routing breakdown: the model's routed layers differ from one forward to the next");
}

/// How `tokens` tokens of `split` are read: `count` whole windows, window w of them the split's window
/// w x available / count (spread evenly over its `available` windows); a dataset without windows (a synthetic task)
/// draws `count` examples instead (`windowed` false).
struct WindowSpread {
  bool windowed = false;
  std::int64_t available = 0, count = 0;
};

WindowSpread spread_windows(const LmDataset& data, Split split, std::int64_t tokens) {
  const auto T = data.context();
  const auto wanted = std::max<std::int64_t>(1, (tokens + T - 1) / T);
  const auto available = std::max<std::int64_t>(0, (data.split_tokens(split) - 1) / T);
  const bool windowed = available > 0 && data.windows(split, 0, 1).has_value();
  return {windowed, available, windowed ? std::min(wanted, available) : wanted};
}

/// Reads the sample: windows spread evenly over the split (or the evaluation examples of a synthetic task).
Sample read_sample(LanguageModel& model, const LmDataset& data, const RoutingBreakdownOptions& options,
                   const torch::Device& device, bool bf16, std::uint64_t seed, std::vector<RoutedLayerInfo>& layers) {
  Sample sample;
  const auto T = data.context();
  sample.context = T;
  const auto batch_size = std::max<std::int64_t>(1, options.batch_size);
  const auto [windowed, available, count] = spread_windows(data, options.split, options.tokens);
  for (std::int64_t first = 0; first < count; first += batch_size) {
    interruption_point();
    const auto rows = std::min(batch_size, count - first);
    Batch batch;
    if (windowed) {
      std::vector<torch::Tensor> inputs, targets;
      for (std::int64_t w = first; w < first + rows; ++w) {
        const auto index = w * available / count;  // evenly spread over the split
        const auto one = data.windows(options.split, index, 1);
        if (!one) throw DataError("routing breakdown: window " + std::to_string(index) + " of the split is missing");
        inputs.push_back(one->input);
        targets.push_back(one->target);
      }
      batch.input = torch::cat(inputs);
      batch.target = torch::cat(targets);
    } else {
      batch = data.sample(options.split, rows, mix_seed(seed, kEvalStream, static_cast<std::uint64_t>(first)));
    }
    torch::Tensor nll;
    std::vector<LayerTrace> trace;
    {
      AutocastGuard autocast(bf16, device);
      auto out = model.forward(batch.input.to(device), /*trace=*/true);
      const auto logits = out.logits.to(torch::kFloat);
      const auto target = batch.target.to(device);
      nll =
          (logits.logsumexp(-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)).to(torch::kCPU, torch::kDouble);
      trace = std::move(out.trace);
    }
    add_trace(sample, layers, trace, rows, T);
    const auto ids = batch.input.to(torch::kCPU).reshape({-1}).contiguous();
    sample.ids.insert(sample.ids.end(), ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
    const auto n = nll.reshape({-1}).contiguous();
    sample.nll.insert(sample.nll.end(), n.data_ptr<double>(), n.data_ptr<double>() + n.numel());
    sample.windows += rows;
  }
  return sample;
}

/// Token counts of `frequency_tokens` training tokens, in windows spread evenly over the training split (a
/// synthetic task's training examples instead). -> counts per id, and the tokens counted
std::pair<std::vector<std::int64_t>, std::int64_t> training_counts(const LmDataset& data, std::int64_t frequency_tokens,
                                                                   std::uint64_t seed) {
  const auto V = data.tokenizer().vocab_size();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(V), 0);
  const auto [windowed, available, count] = spread_windows(data, Split::Train, frequency_tokens);
  std::int64_t counted = 0;
  for (std::int64_t w = 0; w < count; ++w) {
    interruption_point();
    const auto batch = windowed ? data.windows(Split::Train, w * available / count, 1)
                                : std::optional<Batch>(data.sample(
                                      Split::Train, 1, mix_seed(seed, kTrainStream, static_cast<std::uint64_t>(w))));
    if (!batch) break;
    const auto ids = batch->input.reshape({-1}).to(torch::kCPU).contiguous();
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      const auto id = ids.data_ptr<std::int64_t>()[i];
      if (id >= 0 && id < V) ++counts[static_cast<std::size_t>(id)];
    }
    counted += ids.numel();
  }
  return {counts, counted};
}

struct Grouped {
  std::vector<std::string> labels;
  std::vector<std::string> short_labels;  ///< empty: the labels are short already
  Assignment group;                       ///< per token
};

Grouped by_class(const Sample& s, const Tokenizer& tokenizer) {
  Grouped g;
  g.labels = class_labels();
  const auto V = tokenizer.vocab_size();
  std::vector<std::string> texts(static_cast<std::size_t>(V));
  std::vector<bool> alnum_end(static_cast<std::size_t>(V));
  for (std::int64_t id = 0; id < V; ++id) {
    texts[static_cast<std::size_t>(id)] = tokenizer.token_text(id);
    alnum_end[static_cast<std::size_t>(id)] = ends_in_alnum(texts[static_cast<std::size_t>(id)]);
  }
  // Each (id, previous ends in alnum) pair classified once.
  std::vector<int> cache(static_cast<std::size_t>(2 * V), -1);
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    const auto id = static_cast<std::size_t>(s.ids[i]);
    const bool first = static_cast<std::int64_t>(i) % s.context == 0;
    const bool prev_alnum = !first && alnum_end[static_cast<std::size_t>(s.ids[i - 1])];
    auto& c = cache[2 * id + (prev_alnum ? 1 : 0)];
    if (c < 0) {
      const auto label = token_class(texts[id], prev_alnum);
      c = static_cast<int>(std::find(g.labels.begin(), g.labels.end(), label) - g.labels.begin());
    }
    g.group.push_back(static_cast<std::size_t>(c));
  }
  return g;
}

Grouped by_position(const Sample& s) {
  Grouped g;
  const auto buckets = position_bucket(s.context - 1) + 1;
  for (std::size_t b = 0; b < buckets; ++b) g.labels.push_back(position_label(b, s.context));
  for (std::size_t i = 0; i < s.ids.size(); ++i)
    g.group.push_back(position_bucket(static_cast<std::int64_t>(i) % s.context));
  return g;
}

Grouped by_frequency(const Sample& s, const std::vector<std::int64_t>& counts, std::int64_t counted) {
  Grouped g;
  g.labels = {"most frequent (first 50% of training tokens)", "common (next 30%)", "uncommon (next 15%)",
              "rare (last 5%)", "unseen in the counted training tokens"};
  g.short_labels = {"top 50%", "next 30%", "next 15%", "last 5%", "unseen"};
  std::vector<std::size_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return counts[a] > counts[b]; });
  std::vector<std::size_t> group_of(counts.size(), 4);
  std::int64_t before = 0;
  for (const auto id : order) {
    if (counts[id] == 0) break;
    const double share = counted > 0 ? static_cast<double>(before) / static_cast<double>(counted) : 1.0;
    group_of[id] = share < 0.5 ? 0 : share < 0.8 ? 1 : share < 0.95 ? 2 : 3;
    before += counts[id];
  }
  for (const auto id : s.ids) g.group.push_back(group_of[static_cast<std::size_t>(id)]);
  return g;
}

/// Quartiles of `values` (NaN: the extra group `none`), 0 the group of the lowest values. -> cut points
std::vector<double> quartile_cuts(std::vector<double> values) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  std::vector<double> cuts;
  for (int q = 1; q < 4; ++q) cuts.push_back(values[values.size() * static_cast<std::size_t>(q) / 4]);
  return cuts;
}

std::size_t quartile(double v, const std::vector<double>& cuts) {
  return static_cast<std::size_t>(std::upper_bound(cuts.begin(), cuts.end(), v) - cuts.begin());
}

/// Quartile groups of `values` (lowest first; NaN: an extra last group `none`, where there is one), each labelled with
/// the range of `shown(value)` its tokens span (`name` of it; `names` from the lowest values up, `short_names` for
/// figures). Ties at a cut may leave a group smaller or empty: the labels say the ranges, the token counts the sizes.
Grouped quartile_groups(const std::vector<double>& values, const std::vector<std::string>& names,
                        const std::vector<std::string>& short_names, const std::string& name,
                        const std::function<double(double)>& shown, const std::string& none) {
  const auto cuts = quartile_cuts(values);
  Grouped g;
  g.group.reserve(values.size());
  std::vector<double> lo(4, std::numeric_limits<double>::infinity()), hi(4, -std::numeric_limits<double>::infinity());
  for (const auto v : values) {
    const auto q = std::isnan(v) || cuts.size() != 3 ? 4 : quartile(v, cuts);
    g.group.push_back(q);
    if (q < 4) lo[q] = std::min(lo[q], shown(v)), hi[q] = std::max(hi[q], shown(v));
  }
  for (std::size_t q = 0; q < 4; ++q) {
    const auto a = std::min(lo[q], hi[q]), b = std::max(lo[q], hi[q]);
    g.labels.push_back(names[q] + (lo[q] > hi[q] ? " (empty: ties at the cut)"
                                                 : " (" + name + " " + number(a, 3) + " to " + number(b, 3) + ")"));
  }
  g.short_labels = short_names;
  if (std::find(g.group.begin(), g.group.end(), std::size_t{4}) != g.group.end()) {
    g.labels.push_back(none.empty() ? "no finite value" : none);
    g.short_labels.push_back(none.empty() ? "none" : "first");
  }
  return g;
}

Grouped by_predictability(const Sample& s) {
  // p(token t | before) = exp(-nll at t - 1): the token is the target of the position before it.
  std::vector<double> loss(s.ids.size(), kNaN);
  for (std::size_t i = 0; i < s.ids.size(); ++i)
    if (static_cast<std::int64_t>(i) % s.context != 0) loss[i] = s.nll[i - 1];
  return quartile_groups(loss, {"Q1 most predictable", "Q2", "Q3", "Q4 least predictable"},
                         {"Q1 most", "Q2", "Q3", "Q4 least"}, "p", [](double v) { return std::exp(-v); },
                         "first of its window (no context)");
}

Grouped by_difficulty(const Sample& s) {
  return quartile_groups(s.nll, {"Q1 easiest next token", "Q2", "Q3", "Q4 hardest next token"},
                         {"Q1 easiest", "Q2", "Q3", "Q4 hardest"}, "loss", [](double v) { return v; }, "");
}

BreakdownGroup finish(const std::string& label, std::int64_t tokens, const std::vector<double>& routed,
                      const std::vector<double>& gate, const std::vector<std::int64_t>& gated) {
  BreakdownGroup out;
  out.label = label;
  out.tokens = tokens;
  for (std::size_t l = 0; l < routed.size(); ++l) {
    out.routed.push_back(tokens > 0 ? routed[l] / static_cast<double>(tokens) : kNaN);
    out.gate.push_back(gated[l] > 0 ? gate[l] / static_cast<double>(gated[l]) : kNaN);
  }
  return out;
}

/// Sums the sample's decisions and gates per group of `grouped`.
std::vector<BreakdownGroup> tally(const Sample& s, const Grouped& grouped) {
  const auto groups = grouped.labels.size(), layers = s.decision.size();
  std::vector<std::int64_t> tokens(groups, 0);
  std::vector<std::vector<double>> routed(groups, std::vector<double>(layers, 0.0)),
      gate(groups, std::vector<double>(layers, 0.0));
  std::vector<std::vector<std::int64_t>> gated(groups, std::vector<std::int64_t>(layers, 0));
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    const auto g = grouped.group[i];
    ++tokens[g];
    for (std::size_t l = 0; l < layers; ++l) {
      routed[g][l] += s.decision[l][i];
      if (!std::isnan(s.gate[l][i])) gate[g][l] += s.gate[l][i], ++gated[g][l];
    }
  }
  std::vector<BreakdownGroup> out;
  for (std::size_t g = 0; g < groups; ++g) {
    out.push_back(finish(grouped.labels[g], tokens[g], routed[g], gate[g], gated[g]));
    out.back().short_label = grouped.short_labels.empty() ? grouped.labels[g] : grouped.short_labels[g];
  }
  return out;
}

std::string unrouted_message(const std::string& arch) {
  return "routing breakdown: architecture '" + arch + "' routes no token (no layer makes routing decisions)";
}

nlohmann::json shares(const std::vector<double>& values) {
  auto out = nlohmann::json::array();
  for (const auto v : values) out.push_back(std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v));
  return out;
}

std::vector<double> shares_from(const nlohmann::json& values) {
  std::vector<double> out;
  for (const auto& v : values) out.push_back(v.is_null() ? kNaN : v.get<double>());
  return out;
}

nlohmann::json group_json(const BreakdownGroup& g) {
  const auto mean = g.mean_routed();
  return {{"label", g.label},
          {"short_label", g.short_label},
          {"tokens", g.tokens},
          {"mean_routed", std::isnan(mean) ? nlohmann::json(nullptr) : nlohmann::json(mean)},
          {"routed", shares(g.routed)},
          {"gate", shares(g.gate)}};
}

}  // namespace

std::string to_string(TokenGrouping grouping) {
  switch (grouping) {
    case TokenGrouping::Class:
      return "class";
    case TokenGrouping::Position:
      return "position";
    case TokenGrouping::Frequency:
      return "frequency";
    case TokenGrouping::Predictability:
      return "predictability";
    case TokenGrouping::Difficulty:
      return "difficulty";
  }
  return "class";
}

const std::vector<TokenGrouping>& all_token_groupings() {
  static const std::vector<TokenGrouping> all = {TokenGrouping::Class, TokenGrouping::Position,
                                                 TokenGrouping::Frequency, TokenGrouping::Predictability,
                                                 TokenGrouping::Difficulty};
  return all;
}

std::vector<std::string> token_grouping_names() {
  std::vector<std::string> names;
  for (const auto g : all_token_groupings()) names.push_back(to_string(g));
  return names;
}

TokenGrouping parse_token_grouping(const std::string& name, const std::string& key) {
  std::string known;
  for (const auto g : all_token_groupings()) {
    if (to_string(g) == name) return g;
    known += (known.empty() ? "" : ", ") + to_string(g);
  }
  throw ConfigError(key + ": unknown grouping '" + name + "' (known: " + known + ")");
}

bool ends_in_alnum(const std::string& text) {
  const auto cps = code_points(text);
  if (cps.empty() || is_marker(cps)) return false;
  const auto kind = char_kind(cps.back());
  return kind == CharKind::Letter || kind == CharKind::Digit;
}

std::string token_class(const std::string& text, bool previous_ends_in_alnum) {
  const auto cps = code_points(text);
  if (cps.empty() || is_marker(cps)) return "other";
  bool newline = false, letter = false, digit = false, punct = false;
  std::size_t first_visible = cps.size();
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const auto kind = char_kind(cps[i]);
    newline |= kind == CharKind::Newline;
    letter |= kind == CharKind::Letter;
    digit |= kind == CharKind::Digit;
    punct |= kind == CharKind::Punct;
    if (first_visible == cps.size() && kind != CharKind::Space && kind != CharKind::Newline) first_visible = i;
  }
  if (first_visible == cps.size()) return newline ? "newline" : "space";
  const bool lead_space = first_visible > 0;
  if (letter) return lead_space || !previous_ends_in_alnum ? "word start" : "mid-word";
  if (digit) return "digit";
  return punct ? "punctuation" : "other";
}

namespace {

/// The mean of the values that are not NaN; NaN where none is.
double mean_of_known(const std::vector<double>& values) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto v : values)
    if (!std::isnan(v)) sum += v, ++n;
  return n > 0 ? sum / static_cast<double>(n) : kNaN;
}

}  // namespace

double BreakdownGroup::mean_routed() const { return mean_of_known(routed); }

double BreakdownGroup::mean_gate() const { return mean_of_known(gate); }

RoutingBreakdown routing_breakdown(LanguageModel& model, const LmDataset& data, const RoutingBreakdownOptions& options,
                                   const torch::Device& device, bool bf16, std::uint64_t seed) {
  if (options.tokens < 1) throw ConfigError("--tokens: analyse at least one token");
  torch::NoGradGuard no_grad;
  RoutingBreakdown out;
  out.arch = model.arch_id();
  out.split = to_string(options.split);
  const auto sample = [&] {
    const EvalMode eval_mode(model);
    return read_sample(model, data, options, device, bf16, seed, out.layers);
  }();
  if (out.layers.empty()) {
    if (options.unrouted_is_empty) return out;
    throw ConfigError(unrouted_message(out.arch));
  }
  out.tokens = static_cast<std::int64_t>(sample.ids.size());
  out.windows = sample.windows;
  Grouped everything;
  everything.labels = {"all tokens"};
  everything.group.assign(sample.ids.size(), 0);
  out.all = tally(sample, everything).front();
  for (const auto by : options.groupings) {
    Grouped grouped;
    switch (by) {
      case TokenGrouping::Class:
        grouped = by_class(sample, data.tokenizer());
        break;
      case TokenGrouping::Position:
        grouped = by_position(sample);
        break;
      case TokenGrouping::Frequency: {
        const auto [counts, counted] = training_counts(data, options.frequency_tokens, seed);
        out.frequency_tokens = counted;
        grouped = by_frequency(sample, counts, counted);
        break;
      }
      case TokenGrouping::Predictability:
        grouped = by_predictability(sample);
        break;
      case TokenGrouping::Difficulty:
        grouped = by_difficulty(sample);
        break;
    }
    out.tables.push_back({by, tally(sample, grouped)});
  }
  return out;
}

RoutingBreakdown routing_breakdown(LoadedRun& run, const RoutingBreakdownOptions& options) {
  auto opts = options;
  if (opts.batch_size <= 0) opts.batch_size = run.config.train().at("batch_size").get<std::int64_t>();
  const auto seed = static_cast<std::uint64_t>(run.config.run().at("seed").get<std::int64_t>());
  RoutingBreakdown out;
  try {
    out = routing_breakdown(*run.model, *run.dataset, opts, run.device, run.bf16, seed);
  } catch (const ConfigError& e) {
    throw ConfigError(run.db_path + ": run " + std::to_string(run.run_id) + ": " + e.what());
  }
  out.run_id = run.run_id;
  out.step = run.step;
  out.name = run.name;
  return out;
}

namespace {

/// The store's name for a kept breakdown, and the version of its definition (its groups and sample): a change to
/// either bumps it, and what was kept under an older one is computed again.
constexpr const char* kBreakdownKind = "routing-breakdown";
constexpr int kBreakdownFormat = 1;

BreakdownGroup group_from_json(const nlohmann::json& g) {
  BreakdownGroup out;
  out.label = g.at("label").get<std::string>();
  out.short_label = g.at("short_label").get<std::string>();
  out.tokens = g.at("tokens").get<std::int64_t>();
  out.routed = shares_from(g.at("routed"));
  out.gate = shares_from(g.at("gate"));
  return out;
}

/// The groupings `options` asks for, in its order, out of a breakdown with every grouping; a model that routes
/// nothing is refused as routing_breakdown refuses it, unless the options take it as empty.
RoutingBreakdown chosen(RoutingBreakdown all, const RoutingBreakdownOptions& options, const std::string& where) {
  if (all.layers.empty() && !options.unrouted_is_empty) throw ConfigError(where + unrouted_message(all.arch));
  RoutingBreakdown out = std::move(all);
  std::vector<BreakdownTable> tables;
  bool frequency = false;
  for (const auto by : options.groupings)
    for (const auto& t : out.tables)
      if (t.by == by) {
        tables.push_back(t);
        frequency = frequency || by == TokenGrouping::Frequency;
      }
  out.tables = std::move(tables);
  if (!frequency) out.frequency_tokens = 0;
  return out;
}

}  // namespace

RoutingBreakdown routing_breakdown_from_json(const nlohmann::json& doc, const std::string& origin) {
  try {
    RoutingBreakdown out;
    out.run_id = doc.at("run_id").get<std::int64_t>();
    out.name = doc.at("name").get<std::string>();
    out.arch = doc.at("arch").get<std::string>();
    out.step = doc.at("step").get<std::int64_t>();
    out.split = doc.at("split").get<std::string>();
    out.tokens = doc.at("tokens").get<std::int64_t>();
    out.windows = doc.at("windows").get<std::int64_t>();
    out.frequency_tokens = doc.at("frequency_tokens").get<std::int64_t>();
    for (const auto& l : doc.at("layers"))
      out.layers.push_back({l.at("layer").get<int>(), l.at("kind").get<std::string>()});
    out.all = group_from_json(doc.at("all"));
    const auto& by = doc.at("by");
    for (const auto grouping : all_token_groupings()) {  // the object's keys are sorted: the order is the enum's
      const auto it = by.find(to_string(grouping));
      if (it == by.end()) continue;
      BreakdownTable table{grouping, {}};
      for (const auto& g : *it) table.groups.push_back(group_from_json(g));
      out.tables.push_back(std::move(table));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw StoreError(origin + ": not a routing breakdown: " + e.what());
  }
}

RoutingBreakdown stored_routing_breakdown(const std::string& db_path, std::int64_t run_id,
                                          const RoutingBreakdownOptions& options, const std::vector<std::string>& sets,
                                          std::int64_t step, bool* from_store) {
  const auto stored = read_stored_run(db_path, run_id, sets, step);
  const auto where = stored.db_path + ": run " + std::to_string(run_id) + ": ";
  auto sample = options;
  if (sample.batch_size <= 0) sample.batch_size = stored.config.train().at("batch_size").get<std::int64_t>();
  const nlohmann::json depends_on = {
      {"format", kBreakdownFormat},
      {"config", stored.config.hash()},  // the run's config with the overrides
      {"device", resolve_stored_device(stored.config.run().at("device").get<std::string>()).str()},
      {"checkpoint", std::filesystem::path(stored.checkpoint).filename().string()},  // wherever the store moved
      {"step", stored.expect.step},
      {"crc32", stored.crc32 ? nlohmann::json(*stored.crc32) : nlohmann::json(nullptr)},
      {"split", to_string(sample.split)},
      {"tokens", sample.tokens},
      {"frequency_tokens", sample.frequency_tokens},
      {"batch_size", sample.batch_size}};
  const auto key = content_hash(depends_on.dump());
  RunStore store(stored.db_path, /*mark_crashed=*/false);
  if (const auto kept = store.analysis(run_id, kBreakdownKind, key)) {
    std::optional<RoutingBreakdown> read;
    try {
      read = routing_breakdown_from_json(nlohmann::json::parse(*kept), where + "kept breakdown " + key);
    } catch (const std::exception& e) {  // a damaged document: computed again, and replaced
      logger("core")->warn("{}: computing it again", e.what());
    }
    if (read) {
      read->name = stored.name;  // the run's name now (it may have been renamed since)
      if (from_store) *from_store = true;
      return chosen(std::move(*read), options, where);
    }
  }
  sample.groupings = all_token_groupings();
  sample.unrouted_is_empty = true;
  interruption_point();  // before a checkpoint is read (a history breaks down one after another)
  auto run = load_run(db_path, run_id, sets, step);
  auto all = routing_breakdown(run, sample);
  try {
    store.put_analysis(run_id, kBreakdownKind, key, all.step, all.to_json().dump());
  } catch (const StoreError& e) {  // a full disk, a locked store: the result is still the caller's
    logger("core")->warn("{}the routing breakdown was not kept: {}", where, e.what());
  }
  if (from_store) *from_store = false;
  return chosen(std::move(all), options, where);
}

nlohmann::json RoutingBreakdown::to_json() const {
  nlohmann::json doc = {
      {"run_id", run_id}, {"name", name},     {"arch", arch},       {"step", step},
      {"split", split},   {"tokens", tokens}, {"windows", windows}, {"frequency_tokens", frequency_tokens}};
  doc["layers"] = nlohmann::json::array();
  for (const auto& l : layers) doc["layers"].push_back({{"layer", l.layer}, {"kind", l.kind}});
  doc["all"] = group_json(all);
  doc["by"] = nlohmann::json::object();
  for (const auto& t : tables) {
    auto groups = nlohmann::json::array();
    for (const auto& g : t.groups) groups.push_back(group_json(g));
    doc["by"][to_string(t.by)] = std::move(groups);
  }
  return doc;
}

std::string RoutingBreakdown::to_table(bool gates) const {
  std::ostringstream s;
  s << "run " << run_id << " " << name << " (" << arch << "), checkpoint step " << step << ", " << split << " split, "
    << tokens << " tokens in " << windows << " windows, inference mode: "
    << (gates ? "the mean gate of each group's tokens (-: the layer has no gate)"
              : "% of each group's tokens on the routed path")
    << "\n";
  const auto header = [&](const std::string& first) {
    s << "| " << first << " | tokens | % of sample | mean |";
    for (const auto& l : layers) s << " L" << l.layer << " |";
    s << "\n|---|---|---|---|";
    for (std::size_t i = 0; i < layers.size(); ++i) s << "---|";
    s << "\n";
  };
  const auto row = [&](const BreakdownGroup& g) {
    s << "| " << g.label << " | " << g.tokens << " | "
      << percent(tokens > 0 ? static_cast<double>(g.tokens) / static_cast<double>(tokens) : kNaN) << " | ";
    if (gates) {
      const double mean = g.mean_gate();
      s << (std::isnan(mean) ? "-" : number(mean, 3)) << " |";
      for (const auto v : g.gate) s << " " << (std::isnan(v) ? "-" : number(v, 3)) << " |";
    } else {
      s << percent(g.mean_routed()) << " |";
      for (const auto v : g.routed) s << " " << percent(v) << " |";
    }
    s << "\n";
  };
  header("");
  row(all);
  for (const auto& t : tables) {
    s << "\nby " << to_string(t.by)
      << (t.by == TokenGrouping::Frequency ? " (" + std::to_string(frequency_tokens) + " training tokens counted)" : "")
      << ":\n";
    header(to_string(t.by));
    for (const auto& g : t.groups) row(g);
  }
  return s.str();
}

}  // namespace routelab
