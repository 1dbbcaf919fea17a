// Residual-ratio profiling over evaluation batches and the probe text.
#include "core/analysis/residual_profile.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/models/blocks/residual_probe.h"
#include "core/train/evaluation.h"
#include "core/util/interrupt.h"

namespace routelab {
namespace {

constexpr double kLogMin = -3.0, kLogMax = 1.0;

/// Runs the model on `input` (B, T) in inference mode while collecting ratios.
std::vector<ResidualSample> collect(LanguageModel& model, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  ResidualProbe probe;
  model.forward(input, /*trace=*/false);
  return std::move(probe.samples);
}

double quantile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const auto i = static_cast<std::size_t>(std::lround(q * static_cast<double>(sorted.size() - 1)));
  return sorted[i];
}

}  // namespace

ResidualProfile profile_residuals(LoadedRun& run, const ResidualProfileOptions& options) {
  ResidualProfile p;
  p.run_id = run.run_id;
  p.name = run.name;
  p.arch = run.config.arch();
  p.step = run.step;
  p.tau = options.tau;
  p.bins = std::max(1, options.bins);
  p.static_depth = 2.0 * static_cast<double>(run.model->num_layers());
  run.model->eval();
  const auto batch_size =
      options.batch_size > 0 ? options.batch_size : run.config.train().at("batch_size").get<std::int64_t>();
  const auto seed = static_cast<std::uint64_t>(run.config.run().at("seed").get<std::int64_t>());

  std::map<std::pair<int, std::string>, std::vector<float>> values;  // (layer, block) -> r of every pair
  std::vector<std::int64_t> depth_hist;
  double executed_sum = 0, oracle_sum = 0, tokens = 0;
  for (std::int64_t b = 0; b < options.batches; ++b) {
    interruption_point();
    const auto batch =
        to_device(run.dataset->sample(options.split, batch_size, mix_seed(seed, kEvalStream, static_cast<std::uint64_t>(b))),
                  run.device);
    const auto samples = collect(*run.model, batch.input);
    if (samples.empty()) continue;
    auto executed = torch::zeros_like(samples.front().ratio);  // (B, T) sub-blocks run
    auto kept = torch::zeros_like(executed);                     // (B, T) of those with r >= tau
    for (const auto& s : samples) {
      const auto ran = s.ratio.isnan().logical_not();
      executed += ran.to(torch::kFloat);
      kept += s.ratio.ge(options.tau).to(torch::kFloat);  // NaN compares false
      const auto r = s.ratio.masked_select(ran).contiguous();
      auto& v = values[{s.layer, s.block}];
      v.insert(v.end(), r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
    }
    executed_sum += executed.sum().item<double>();
    oracle_sum += kept.sum().item<double>();
    tokens += static_cast<double>(executed.numel());
    const auto k = kept.to(torch::kLong).flatten().contiguous();
    for (std::int64_t i = 0; i < k.numel(); ++i) {
      const auto d = static_cast<std::size_t>(k.data_ptr<std::int64_t>()[i]);
      if (depth_hist.size() <= d) depth_hist.resize(d + 1, 0);
      ++depth_hist[d];
    }
  }
  p.mean_executed = tokens > 0 ? executed_sum / tokens : 0.0;
  p.mean_oracle_depth = tokens > 0 ? oracle_sum / tokens : 0.0;
  p.oracle_depth_histogram = std::move(depth_hist);

  for (auto& [key, v] : values) {
    SubBlockProfile s;
    s.layer = key.first;
    s.block = key.second;
    s.count = static_cast<std::int64_t>(v.size());
    s.histogram.assign(static_cast<std::size_t>(p.bins), 0);
    std::sort(v.begin(), v.end());
    double sum = 0;
    std::int64_t below = 0;
    for (const float r : v) {
      sum += r;
      below += r < options.tau;
      const double x = r > 0 ? std::log10(static_cast<double>(r)) : kLogMin;
      const auto bin = static_cast<int>(std::floor((x - kLogMin) / (kLogMax - kLogMin) * p.bins));
      ++s.histogram[static_cast<std::size_t>(std::clamp(bin, 0, p.bins - 1))];
    }
    if (!v.empty()) {
      s.mean = sum / static_cast<double>(v.size());
      s.p10 = quantile(v, 0.1);
      s.p50 = quantile(v, 0.5);
      s.p90 = quantile(v, 0.9);
      s.max = v.back();
      s.below_tau = static_cast<double>(below) / static_cast<double>(v.size());
    }
    p.blocks.push_back(std::move(s));
  }
  std::sort(p.blocks.begin(), p.blocks.end(), [](const SubBlockProfile& a, const SubBlockProfile& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.block < b.block;  // "attn" < "mlp"
  });

  // The probe text: per token and sub-block, for the Figure 7 style map.
  const auto ids = run.dataset->probe_tokens();
  if (ids.size() >= 2) {
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()) - 1, run.dataset->context());
    const auto input =
        torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.begin() + n), torch::kLong).unsqueeze(0).to(run.device);
    const auto& tok = run.dataset->tokenizer();
    for (std::int64_t i = 0; i < n; ++i) p.probe["tokens"].push_back(tok.token_text(ids[static_cast<std::size_t>(i)]));
    p.probe["blocks"] = nlohmann::json::array();
    for (const auto& s : collect(*run.model, input)) {
      nlohmann::json r = nlohmann::json::array();
      const auto row = s.ratio[0].contiguous();
      for (std::int64_t i = 0; i < row.numel(); ++i) {
        const float v = row.data_ptr<float>()[i];
        r.push_back(std::isnan(v) ? nlohmann::json() : nlohmann::json(v));
      }
      nlohmann::json entry = {{"layer", s.layer}, {"block", s.block}, {"ratio", std::move(r)}};
      if (s.step >= 0) entry["step"] = s.step;
      p.probe["blocks"].push_back(std::move(entry));
    }
  }
  return p;
}

