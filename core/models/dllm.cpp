// D-LLM: decision modules, straight-through Gumbel execution with KV eviction in training, compacted skipping at
// inference, the rate loss, and the registry entry. "official" below means Jyk-122/D-LLM llama/model_train.py.
#include "core/models/dllm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/residual_probe.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {

DecisionModuleImpl::DecisionModuleImpl(std::int64_t n_embd, std::int64_t hidden, double eps) {
  fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(n_embd, hidden).bias(true)));
  norm = register_module("norm", Norm(NormOptions(hidden).kind(NormKind::RMS).eps(eps)));
  fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(hidden, 2).bias(true)));
}

torch::Tensor DecisionModuleImpl::forward(const torch::Tensor& x) {
  const Fp32Router fp32;  // as the official router casts x.float()
  const auto h = torch::silu(norm(linear(x.to(torch::kFloat), fc1)));  // (B, T, hidden)
  return linear(h, fc2);                                                  // (B, T, 2)
}

DLLM::DLLM(TransformerOptions options, DLLMOptions dllm) : TransformerTrunk(std::move(options)), dllm_(std::move(dllm)) {
  routed_ = parse_layer_pattern(dllm_.routed_layers(), options_.n_layer(), "model.routed_layers");
  sizing.resize(static_cast<std::size_t>(options_.n_layer()));
  if (dllm_.reserved_tokens() < 1)
    throw ConfigError("model.reserved_tokens: " + std::to_string(dllm_.reserved_tokens()) + " must be at least 1");
  auto block_list = register_module("blocks", torch::nn::ModuleList());
  auto router_dict = register_module("routers", torch::nn::ModuleDict());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    blocks.push_back(DenseBlock(options_, i));
    block_list->push_back(blocks.back());
    routers.push_back(DecisionModule(nullptr));
    if (!routed_[static_cast<std::size_t>(i)]) continue;
    routers.back() = DecisionModule(options_.n_embd(), dllm_.router_hidden(), options_.norm_eps());
    router_dict->update({{std::to_string(i), routers.back().ptr()}});
  }
  // The decision modules take the trunk's init (N(0, 0.02) matrices, zero biases) rather than PyTorch's default
  // Linear init the official code inherits; only the final bias below is the official one.
  init_weights();
  // Official init of the last decision layer: bias [0.1, 2.0], softmax ~[0.13, 0.87], so training starts by
  // executing nearly everything. It must come after init_weights(), which zeroes biases; the DTRNet port sets it
  // in the constructor and HF post_init() then overwrites it, so there it is most likely lost.
  torch::NoGradGuard no_grad;
  for (auto& router : routers)
    if (router) router->fc2->bias.copy_(torch::tensor({0.1f, 2.0f}));
}

void DLLM::set_progress(double fraction) {
  progress_ = std::clamp(fraction, 0.0, 1.0);
  if (rate_weight_.defined()) rate_weight_.fill_(rate_weight());  // one fill kernel; a captured step reads it
}

torch::Tensor DLLM::rate_weight_on(const torch::Device& device) {
  if (!rate_weight_.defined() || rate_weight_.device() != device)
    rate_weight_ = torch::full({}, rate_weight(), torch::TensorOptions().dtype(torch::kFloat).device(device));
  return rate_weight_;
}

double DLLM::rate_weight() const {
  // Official: λ = sin_anneal(0, epochs, 0, lambda_active, epoch), a quarter sine over the whole run.
  if (dllm_.rate_schedule() == RateSchedule::Constant) return dllm_.rate_coeff();
  return dllm_.rate_coeff() * std::sin(std::numbers::pi / 2.0 * progress_);
}

torch::Tensor DLLM::sample_execute(const torch::Tensor& logits) const {
  // F.gumbel_softmax(hard=True) restricted to the execute column. Written as hard + (soft - soft.detach()) rather
  // than torch's hard - soft.detach() + soft so the forward value is exactly 0 or 1.
  const auto gumbels = -torch::empty_like(logits).exponential_().log();                 // (B, T, 2)
  const auto soft = torch::softmax((logits + gumbels) / dllm_.gumbel_tau(), -1);        // (B, T, 2)
  const auto soft_execute = soft.select(-1, 1);                                         // (B, T)
  const auto hard_execute = soft_execute.gt(soft.select(-1, 0)).to(soft.scalar_type());  // argmax; a tie skips
  return hard_execute + (soft_execute - soft_execute.detach());
}

