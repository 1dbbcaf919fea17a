// A test-only architecture (issue 20): token-choice MLP skipping, written in this one file against the public
// model, inference and cost API, and registered by the conformance suite (ScopedArchitecture). It shows what adding
// an architecture takes: its file and one registration; every conformance check then runs on it as on a built-in
// one (config errors, checkpoints, causality, decode = forward, KV rule, counted = priced FLOPs, benchmark hook).
//
// Every layer runs dense attention, then a router p = sigmoid(w . h + b) on the token's state h after attention.
// Training: every token runs the MLP, scaled by p (a differentiable soft gate). Inference: only the tokens with
// p > 0.5 run it (gathered, computed, scattered back); the decision reads h, which depends on the past only.
#pragma once
#include <memory>
#include <string>

#include <torch/torch.h>

#include "core/cost/flops_pricing.h"
#include "core/inference/kv_cache.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab::example {

inline const std::string kMlpSkipId = "mlp-skip";

class MlpSkip : public TransformerTrunk {
 public:
  explicit MlpSkip(TransformerOptions options) : TransformerTrunk(std::move(options)) {
    auto block_list = register_module("blocks", torch::nn::ModuleList());
    auto router_list = register_module("routers", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
      blocks.push_back(DenseBlock(options_, i));
      block_list->push_back(blocks.back());
      routers.push_back(torch::nn::Linear(options_.n_embd(), 1));
      router_list->push_back(routers.back());
    }
    init_weights();
  }

  std::string arch_id() const override { return kMlpSkipId; }

  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override {
    torch::Tensor positions;
    auto x = embed(tokens, positions);  // (B, T, C)
    ModelOutput out;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto& b = blocks[i];
      const auto h = x + b->attn(b->norm1(x), positions);
      // Its own code names its part (the shared blocks name theirs): profiles show the router's time as "router".
      const auto p = ROUTELAB_IN_PART("router", torch::sigmoid(routers[i](h)).squeeze(-1));  // (B, T)
      const auto run = p > 0.5;
      x = is_training() ? h + p.unsqueeze(-1) * b->mlp(b->norm2(h)) : h + mlp_rows(*b, h, run);
      record_layer_state(x);
      if (trace) out.trace.push_back(layer_trace(static_cast<int>(i), p, run, tokens.size(1), is_training()));
    }
    out.logits = head(x);
    out.aux_loss = torch::zeros({}, out.logits.options().dtype(torch::kFloat));
    return out;
  }

  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override { return new_decode_state(batch); }

  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override {
    torch::NoGradGuard no_grad;
    torch::Tensor positions;
    auto x = embed_decode(tokens, state, positions);  // (B, n, C)
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto& b = blocks[i];
      const auto h = x + b->attn->forward_cached(b->norm1(x), positions, state.cache(i));
      const auto p = torch::sigmoid(routers[i](h)).squeeze(-1);
      const auto run = p > 0.5;
      x = h + mlp_rows(*b, h, run);
      if (trace) trace->layers.push_back(layer_trace(static_cast<int>(i), p, run, tokens.size(1), false));
    }
    state.advance(tokens.size(1));
    return head(x);
  }

  std::vector<DenseBlock> blocks;
  std::vector<torch::nn::Linear> routers;

 private:
  /// The MLP update of the rows `run` selects (zero elsewhere): only those rows are computed.
  static torch::Tensor mlp_rows(DenseBlockImpl& b, const torch::Tensor& h, const torch::Tensor& run) {
    const auto flat = h.reshape({-1, h.size(-1)});
    const auto rows = run.reshape({-1}).nonzero().squeeze(1);
    auto update = torch::zeros_like(flat);
    if (rows.numel() > 0) update = update.index_copy(0, rows, b.mlp(b.norm2(flat.index_select(0, rows))));
    return update.view_as(h);
  }

  /// Priced as executed: attention and the router over every token; the MLP over every token in training (the
  /// soft gate), over the selected ones at inference.
  LayerTrace layer_trace(int layer, const torch::Tensor& p, const torch::Tensor& run, std::int64_t T,
                         bool training) const {
    const auto s = layer_shape(options_);
    const double B = static_cast<double>(p.size(0)), N = B * static_cast<double>(T);
    const auto selected = run.sum().item<std::int64_t>();
    const double mlp_rows = training ? N : static_cast<double>(selected);
    LayerTrace t;
    t.layer = layer;
    t.kind = kMlpSkipId;
    t.routed = true;
    t.gate = p.detach().to(torch::kFloat);
    t.decision = run;
    t.routed_fraction = static_cast<double>(selected) / N;
    t.tokens_processed = {{"attn", static_cast<std::int64_t>(N)},
                          {"mlp", static_cast<std::int64_t>(mlp_rows)},
                          {"router", static_cast<std::int64_t>(N)}};
    t.flops = qkv_flops(N, s) + attention_core_flops(B * static_cast<double>(T * T), s) + out_proj_flops(N, s) +
              mlp_flops(mlp_rows, s) + linear_flops(N, static_cast<double>(s.d), 1.0);
    t.dense_flops = dense_layer_flops(B, static_cast<double>(T), s);
    return t;
  }
};

/// The eval-mode forward's FLOPs at routed fractions (share of tokens running each MLP; default 1).
inline FlopsEstimate price_mlp_skip(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto f = layer_fractions(in, std::vector<bool>(static_cast<std::size_t>(t.n_layer()), true), 1.0, 0.0, 1.0);
  FlopsBuilder b(in, s, in.vocab);
  for (int i = 0; i < t.n_layer(); ++i) {
    auto& l = b.add(i, kMlpSkipId, true, f[static_cast<std::size_t>(i)], s);
    FlopsBuilder::part(l, "router", linear_flops(b.N, static_cast<double>(s.d), 1.0));
    FlopsBuilder::part(l, "attn_qkv", qkv_flops(b.N, s));
    FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));
    FlopsBuilder::part(l, "mlp", mlp_flops(f[static_cast<std::size_t>(i)] * b.N, s));
  }
  b.est.notes.push_back("attention over every token; the MLP over the selected tokens only");
  return b.est;
}

/// One calibration pass: each router's bias set so that `fraction` of the tokens run the MLP.
inline void force_mlp_skip_share(LanguageModel& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  auto& net = dynamic_cast<MlpSkip&>(model);
  for (const auto& t : net.forward(tokens, true).trace) {
    auto bias = net.routers[static_cast<std::size_t>(t.layer)]->bias;  // run iff z + b > 0
    const double b = bias.item<double>();
    bias.fill_(-threshold_for_top(gate_logit(t.gate) - b, share_count(fraction, t.gate.numel())));
  }
}

/// The registry entry: everything the workbench knows about the architecture.
inline ArchitectureEntry mlp_skip_architecture() {
  ArchitectureEntry entry{
      kMlpSkipId,
      "MLP skipping (test-only example)",
      "issue 20's example of an architecture added in its own file",
      "Dense attention; a per-token router lets only the tokens with p > 0.5 run each MLP at inference.",
      transformer_option_schema(),
      check_transformer_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<MlpSkip>(transformer_options_from_json(m, ctx.vocab_size, ctx.context));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) { return read_back(m, transformer_options_table()); };
  entry.price_flops = price_mlp_skip;
  entry.routed_fraction_meaning = "share of tokens running the MLP of each layer (default: 1)";
  entry.color = 8;
  entry.force_routed_share = force_mlp_skip_share;
  return entry;
}

}  // namespace routelab::example
