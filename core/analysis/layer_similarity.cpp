// Per-layer outputs through the models' public blocks, and their mean token cosine similarity.
#include "core/analysis/layer_similarity.h"

#include "core/models/dense_transformer.h"
#include "core/models/dllm.h"
#include "core/models/drr.h"
#include "core/models/dtrnet.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/mod.h"
#include "core/models/radial.h"
#include "core/train/evaluation.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

/// TransformerTrunk::embed is protected: the same lookup from the registered parameters ("tok_emb.weight", and
/// "pos_emb.weight" for GPT-2 style). Eval mode only, so no embedding dropout. positions: (T).
torch::Tensor embed_tokens(const LanguageModel& model, const torch::Tensor& tokens, torch::Tensor& positions) {
  const auto params = model.named_parameters();
  const auto T = tokens.size(1);
  positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));  // (T)
  auto x = torch::embedding(params["tok_emb.weight"], tokens);                                        // (B, T, C)
  if (const auto* pos = params.find("pos_emb.weight")) x = x + torch::embedding(*pos, positions);
  return x;
}

}  // namespace

const std::vector<std::string>& layer_output_architectures() {
  static const std::vector<std::string> archs = {"dense", "dllm", "drr", "dtrnet", "early-exit", "mod", "radial",
                                                  "tsa"};
  return archs;
}

std::vector<torch::Tensor> layer_outputs(LanguageModel& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  if (model.is_training()) throw ConfigError("layer outputs: the model must be in eval mode");
  std::vector<torch::Tensor> out;
  if (auto* drr = dynamic_cast<DrrTransformer*>(&model)) return drr->states(tokens, false, /*keep_layers=*/true).layers;
  if (auto* dense = dynamic_cast<DenseTransformer*>(&model)) {
    if (tokens.size(1) > dense->options().max_seq_len())
      throw ConfigError("layer outputs: " + std::to_string(tokens.size(1)) + " tokens exceed model.max_seq_len");
    torch::Tensor positions;
    auto x = embed_tokens(model, tokens, positions);  // (B, T, C)
    for (auto& block : dense->blocks) out.push_back(x = block->forward(x, positions));
    return out;
  }
  if (auto* dtr = dynamic_cast<DTRNet*>(&model)) {
    if (tokens.size(1) > dtr->options().max_seq_len())
      throw ConfigError("layer outputs: " + std::to_string(tokens.size(1)) + " tokens exceed model.max_seq_len");
    torch::Tensor positions;
    auto x = embed_tokens(model, tokens, positions);  // (B, T, C)
    for (std::int64_t i = 0; i < dtr->num_layers(); ++i) {
      const auto l = static_cast<std::size_t>(i);
      x = dtr->routed[l] ? dtr->routed[l]->forward(x, positions).y : dtr->dense[l]->forward(x, positions);
      out.push_back(x);
    }
    return out;
  }
  if (auto* mod = dynamic_cast<MixtureOfDepths*>(&model)) {
    if (tokens.size(1) > mod->options().max_seq_len())
      throw ConfigError("layer outputs: " + std::to_string(tokens.size(1)) + " tokens exceed model.max_seq_len");
    torch::Tensor positions;
    auto x = embed_tokens(model, tokens, positions);  // (B, T, C)
    for (std::size_t i = 0; i < mod->routed().size(); ++i) {
      torch::Tensor predictor_loss;  // stays undefined in eval mode
      x = mod->routed()[i] ? mod->mod_layers[i]->forward(x, positions, predictor_loss)
                           : mod->dense_blocks[i]->forward(x, positions);
      out.push_back(x);
    }
    return out;
  }
  if (auto* dllm = dynamic_cast<DLLM*>(&model)) {
    if (tokens.size(1) > dllm->options().max_seq_len())
      throw ConfigError("layer outputs: " + std::to_string(tokens.size(1)) + " tokens exceed model.max_seq_len");
    torch::Tensor positions;
    auto x = embed_tokens(model, tokens, positions);  // (B, T, C)
    for (std::size_t i = 0; i < dllm->blocks.size(); ++i) {
      // The inference rule of DLLM::forward; skipped tokens keep their state.
      if (dllm->routed()[i]) {
        x = dllm->skipping_layer(i, x, positions, compact(dllm->executes(i, x, positions)));
      } else {
        x = dllm->blocks[i]->forward(x, positions);
      }
      out.push_back(x);
    }
    return out;
  }
  const auto arch = model.arch_id();
  if (arch == "tsa" || arch == "early-exit" || arch == "radial") {
    // The model's own forward reports its stream after every layer (Radial: every routing step).
    LayerStateProbe probe;
    model.forward(tokens, /*trace=*/false);
    out = std::move(probe.states);
    if (auto* radial = dynamic_cast<RadialNetwork*>(&model)) {
      // The forward stops once every token has exited: the later steps leave every state as it is.
      if (out.empty()) throw ConfigError("layer outputs: every token exited the radial network before its first step");
      while (static_cast<std::int64_t>(out.size()) < radial->max_depth()) out.push_back(out.back());
    }
    return out;
  }
  std::string known;
  for (const auto& a : layer_output_architectures()) known += (known.empty() ? "" : ", ") + a;
  throw ConfigError("layer outputs: architecture '" + model.arch_id() + "' does not expose its layers (supported: " +
                    known + ")");
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