torch::Tensor DLLM::evicting_layer(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                                   const torch::Tensor& w, double* pairs) {
  // Official: w Block(x) + (1 - w) x with Block including its residual, i.e. x + w f(x).
  const auto f = evicting_update(layer, x, blocks[layer]->norm1->into_matmul(x), positions, w, pairs);
  return torch::addcmul(x, w.unsqueeze(-1).to(x.scalar_type()), f);
}

torch::Tensor DLLM::evicting_update(std::size_t layer, const torch::Tensor& x, const torch::Tensor& n1,
                                    const torch::Tensor& positions, const torch::Tensor& w, double* pairs) {
  auto& block = blocks[layer];
  // q (B, H, T, hd); k, v (B, Hkv, T, hd)
  const auto [q, k, v] = block->attn->project(n1, positions);
  // Fused attention with the eviction in two extra head dimensions on a GPU (flash in bf16, memory-efficient in fp32),
  // the CPU kernel on the CPU (evicting_attention): none holds a (B, H, T, T) tensor; attention dropout needs the
  // materialised one.
  const double dropout = training_dropout();
  torch::Tensor heads;  // (B, H, T, hd)
  if (dropout > 0) {
    const auto H = q.size(1);
    heads = evicting_attention_materialised(q, repeat_kv(k, H / k.size(1)), repeat_kv(v, H / v.size(1)), w,
                                            dllm_.eviction(), dropout);
    if (pairs) *pairs = static_cast<double>(q.size(0)) * static_cast<double>(q.size(2)) * static_cast<double>(q.size(2));
  } else {
    heads = evicting_attention(q, k, v, w, dllm_.eviction(), pairs);
  }
  const auto a = block->attn->output(heads);                          // (B, T, C)
  return a + block->mlp(block->norm2->add_into_matmul(x, a).second);  // (B, T, C)
}

double DLLM::training_dropout() const { return is_training() ? options_.dropout() : 0.0; }

torch::Tensor DLLM::skipping_layer(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                                   const Compaction& executed, double* pairs) {
  if (executed.capacity > 0) {  // packed rows of a sized compaction: the padding rows are written back as x
    const auto rows = gather_packed(x, executed);  // (N, C)
    const auto f = blocks[layer]->update_packed(rows, packed_positions(positions, executed), executed);
    return scatter_packed(x, executed, rows + f);
  }
  if (executed.total == 0 && !executed.padded_sized) return x;
  const auto rows = gather_rows(x, executed);  // (B, K, C); a sized compaction's padding rows are written back as x
  const auto row_positions = compacted_positions(positions, executed);  // (B, K) original positions
  // Compacted attention sees only executed keys: the eviction, at sum_b k_b^2 cost.
  const auto f = blocks[layer]->update(rows, row_positions, &executed, pairs);  // (B, K, C)
  return scatter_rows(x, executed, rows + f);
}

torch::Tensor DLLM::rate_loss(const torch::Tensor& activation, std::int64_t reserved, double target) {
  const auto T = activation.size(1);
  if (T <= reserved) return torch::zeros({}, activation.options());
  return (activation.narrow(1, reserved, T - reserved) - target).abs().mean();
}

LayerTrace DLLM::routed_layer_trace(int layer, const torch::Tensor& p_exec, const torch::Tensor& executed,
                                    const Compaction& counts, double pairs) const {
  const auto B = executed.size(0), T = executed.size(1);
  const auto shape = layer_shape(options_);
  const double total = static_cast<double>(counts.total);
  const double tokens = static_cast<double>(B * T);
  LayerTrace t;
  t.layer = layer;
  t.kind = "dllm";
  t.routed = true;
  t.gate = p_exec.detach().to(torch::kFloat);
  t.decision = executed;
  // Priced as executed. Inference runs the decisions: executed tokens only, compacted attention, over the padded
  // (B, K) rows of the compacted sequences (`pairs`: what the attention kernel computed). Training computes
  // the block for every token (the straight-through estimator needs f(x) of skipped tokens too) and the scores of
  // every key the evicting attention's kernel computed (`pairs` again), masking afterwards: the decisions change
  // nothing, and the trace's host fields follow from the shapes alone.
  const bool full_block = is_training();
  // Training: the flags' share stays on the device until the trace is resolved (nothing read back during the step).
  // Inference: the counts' (a sized compaction's: set by the model's read of its counts).
  if (full_block)
    t.on_device["routed_fraction"] = executed.sum().to(torch::kDouble) / tokens;
  else
    t.routed_fraction = total / tokens;
  const auto executed_rows = full_block ? B * T : static_cast<std::int64_t>(total);
  t.tokens_processed = {{"attn", executed_rows}, {"mlp", executed_rows}, {"router", B * T}};
  const double hidden = static_cast<double>(dllm_.router_hidden());
  const double router = linear_flops(tokens, static_cast<double>(shape.d), hidden) + linear_flops(tokens, hidden, 2.0);
  t.flops = (full_block ? block_flops(tokens, pairs, shape)
                        : total > 0 || counts.padded_sized ? block_flops(counts.padded_rows(), pairs, shape) : 0.0) +
            router;
  t.dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
  t.on_device["mean_p_exec"] = p_exec.mean();
  return t;
}