nlohmann::json ResidualProfile::to_json() const {
  nlohmann::json j = {{"run", run_id},
                      {"name", name},
                      {"arch", arch},
                      {"step", step},
                      {"tau", tau},
                      {"histogram_log10_range", {kLogMin, kLogMax}},
                      {"mean_executed", mean_executed},
                      {"mean_oracle_depth", mean_oracle_depth},
                      {"static_depth", static_depth},
                      {"oracle_depth_histogram", oracle_depth_histogram},
                      {"probe", probe}};
  j["blocks"] = nlohmann::json::array();
  for (const auto& s : blocks)
    j["blocks"].push_back({{"layer", s.layer}, {"block", s.block}, {"count", s.count}, {"mean", s.mean},
                           {"p10", s.p10}, {"p50", s.p50}, {"p90", s.p90}, {"max", s.max},
                           {"below_tau", s.below_tau}, {"histogram", s.histogram}});
  return j;
}

std::string ResidualProfile::to_table() const {
  std::ostringstream out;
  out << "residual ratio r = ||R(x)|| / ||x|| per token (inference mode), run " << run_id << " " << name << " (" << arch
      << "), step " << step << "\n";
  out << "| layer | block | tokens | mean | p10 | median | p90 | max | r < " << tau << " |\n";
  out << "|---|---|---|---|---|---|---|---|---|\n";
  out << std::fixed;
  for (const auto& s : blocks)
    out << "| " << s.layer << " | " << s.block << " | " << s.count << " | " << std::setprecision(4) << s.mean << " | "
        << s.p10 << " | " << s.p50 << " | " << s.p90 << " | " << s.max << " | " << std::setprecision(1)
        << 100.0 * s.below_tau << "% |\n";
  out << std::setprecision(2) << "sub-blocks run per token: " << mean_executed << " of " << static_depth
      << " (dense); oracle dynamic depth at tau " << tau << ": " << mean_oracle_depth << " ("
      << std::setprecision(1) << (static_depth > 0 ? 100.0 * mean_oracle_depth / static_depth : 0.0)
      << "% of the dense depth)\n";
  return out.str();
}

}  // namespace routelab
