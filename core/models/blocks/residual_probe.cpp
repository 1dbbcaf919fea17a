// The thread-local residual-ratio and layer-state collectors.
#include "core/models/blocks/residual_probe.h"

#include <limits>

#include "core/util/errors.h"

namespace routelab {
namespace {

thread_local ResidualProbe* t_probe = nullptr;
thread_local LayerStateProbe* t_states = nullptr;

/// ||update|| / ||x|| per row: (B, N, C) -> (B, N) float on the CPU. A zero stream gives +inf, not a crash.
torch::Tensor row_ratio(const torch::Tensor& x, const torch::Tensor& update) {
  torch::NoGradGuard no_grad;
  const auto xf = x.detach().to(torch::kFloat);
  const auto uf = update.detach().to(torch::kFloat);
  return (uf.norm(2, {-1}) / xf.norm(2, {-1})).cpu();
}

}  // namespace

ResidualProbe::ResidualProbe() {
  if (t_probe) throw std::logic_error("a ResidualProbe is already collecting on this thread");
  t_probe = this;
}

ResidualProbe::~ResidualProbe() { t_probe = nullptr; }

bool residual_probe_active() { return t_probe != nullptr; }

void record_residual(int layer, const std::string& block, const torch::Tensor& x, const torch::Tensor& update,
                     const torch::Tensor& ran, int step) {
  if (!t_probe) return;
  auto ratio = row_ratio(x, update);  // (B, T)
  if (ran.defined()) ratio.masked_fill_(ran.logical_not().cpu(), std::numeric_limits<float>::quiet_NaN());
  t_probe->samples.push_back({layer, block, step, ratio});
}

void record_residual(int layer, const std::string& block, const torch::Tensor& x_rows,
                     const torch::Tensor& update_rows, const Compaction& rows, int step) {
  if (!t_probe) return;
  const auto B = x_rows.size(0);
  auto full = torch::full({B, rows.seq_len}, std::numeric_limits<float>::quiet_NaN(), torch::kFloat);
  if (rows.total > 0) {
    const auto r = row_ratio(x_rows, update_rows);                   // (B, K)
    const auto valid = rows.valid.cpu();
    const auto index = rows.index.cpu().masked_select(valid);        // routed positions, row by row
    const auto batch = torch::arange(B).unsqueeze(1).expand_as(rows.index.cpu()).masked_select(valid);
    full.index_put_({batch, index}, r.masked_select(valid));
  }
  t_probe->samples.push_back({layer, block, step, full});
}

LayerStateProbe::LayerStateProbe(bool keep) : keep_graph(keep) {
  if (t_states) throw std::logic_error("a LayerStateProbe is already collecting on this thread");
  t_states = this;
}

LayerStateProbe::~LayerStateProbe() { t_states = nullptr; }

void record_layer_state(const torch::Tensor& x) {
  if (t_states) t_states->states.push_back(t_states->keep_graph ? x : x.detach());
}

bool layer_state_probe_active() { return t_states != nullptr; }

}  // namespace routelab