ModelOutput DLLM::forward(const torch::Tensor& tokens, bool trace) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  const bool training = is_training();
  const auto always = positions.lt(dllm_.reserved_tokens()).unsqueeze(0);  // (1, T): reserved first tokens
  torch::Tensor executed_sum;  // (B, T): sum over the dynamic layers of the execute flag w (training)
  // The last layer's update, added by the next norm's pass as the dense model chains its blocks: a dense layer's
  // MLP update, or in training a dynamic layer's f(x) gated by its flags w (x + w f(x), official w Block(x) +
  // (1 - w) x), both in one fused pass on a GPU.
  torch::Tensor pending, pending_gate;
  ModelOutput out;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const int layer = static_cast<int>(i);
    if (!routed_[i]) {
      auto d = blocks[i]->forward_deferred(x, pending, positions, pending_gate);
      if (i > 0) record_layer_state(d.input);
      x = std::move(d.h);
      pending = std::move(d.m);
      pending_gate = torch::Tensor();
      if (trace) out.trace.push_back(dense_layer_trace(layer, tokens.size(0), tokens.size(1), layer_shape(options_)));
      continue;
    }
    torch::Tensor n1;  // training: the input's norm, from the same pass as the input
    if (training) {
      std::tie(x, n1) = blocks[i]->norm1->add_into_matmul(x, pending, pending_gate);
    } else if (pending.defined()) {
      x = x + pending;  // the skipping form gathers the executed rows of the input itself
    }
    pending = pending_gate = torch::Tensor();
    if (i > 0) record_layer_state(x);
    ROUTELAB_PART("router");  // the decision and its application (the layer's attention, norms and MLP nest inside)
    const auto logits = routers[i]->forward(x);  // (B, T, 2) fp32, on the raw residual (before norm1)
    torch::Tensor p_exec, executed;              // (B, T) float, (B, T) bool
    Compaction counts;                           // of the executed tokens
    double pairs = 0;                            // attention pairs the layer's attention computed
    if (trace || !training) p_exec = torch::softmax(logits.detach(), -1).select(-1, 1);
    if (training) {
      const auto w = sample_execute(logits).masked_fill(always, 1.0);  // (B, T), exactly 0/1
      pending = evicting_update(i, x, n1, positions, w, &pairs);
      pending_gate = w;
      executed_sum = executed_sum.defined() ? executed_sum + w : w;
      if (trace) executed = w.detach().gt(0.5);
    } else {
      executed = execute_rule(p_exec, positions);
      // Sized from earlier forwards where it can be (packed rows in half precision on a GPU, padded rows in fp32):
      // nothing read back here; the model reads every layer's counts once after its last layer.
      counts = sizing[i].compact(executed, x, blocks[i]->attn->head_dim());
      x = skipping_layer(i, x, positions, counts, &pairs);
    }
    if (trace) out.trace.push_back(routed_layer_trace(layer, p_exec, executed, counts, pairs));
  }
  if (!training && DeferredTraceReadback::active() && !trace) {  // untraced, captured as a CUDA graph: read afterwards
    std::vector<DeferredSizing> sized;
    for (auto& own : sizing)
      if (own.counts.defined()) sized.push_back(own.defer(tokens.size(0) * tokens.size(1)));
    defer_settling(std::move(sized), out);
  } else if (!training && !settle_sized_layers(trace ? &out.trace : nullptr, tokens.size(0) * tokens.size(1))) {
    // A sequence executed more tokens than its layer's rows held: the forward runs again with every count read
    // exactly (and every capacity sized afresh from them), so it cannot overflow twice. This attempt's tensors go
    // first.
    x = pending = pending_gate = positions = torch::Tensor();
    out = ModelOutput();
    const ExactRoutedCounts exact;
    return forward(tokens, trace);
  }
  torch::Tensor last;
  out.logits = head(x, pending, last, pending_gate);
  if (trace) resolve_on_device(out);  // one wait for every layer's shares (none under DeferredTraceReadback)
  if (!blocks.empty()) record_layer_state(last);
  out.aux_loss = torch::zeros({}, out.logits.options().dtype(torch::kFloat));
  if (training && executed_sum.defined()) {
    // Official ActiveLoss: per-token mean of w over ALL layers (always-executed ones count 1), minus the reserved
    // first tokens. The official code also masks padding and drops the last position (its inputs are unshifted
    // examples); our inputs are already shifted and unpadded, so every other position counts.
    const auto always_executed = static_cast<double>(std::count(routed_.begin(), routed_.end(), false));
    const auto activation = (executed_sum + always_executed) / static_cast<double>(blocks.size());  // (B, T)
    out.aux_loss =
        rate_weight_on(activation.device()) * rate_loss(activation, dllm_.reserved_tokens(), dllm_.target());
  }
  return out;
}

