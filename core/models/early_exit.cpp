// Early exit: tied exit heads after every block, confidence-based exiting with state copying at inference,
// its traces (active share, the FLOPs really needed, α and Δ as TSA) and the registry entry.
#include "core/models/early_exit.h"

#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/tsa.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

double early_exit_block_flops(std::int64_t seq, const std::vector<std::int64_t>& active, const LayerShape& s) {
  double n = 0, scores = 0;
  for (const auto a : active) {
    n += static_cast<double>(a);
    scores += static_cast<double>(a) * static_cast<double>(seq);  // active queries over every key
  }
  const double all = static_cast<double>(active.size()) * static_cast<double>(seq);
  return qkv_flops(n, s) + linear_flops(all - n, static_cast<double>(s.d), 2.0 * static_cast<double>(s.d_kv)) +
         attention_core_flops(scores, s) + out_proj_flops(n, s) + mlp_flops(n, s);
}

EarlyExitTransformer::EarlyExitTransformer(TransformerOptions transformer, EarlyExitOptions options)
    : TransformerTrunk(std::move(transformer)), exit_options_(std::move(options)) {
  if (options_.n_layer() < 2)
    throw ConfigError("model.n_layer: early exit needs at least 2 layers (an exit before the last block), got " +
                      std::to_string(options_.n_layer()));
  auto block_list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    blocks.push_back(DenseBlock(options_, i));
    block_list->push_back(blocks.back());
  }
  // Each earlier exit gets its own final norm by default: the residual stream of a shallow block has other
  // statistics than the last one's, and the head's projection is the shared (tied) embedding. The paper says
  // only "tied embedding output heads"; shared_exit_norm gives the variant that reuses final_norm.
  if (!exit_options_.shared_exit_norm()) {
    auto norm_list = register_module("exit_norms", torch::nn::ModuleList());
    for (std::int64_t l = 0; l + 1 < options_.n_layer(); ++l) {
      exit_norms.push_back(Norm(NormOptions(options_.n_embd())
                                    .kind(options_.style() == ModelStyle::GPT2 ? NormKind::Layer : NormKind::RMS)
                                    .eps(options_.norm_eps())
                                    .bias(options_.bias())));
      norm_list->push_back(exit_norms.back());
    }
  }
  init_weights();
}

torch::Tensor EarlyExitTransformer::exit_head(std::size_t l, const torch::Tensor& x) {
  if (l + 1 == blocks.size()) return head(x);
  const auto h = exit_options_.shared_exit_norm() ? final_norm(x) : exit_norms[l](x);
  return vocab_logits(h, options_.tie_weights() ? tok_emb->weight : lm_head->weight);  // (B, T, V)
}

