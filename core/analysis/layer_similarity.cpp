// Per-layer outputs from the models' own forward (LayerStateProbe), and their mean token cosine similarity.
#include "core/analysis/layer_similarity.h"

#include "core/models/blocks/residual_probe.h"
#include "core/models/language_model.h"
#include "core/train/evaluation.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"

namespace routelab {

std::vector<torch::Tensor> layer_outputs(LanguageModel& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  if (model.is_training()) throw ConfigError("layer outputs: the model must be in eval mode");
  // The model's own forward reports its stream after every layer (Radial: every routing step, those after every
  // token has exited included).
  LayerStateProbe probe;
  model.forward(tokens, /*trace=*/false);
  auto out = std::move(probe.states);
  if (out.empty())
    throw ConfigError("layer outputs: architecture '" + model.arch_id() +
                      "' reports no layer states (its forward must call record_layer_state)");
  return out;
}

torch::Tensor mean_token_cosine(const std::vector<torch::Tensor>& states) {
  torch::NoGradGuard no_grad;
  if (states.empty()) return torch::zeros({0, 0}, torch::kDouble);
  std::vector<torch::Tensor> rows;
  for (const auto& h : states) {
    const auto flat = h.detach().to(torch::kCPU, torch::kDouble).reshape({-1, h.size(-1)});  // (N, C)
    rows.push_back(flat / flat.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-300));
  }
  const auto unit = torch::stack(rows);  // (L, N, C)
  const auto n = static_cast<double>(unit.size(1));
  // sum_t <u_i(t), u_j(t)> / N for every pair (i, j)
  return torch::einsum("inc,jnc->ij", {unit, unit}) / n;  // (L, L)
}

LayerSimilarity layer_similarity(LoadedRun& run, const LayerSimilarityOptions& options) {
  torch::NoGradGuard no_grad;
  run.model->eval();
  LayerSimilarity s;
  s.run_id = run.run_id;
  s.step = run.step;
  s.name = run.name;
  s.arch = run.config.arch();
  const auto batch_size =
      options.batch_size > 0 ? options.batch_size : run.config.train().at("batch_size").get<std::int64_t>();
  const auto seed = static_cast<std::uint64_t>(run.config.run().at("seed").get<std::int64_t>());
  torch::Tensor sum;  // (L, L) sum over tokens of the cosines
  for (std::int64_t b = 0; b < std::max<std::int64_t>(1, options.batches); ++b) {
    interruption_point();
    const auto batch = to_device(
        run.dataset->sample(options.split, batch_size, mix_seed(seed, kEvalStream, static_cast<std::uint64_t>(b))),
        run.device);
    const auto states = layer_outputs(*run.model, batch.input);
    const auto tokens = batch.input.numel();
    const auto part = mean_token_cosine(states) * static_cast<double>(tokens);
    sum = sum.defined() ? sum + part : part;
    s.tokens += tokens;
  }
  const auto mean = (sum / static_cast<double>(s.tokens)).contiguous();
  s.layers = mean.size(0);
  s.cosine.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
  return s;
}

}  // namespace routelab