bool DLLM::settle_sized_layers(std::vector<LayerTrace>* trace, std::int64_t tokens) {
  std::vector<torch::Tensor> counts;
  for (const auto& own : sizing) counts.push_back(own.counts);
  for (const auto& [i, lengths] : read_sized_counts(counts)) {
    if (!sizing[i].settle(lengths, trace ? &trace->at(i) : nullptr, tokens, layer_shape(options_))) {
      logger("core")->debug("D-LLM layer {} executed more tokens than its sized rows held: the forward runs again", i);
      return false;
    }
  }
  return true;
}

torch::Tensor DLLM::executes(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                             torch::Tensor* p_exec) {
  const auto p = torch::softmax(routers[layer]->forward(x).detach(), -1).select(-1, 1);  // (B, T)
  if (p_exec) *p_exec = p;
  return execute_rule(p, positions);
}

torch::Tensor DLLM::execute_rule(const torch::Tensor& p_exec, const torch::Tensor& positions) const {
  return p_exec.ge(dllm_.threshold()).logical_or(positions.lt(dllm_.reserved_tokens()).unsqueeze(0));
}

std::unique_ptr<DecodeState> DLLM::begin_decode(std::int64_t batch) { return new_decode_state(batch); }

torch::Tensor DLLM::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  const bool prefill = n > 1;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto& cache = state.cache(i);
    if (!routed_[i]) {
      x = x + blocks[i]->decode_update(x, positions, cache);
      if (trace) trace->layers.push_back(dense_layer_trace(static_cast<int>(i), B, n, layer_shape(options_)));
      continue;
    }
    torch::Tensor p_exec;                                        // (B, n)
    const auto executed = executes(i, x, positions, &p_exec);    // (B, n)
    const auto count = executed.sum().item<std::int64_t>();
    // Official prefill: every token's keys/values are written, skipped ones masked out as keys; the queries,
    // output projection and MLP run on the executed rows only. A generated token is cached only if executed.
    if (prefill || count > 0) {
      const auto f = blocks[i]->decode_update_rows(x, positions, cache, executed, /*store_skipped=*/prefill);
      x = torch::where(executed.unsqueeze(-1), x + f, x);
    }
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(i);
      t.kind = "dllm";
      t.routed = true;
      t.gate = p_exec;
      t.decision = executed;
      t.routed_fraction = static_cast<double>(count) / static_cast<double>(B * n);
      t.tokens_processed = {{"attn", count}, {"mlp", count}};
      trace->layers.push_back(std::move(t));
    }
  }
  state.advance(n);
  return head(x);
}