ModelOutput EarlyExitTransformer::forward(const torch::Tensor& tokens, bool trace) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  const auto B = tokens.size(0), T = tokens.size(1);
  const auto L = blocks.size();
  const auto shape = layer_shape(options_);
  const double all_tokens = static_cast<double>(B * T), d = static_cast<double>(shape.d);
  const double V = static_cast<double>(options_.vocab_size());
  const bool exiting = this->exiting();
  const double tau = exit_options_.exit_threshold();
  const auto on = torch::TensorOptions().device(tokens.device());
  ModelOutput out;

  auto active = torch::ones({B, T}, on.dtype(torch::kBool));  // (B, T): not exited yet
  auto exit_layer = torch::full({B, T}, static_cast<std::int64_t>(L - 1), on.dtype(torch::kLong));
  torch::Tensor logits;  // (B, T, V) while exiting: the head each token exited at, so far
  std::vector<double> active_shares;  // blocks 1..L-1
  for (std::size_t l = 0; l < L; ++l) {
    auto& block = blocks[l];
    LayerTrace layer_trace;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(B), T);  // active tokens per sequence
    if (trace && exiting) {
      const auto c = to_host(active.sum(1), torch::kLong);
      counts.assign(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + B);
    }
    if (l == 0 || !exiting) {
      x = block->forward(x, positions);  // the stem, or every token (training / exiting disabled)
    } else {
      // State copying: the block runs over the whole sequence so that active queries read the exited tokens'
      // frozen states as keys and values; exited tokens themselves keep their state.
      const auto a = block->attn(block->norm1->into_matmul(x), positions);  // (B, T, C)
      const auto [h, n2] = block->norm2->add_into_matmul(x, a);
      const auto m = block->mlp(n2);
      if (residual_probe_active()) {
        record_residual(block->layer_index, "attn", x, a, active);
        record_residual(block->layer_index, "mlp", h, m, active);
      }
      x = torch::where(active.unsqueeze(-1), h + m, x);
    }
    record_layer_state(x);
    double active_count = 0;
    for (const auto c : counts) active_count += static_cast<double>(c);
    if (trace) {
      if (l == 0) {
        layer_trace = dense_layer_trace(0, B, T, shape);
      } else {
        layer_trace.layer = static_cast<int>(l);
        layer_trace.kind = "early-exit";
        layer_trace.routed = true;
        layer_trace.gate = active.to(torch::kFloat);  // exiting is a hard decision: 1 = still active
        layer_trace.decision = active;
        layer_trace.routed_fraction = active_count / all_tokens;
        layer_trace.tokens_processed = {{"attn", static_cast<std::int64_t>(active_count)},
                                        {"mlp", static_cast<std::int64_t>(active_count)},
                                        {"kv", B * T}};
        layer_trace.flops = early_exit_block_flops(T, counts, shape);
        layer_trace.dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
        active_shares.push_back(layer_trace.routed_fraction);
      }
    }

    const bool last = l + 1 == L;
    torch::Tensor head_logits;  // (B, T, V)
    if (last) {
      head_logits = head(x);
      logits = logits.defined() ? torch::where(active.unsqueeze(-1), head_logits, logits) : head_logits;
    } else if (is_training()) {
      head_logits = exit_head(l, x);
      out.exit_logits.push_back(head_logits);
    } else if (exiting) {
      head_logits = exit_head(l, x);
      const auto confidence = torch::softmax(head_logits.detach().to(torch::kFloat), -1).amax(-1);  // (B, T)
      const auto exits = active.logical_and(confidence.ge(tau));
      logits = logits.defined() ? torch::where(exits.unsqueeze(-1), head_logits, logits) : head_logits;
      exit_layer = torch::where(exits, torch::full_like(exit_layer, static_cast<std::int64_t>(l)), exit_layer);
      if (trace) layer_trace.on_device["exit_share"] = exits.sum().to(torch::kDouble) / all_tokens;
      active = active.logical_and(exits.logical_not());
    }
    if (trace) {
      if (head_logits.defined()) {
        // Intermediate heads are real cost (training, or deciding exits); the last head is any model's.
        const double head_flops = last ? 0.0 : linear_flops(active_count, d, V);
        layer_trace.flops += head_flops;
        layer_trace.stats["exit_head_flops"] = head_flops;
        const auto confidence = torch::softmax(head_logits.detach().to(torch::kFloat), -1).amax(-1);  // (B, T)
        // Over the tokens the head was run for; left on the device until the trace is resolved.
        layer_trace.on_device["head_confidence"] =
            layer_trace.decision.defined()
                ? (confidence * layer_trace.decision).sum() / layer_trace.decision.sum()  // NaN where none ran
                : confidence.mean();
      }
      out.trace.push_back(std::move(layer_trace));
    }
  }
  out.logits = logits;
  out.aux_loss = torch::zeros({}, out.logits.options().dtype(torch::kFloat));
  if (trace) {
    const auto tlops = tlops_from_active(active_shares);
    out.stats["alpha"] = tlops.alpha;  // mean active share of the blocks after the stem
    out.stats["tlops_saved"] = tlops.saved;
    out.token_data["exit_layer"] = exit_layer;
    resolve_on_device(out);
  }
  return out;
}

std::unique_ptr<DecodeState> EarlyExitTransformer::begin_decode(std::int64_t batch) { return new_decode_state(batch); }

torch::Tensor EarlyExitTransformer::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  const auto L = blocks.size();
  const bool exiting = !is_training() && exit_options_.exit_threshold() < 1.0;
  const double tau = exit_options_.exit_threshold();
  auto active = torch::ones({B, n}, tokens.options().dtype(torch::kBool));
  auto exit_layer = torch::full({B, n}, static_cast<std::int64_t>(L - 1), tokens.options().dtype(torch::kLong));
  torch::Tensor logits;
  for (std::size_t l = 0; l < L; ++l) {
    auto& block = blocks[l];
    const auto ran = active;
    if (l == 0 || !exiting) {
      x = x + block->decode_update(x, positions, state.cache(l));
    } else {
      // Every token writes keys/values (an exited one from its frozen state); only active ones take the update.
      const auto f = block->decode_update(x, positions, state.cache(l));
      x = torch::where(active.unsqueeze(-1), x + f, x);
    }
    if (l + 1 == L) {
      const auto head_logits = head(x);
      logits = logits.defined() ? torch::where(active.unsqueeze(-1), head_logits, logits) : head_logits;
    } else if (exiting) {
      const auto head_logits = exit_head(l, x);
      const auto confidence = torch::softmax(head_logits.to(torch::kFloat), -1).amax(-1);  // (B, n)
      const auto exits = active.logical_and(confidence.ge(tau));
      logits = logits.defined() ? torch::where(exits.unsqueeze(-1), head_logits, logits) : head_logits;
      exit_layer = torch::where(exits, torch::full_like(exit_layer, static_cast<std::int64_t>(l)), exit_layer);
      active = active.logical_and(exits.logical_not());
    }
    if (trace) {
      if (l == 0) {
        trace->layers.push_back(dense_layer_trace(0, B, n, layer_shape(options_)));
      } else {
        LayerTrace t;
        t.layer = static_cast<int>(l);
        t.kind = "early-exit";
        t.routed = true;
        t.gate = ran.to(torch::kFloat);
        t.decision = ran;
        const auto count = ran.sum().item<std::int64_t>();
        t.routed_fraction = static_cast<double>(count) / static_cast<double>(B * n);
        t.tokens_processed = {{"attn", count}, {"mlp", count}, {"kv", B * n}};
        trace->layers.push_back(std::move(t));
      }
    }
  }
  if (trace) trace->token_data["exit_layer"] = exit_layer;
  state.advance(n);
  return logits;
}

std::string EarlyExitTransformer::describe() const {
  std::ostringstream out;
  out << LanguageModel::describe() << ", exit threshold ";
  if (exit_options_.exit_threshold() >= 1.0)
    out << "off";
  else
    out << exit_options_.exit_threshold();
  if (exit_options_.shared_exit_norm()) out << ", shared exit norm";
  return out.str();
}

const OptionTable<EarlyExitOptions>& early_exit_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<EarlyExitOptions> t;
    t.value(ROUTELAB_OPTION(exit_threshold), T::Float,
            "eval-only confidence threshold tau (no parameters): a token exits after the first block whose head's "
            "max softmax probability is >= tau; 1 disables exiting (the full model)",
            0.0, 1.0)
        .inference()
        .value(ROUTELAB_OPTION(shared_exit_norm), T::Bool,
               "every exit head reuses the final norm (default: each earlier exit has its own norm; the projection "
               "is always the tied embedding)");
    return t;
  }();
  return table;
}

namespace {

void check_early_exit_options(const nlohmann::json& m, const std::string& path) {
  check_transformer_options(m, path);
  const auto n_layer = m.at("n_layer").get<std::int64_t>();
  if (n_layer < 2)
    throw ConfigError(path + ".n_layer: early exit needs at least 2 layers (an exit before the last block), got " +
                      std::to_string(n_layer));
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_early_exit(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto o = early_exit_options_table().read(in.model);
  const bool exiting = o.exit_threshold() < 1.0;
  std::vector<bool> routed(static_cast<std::size_t>(t.n_layer()), true);
  routed[0] = false;
  const auto f = layer_fractions(in, routed, 1.0, 0.0, 1.0);
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d);
  for (int i = 0; i < t.n_layer(); ++i) {
    auto& l = b.add(i, i == 0 ? "dense" : "early-exit", i > 0, f[i], s);
    // State copying: the block runs over every token (exited ones keep their state afterwards).
    FlopsBuilder::part(l, "attn_qkv", qkv_flops(b.N, s));
    FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));
    FlopsBuilder::part(l, "mlp", mlp_flops(b.N, s));
    if (exiting && i + 1 < t.n_layer()) FlopsBuilder::part(l, "exit_head", linear_flops(b.N, d, in.vocab));
  }
  b.est.notes.push_back("the eval forward runs every block over every token (exited tokens' states are copied, "
                        "not skipped) and, when exiting (exit_threshold < 1), every intermediate head over every "
                        "token: the active fractions change no executed FLOPs. LayerTrace::flops instead prices "
                        "what an implementation skipping exited tokens would need (early_exit_block_flops)");
  return b.est;
}

}  // namespace

ArchitectureEntry early_exit_architecture() {
  ArchitectureEntry entry{
      "early-exit",
      "Early exit",
      "Elbayad et al. 2020 (baseline of TSA §3.5)",
      "A dense trunk with a tied output head after every block, trained on the mean cross-entropy of all heads; "
      "at inference a token exits after the first block whose head's max softmax probability reaches "
      "exit_threshold, and deeper blocks read its frozen state as keys and values.",
      schema_of(transformer_options_table(), early_exit_options_table()),
      check_early_exit_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<EarlyExitTransformer>(transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                                      early_exit_options_table().read(m));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), early_exit_options_table());
  };
  entry.price_flops = price_early_exit;
  // The threshold is eval-only: TSA sweeps it on a trained checkpoint (Figure 3, right); 1 is the full model.
  // Training runs every block and every exit head for every token (exits decide at inference only): fixed shapes, the
  // heads' confidences left on the device (LayerTrace::on_device), so the step can be captured and replayed.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.eval_sweep = {"exit_threshold", {0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0}};
  entry.routed_fraction_meaning =
      "share of tokens still active (executed FLOPs do not depend on it)";
  entry.color = 4;
  return entry;
}

}  // namespace routelab