const OptionTable<DLLMOptions>& dllm_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<DLLMOptions> t;
    t.value(ROUTELAB_OPTION(routed_layers), T::String,
            "layers with a decision module (after-2: all but the first two, as the official code; or T-D letters, "
            "or indices like 2,3)")
        .value(ROUTELAB_OPTION(router_hidden), T::Int, "decision-module hidden width (official 512)", 1, 1 << 16)
        .value(ROUTELAB_OPTION(reserved_tokens), T::Int,
               "first tokens of every sequence that always execute (official 2)", 1, 1 << 20)
        .value(ROUTELAB_OPTION(target), T::Float,
               "target executed fraction over all layers, the acceleration rate Omega (official 0.5; DTRNet's "
               "matched-FLOPs setting 0.85)",
               0, 1)
        .training_only()
        .value(ROUTELAB_OPTION(rate_coeff), T::Float,
               "maximum weight lambda of the rate loss (official lambda_active 5.0)", 0, 1e4)
        .training_only()
        .choice(ROUTELAB_OPTION(rate_schedule), {"sine", "constant"},
                "sine: lambda ramps as lambda_max sin(pi/2 progress) (official); constant: lambda_max throughout")
        .training_only()
        .read_when_nonzero("rate_coeff")
        .value(ROUTELAB_OPTION(gumbel_tau), T::Float, "Gumbel-softmax temperature in training", 1e-3, 100)
        .training_only()
        .value(ROUTELAB_OPTION(threshold), T::Float,
               "at inference a token executes iff its execute probability reaches this", 0, 1)
        .inference()
        .choice(ROUTELAB_OPTION(eviction), {"multiplicative", "additive"},
                "how skipped tokens are hidden as keys in training; multiplicative: probabilities times the execute "
                "flag, renormalised (official, router gets a gradient); additive: -inf mask (DTRNet port)")
        .training_only();
    return t;
  }();
  return table;
}

namespace {

void check_dllm_options(const nlohmann::json& m, const std::string& path) {
  check_transformer_options(m, path);
  parse_layer_pattern(m.at("routed_layers").get<std::string>(), m.at("n_layer").get<std::int64_t>(),
                      path + ".routed_layers");
  // Without a reserved token a row of the evicting attention can lose every key (NaN under the additive mask).
  if (m.at("reserved_tokens").get<std::int64_t>() < 1)
    throw ConfigError(path + ".reserved_tokens: " + m.at("reserved_tokens").dump() + " must be at least 1");
}

/// One calibration pass (ArchitectureEntry::force_routed_share): each decision module's execute bias set from one
/// traced forward's gates so that `fraction` of the tokens execute the block.
void force_dllm_share(LanguageModel& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  auto& net = dynamic_cast<DLLM&>(model);
  for (const auto& t : net.forward(tokens, true).trace) {
    if (!t.routed || !t.gate.defined()) continue;
    const auto& bias = net.routers[static_cast<std::size_t>(t.layer)]->fc2->bias;  // [skip, execute]
    force_two_way_bias(bias, 1, t.gate, share_count(fraction, t.gate.numel()));
  }
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_dllm(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto& m = in.model;
  const auto routed = parse_layer_pattern(m.at("routed_layers").get<std::string>(), t.n_layer(), "model.routed_layers");
  const auto f = layer_fractions(in, routed, m.at("target").get<double>(), 0.0, 1.0);
  const double hidden = static_cast<double>(m.at("router_hidden").get<std::int64_t>());
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d);
  b.layers(routed, f, "dllm", s, [&](int i, LayerFlops& l) {
    FlopsBuilder::part(l, "router", linear_flops(b.N, d, hidden) + linear_flops(b.N, hidden, 2.0));
    b.compacted_block(l, f[static_cast<std::size_t>(i)], s);
  });
  b.est.notes.push_back("inference form: executed tokens run the block compacted (skipped keys evicted, O(k^2)); "
                        "the training form runs every token");
  return b.est;
}

}  // namespace

// No kv_entries rule: the prompt pass writes every slot's keys and values (the skipped ones masked out as keys), so
// a D-LLM cache is dense-sized after a prompt, as DTRNet reports; only generated tokens are cached when executed.
ArchitectureEntry dllm_architecture() {
  ArchitectureEntry entry{
      "dllm",
      "D-LLM",
      "Jiang et al. 2024 (baseline of DTRNet)",
      "Token-choice layer skipping: a decision module before each dynamic layer lets every token execute or skip "
      "the whole block, skipped tokens are evicted as keys, and a rate loss steers the executed fraction to a target.",
      schema_of(transformer_options_table(), dllm_options_table()),
      check_dllm_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<DLLM>(transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                      dllm_options_table().read(m));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), dllm_options_table());
  };
  entry.force_routed_share = force_dllm_share;
  entry.price_flops = price_dllm;
  entry.regulariser_option = "rate_coeff";
  // Training computes every block for every token (the flags evict keys and gate updates): fixed shapes, the flags'
  // shares left on the device (LayerTrace::on_device) and the rate loss's λ read from a device tensor that
  // set_progress rewrites, so the step can be captured once and replayed.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.routed_fraction_meaning =
      "share of tokens that execute each routed block (default: model.target)";
  entry.color = 2;
  return entry;
}

}  // namespace routelab
