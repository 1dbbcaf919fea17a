// DTRNet layer and model (DTRNet "DTRNet Layer Structure", "Training and Regularization", App. A1-A5).
// Where the paper is silent the reference code (architectures.md 1) decides; each such place says so.
#include "core/models/dtrnet.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/residual_probe.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {

DTRNetLayerImpl::DTRNetLayerImpl(const TransformerOptions& o, const DTRNetOptions& options_)
    : options(options_), shape(layer_shape(o)) {
  const DenseBlock prototype(o, 0);  // the same sub-modules as a dense layer, so shapes and init match
  norm1 = register_module("norm1", prototype->norm1);
  norm2 = register_module("norm2", prototype->norm2);
  attn = register_module("attn", prototype->attn);
  mlp = register_module("mlp", prototype->mlp);
  const auto d = o.n_embd();
  router_in = register_module("router_in", torch::nn::Linear(torch::nn::LinearOptions(d, d / 2).bias(true)));
  router_out = register_module("router_out", torch::nn::Linear(torch::nn::LinearOptions(d / 2, 2).bias(true)));
  if (options.routing() == DtrRouting::Expert) predictor = register_module("predictor", CausalPredictor(d));
}

torch::Tensor DTRNetLayerImpl::router_logits(const torch::Tensor& x) {
  // Eq. 1 on the raw residual stream (the router reads x before input_layernorm; architectures.md 1.2).
  const Fp32Router fp32;
  return linear(torch::silu(linear(x.to(torch::kFloat), router_in)), router_out);  // (B, T, 2)
}

DTRNetLayerImpl::Output DTRNetLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& positions,
                                                 const torch::Tensor& forced_decision) {
  auto out = forward_deferred(x, {}, positions, forced_decision);
  out.y = out.h + out.m;
  return out;
}

DTRNetLayerImpl::Output DTRNetLayerImpl::forward_deferred(const torch::Tensor& x_prev, const torch::Tensor& pending,
                                                          const torch::Tensor& positions,
                                                          const torch::Tensor& forced_decision) {
  const auto B = x_prev.size(0), T = x_prev.size(1);
  Output out;
  // The input and its norm in one pass; both paths read the normalised input, through projections.
  const auto [x, n] = norm1->add_into_matmul(x_prev, pending);
  out.input = x;
  std::optional<PartScope> router_part(std::in_place, ROUTELAB_PART_PREFIX "router");  // the router and its rule
  const auto logits = router_logits(x);            // (B, T, 2)
  const auto G = torch::softmax(logits, -1);       // (B, T, 2): [g_attn, g_bypass]
  out.gate_attn = G.select(-1, 0);                 // (B, T)
  const auto gate_bypass = G.select(-1, 1);

  std::optional<Compaction> topk_compaction;  // expert choice in training
  switch (forced_decision.defined() ? DtrRouting::Skip : options.routing()) {
    case DtrRouting::Token:  // Eq. 2, the same rule in training and inference
      out.decision = logits.select(-1, 0) > logits.select(-1, 1);
      break;
    case DtrRouting::Expert: {
      // Top-k over a sequence sees the future, so inference uses a causal predictor trained on the top-k
      // membership (as MoD does); the paper (App. A1) notes the train/inference mismatch of this variant.
      out.predictor_logits = predictor(x);  // (B, T)
      const auto k = static_cast<std::int64_t>(options.capacity() * T);
      if (is_training()) {
        auto routing = topk_routing(out.gate_attn.detach(), k);
        out.topk = out.decision = routing.decision;
        topk_compaction = std::move(routing.compaction);
        out.predictor_loss = CausalPredictorImpl::loss(out.predictor_logits, out.topk);
      } else {
        out.topk = topk_decision(out.gate_attn.detach(), k);
        out.decision = out.predictor_logits > 0;
      }
      break;
    }
    case DtrRouting::Skip:  // Table 4: routers configured to skip every token
      out.decision = forced_decision.defined() ? forced_decision : torch::zeros({B, T}, x.options().dtype(torch::kBool));
      break;
  }

  router_part.reset();
  torch::Tensor update;     // (B, T, C) before the gate
  if (options.attention() == DtrAttention::Masked) {
    const auto counts = count_routed(out.decision);
    out.routed = counts.total;
    update = attend_masked(n, positions, out.decision);
  } else {
    update = attend_compact(n, positions, out.decision, out, topk_compaction ? &*topk_compaction : nullptr);
  }
  // Eq. 3 and 5: the path's output is scaled by the router score of the path the token took; the scaled add and
  // the next norm are one pass where the fused kernels run.
  const auto gate = ROUTELAB_IN_PART(
      "router", torch::where(out.decision, out.gate_attn, gate_bypass).to(x.scalar_type()).contiguous());  // (B, T)
  const auto [h, n2] = norm2->add_into_matmul(x, update, gate);
  out.h = h;
  out.m = mlp(n2);  // the shared MLP for every token
  if (residual_probe_active()) {
    record_residual(layer_index, "attn", x, gate.unsqueeze(-1) * update);
    record_residual(layer_index, "mlp", h, out.m);
  }
  return out;
}

DTRNetLayerImpl::Output DTRNetLayerImpl::decode(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache) {
  const auto B = x.size(0), n = x.size(1), C = x.size(2);
  const auto H = attn->options.n_head(), Hkv = attn->kv_heads(), hd = attn->head_dim();
  Output out;
  const auto logits = router_logits(x);       // (B, n, 2)
  const auto G = torch::softmax(logits, -1);  // (B, n, 2)
  out.gate_attn = G.select(-1, 0);
  const auto gate_bypass = G.select(-1, 1);
  switch (options.routing()) {
    case DtrRouting::Token:
      out.decision = logits.select(-1, 0) > logits.select(-1, 1);
      break;
    case DtrRouting::Expert:  // the causal predictor decides at inference (a top-k would read the future)
      out.predictor_logits = predictor(x);
      out.decision = out.predictor_logits > 0;
      break;
    case DtrRouting::Skip:
      out.decision = torch::zeros({B, n}, x.options().dtype(torch::kBool));
      break;
  }
  out.routed = out.decision.sum().item<std::int64_t>();  // one host sync: attention runs only if a token routes
  const auto nx = norm1(x);                               // (B, n, C)
  const bool vo = options.bypass() == DtrBypass::ValueOutput;
  const auto& w = attn->qkv->weight;
  const auto& b = attn->qkv->bias;
  torch::Tensor heads;  // (B, n, C) before W_O
  if (vo) {             // bypass: the token's own value, KV heads repeated as repeat_kv
    const auto v_all = at::linear(nx, w.narrow(0, (H + Hkv) * hd, Hkv * hd),
                                  b.defined() ? c10::optional<at::Tensor>(b.narrow(0, (H + Hkv) * hd, Hkv * hd)) : c10::nullopt);
    heads = v_all.view({B, n, Hkv, 1, hd}).expand({B, n, Hkv, H / Hkv, hd}).reshape({B, n, C});
  }
  torch::Tensor routed_heads;  // (B, n, C): attention of the routed rows over the cached routed tokens
  if (out.routed > 0 && n == 1) {  // only routed tokens occupy the layer's cache
    routed_heads = attn->cached_heads(nx, positions, cache, out.decision).transpose(1, 2).reshape({B, n, C});
  } else if (out.routed > 0) {
    // Prefill: Q and K (and V) are projected and attention runs for the routed rows only, gathered into
    // compacted sequences at their original positions, as in the training forward.
    const auto c = compact(out.decision);
    const auto heads_rows = attn->cached_heads(gather_rows(nx, c), compacted_positions(positions, c), cache, c.valid);
    routed_heads = scatter_rows(torch::zeros_like(x), c, heads_rows.transpose(1, 2).reshape({B, c.max_len, C}));
  }
  const auto routed3 = out.decision.unsqueeze(-1);
  torch::Tensor update;
  if (vo) {
    if (routed_heads.defined()) heads = torch::where(routed3, routed_heads, heads);
    update = linear(heads, attn->proj);
  } else {
    update = routed_heads.defined() ? torch::where(routed3, linear(routed_heads, attn->proj), torch::zeros_like(x))
                                    : torch::zeros_like(x);
  }
  const auto gate = torch::where(out.decision, out.gate_attn, gate_bypass).unsqueeze(-1);  // (B, n, 1)
  const auto h = x + gate.to(x.scalar_type()) * update;
  out.y = h + mlp(norm2(h));
  return out;
}

torch::Tensor DTRNetLayerImpl::attend_compact(const torch::Tensor& n, const torch::Tensor& positions,
                                              const torch::Tensor& decision_in, Output& out,
                                              const Compaction* known) {
  const auto B = n.size(0), T = n.size(1), C = n.size(2);
  const auto H = attn->options.n_head(), Hkv = attn->kv_heads(), hd = attn->head_dim();
  auto decision = decision_in;
  // Packed (where the attention takes packed rows: a GPU in half precision): the routed rows are gathered without
  // padding and stay so through the projections, rotary embedding and attention, and are put back with one copy.
  const bool pack = packed_rows_active(n, hd);
  const auto compaction = [&](const torch::Tensor& d) {  // the attention reads the lengths: no valid mask
    return pack ? compact_packed(d) : compact(d, 0, /*with_valid=*/false);
  };
  // Sized (packed rows, a capacity for this batch size from earlier forwards): nothing is read back here; the model
  // reads every layer's counts once after its last layer.
  const auto now = sizing();
  const bool sized = pack && !known && now.capacity > 0 && now.tokens == B * T && sized_compaction_active();
  // Padded sized (unpacked rows where the attention runs the padded rows anyway: a GPU in fp32), likewise sized rows a
  // sequence, outside a captured step (whose form is the packed one).
  const bool padded = !pack && !known && now.capacity > 0 && now.tokens == B * T && padded_sized_active(n, hd) &&
                      !DeferredTraceReadback::active();
  if (sized) sized_rows_ = sized_rows(now.capacity, B * T, decision.device(), sized_rows_);
  auto c = known    ? *known
           : sized  ? compact_sized(decision, sized_rows_)
           : padded ? compact_sized_padded(decision, now.capacity)
                    : compaction(decision);
  if (!sized && !padded && c.total == 0 && is_training() && options.routing() == DtrRouting::Token &&
      options.fallback_fraction() > 0) {
    // Reference code (paper silent): a batch that routes nothing trains a random 15% of its tokens through
    // attention so the attention weights keep receiving gradient. Inference allows an all-bypass layer.
    const auto picked = std::max<std::int64_t>(1, static_cast<std::int64_t>(options.fallback_fraction() * B * T));
    const auto chosen = torch::randperm(B * T, decision.options().dtype(torch::kLong)).narrow(0, 0, picked);
    decision = torch::zeros({B * T}, decision.options()).index_fill(0, chosen, true).view({B, T});
    c = compaction(decision);
  }
  out.decision = decision;
  out.packed = pack;
  out.counts = c.counts;
  if (sized) {
    out.starts = c.starts;
    out.sized_rows = sized_rows_;
  }
  out.routed = sized || padded ? -1 : c.total;
  out.padded_len = padded ? c.max_len : 0;
  if (!pack && !padded && !c.lengths.empty()) out.longest = *std::max_element(c.lengths.begin(), c.lengths.end());
  const bool packed = pack && (sized || c.max_len > 0);
  const auto N = sized ? c.capacity : c.total;  // the packed rows
  out.rows = packed ? static_cast<double>(N) : c.padded_rows();

  const auto& w = attn->qkv->weight;  // rows [W_Q; W_K; W_V]
  const auto& b = attn->qkv->bias;
  const auto rows = [&](std::int64_t from, std::int64_t count) {
    return std::make_pair(w.narrow(0, from, count),
                          b.defined() ? c10::optional<at::Tensor>(b.narrow(0, from, count)) : c10::nullopt);
  };
  const auto [w_qk, b_qk] = rows(0, (H + Hkv) * hd);
  const auto [w_v, b_v] = rows((H + Hkv) * hd, Hkv * hd);
  const bool vo = options.bypass() == DtrBypass::ValueOutput;

  // Bypass heads: a token attending only to itself receives its own value, each KV head repeated for the query
  // heads it serves exactly as repeat_kv does (query head h reads KV head h / n_rep).
  torch::Tensor v_all;  // (B, T, Hkv hd)
  if (vo) v_all = ROUTELAB_IN_PART("bypass", at::linear(n, w_v, b_v));
  torch::Tensor routed_heads;  // (B, K, C), or (total, C) packed
  if (packed) {
    ROUTELAB_PART("attention");
    const auto n_r = gather_packed(n, c);           // (N, C)
    const auto qk = at::linear(n_r, w_qk, b_qk);    // (N, (H + Hkv) hd)
    // Each row is a sequence of one token to the rotary kernel ((N, heads, 1, hd) at positions (N, 1)), so that its
    // contiguous output is already the (N, heads, hd) layout of packed attention.
    auto q = qk.narrow(-1, 0, H * hd).view({N, H, 1, hd});
    auto k = qk.narrow(-1, H * hd, Hkv * hd).view({N, Hkv, 1, hd});
    if (attn->rope.defined()) std::tie(q, k) = attn->rope.apply(q, k, packed_positions(positions, c).view({N, 1}));
    const auto v_r = vo ? gather_packed(v_all, c) : at::linear(n_r, w_v, b_v);  // (N, Hkv hd)
    const auto qp = q.view({N, H, hd}), kp = k.view({N, Hkv, hd}), vp = v_r.view({N, Hkv, hd});
    routed_heads = (sized ? packed_causal_attention(qp, kp, vp, c.starts, c.longest, attn->options.dropout(),
                                                    is_training())
                          : packed_causal_attention(qp, kp, vp, c.lengths, attn->options.dropout(), is_training(),
                                                    &out.pairs))
                       .reshape({N, C});
  } else if (c.max_len > 0) {
    ROUTELAB_PART("attention");
    const auto K = c.max_len;
    const auto n_r = gather_rows(n, c);                    // (B, K, C)
    const auto qk = at::linear(n_r, w_qk, b_qk);           // (B, K, (H + Hkv) hd)
    auto q = qk.narrow(-1, 0, H * hd).view({B, K, H, hd}).transpose(1, 2);           // (B, H, K, hd)
    auto k = qk.narrow(-1, H * hd, Hkv * hd).view({B, K, Hkv, hd}).transpose(1, 2);  // (B, Hkv, K, hd)
    const auto v_r = vo ? gather_rows(v_all, c) : at::linear(n_r, w_v, b_v);         // (B, K, Hkv hd)
    const auto v = v_r.view({B, K, Hkv, hd}).transpose(1, 2);                         // (B, Hkv, K, hd)
    if (attn->rope.defined()) std::tie(q, k) = attn->rope.apply(q, k, compacted_positions(positions, c));
    routed_heads = causal_attention(q, k, v, attn->options.dropout(), is_training(), c.lengths, &out.pairs)
                       .transpose(1, 2)
                       .reshape({B, K, C});  // (B, K, C)
  }
  const auto put = [&](const torch::Tensor& base, const torch::Tensor& rows) {  // the routed rows into base
    return packed ? scatter_packed(base, c, rows) : scatter_rows(base, c, rows);
  };
  if (vo && Hkv < H) {
    // Grouped heads: W_O applied to a KV head repeated n_rep times is W_O with those heads' column blocks summed, so
    // bypass tokens take a (Hkv hd -> C) product of their values (no repeated heads built) and only the routed rows
    // the full W_O. The bypass product also runs over routed rows, whose results are then replaced (priced so).
    const auto& w_o = attn->proj->weight;  // (C, H hd)
    const auto& b_o = attn->proj->bias;
    const auto folded = ROUTELAB_IN_PART("bypass", w_o.view({C, Hkv, H / Hkv, hd}).sum(2).reshape({C, Hkv * hd}));
    const auto bypass = ROUTELAB_IN_PART(
        "bypass", at::linear(v_all, folded, b_o.defined() ? c10::optional<at::Tensor>(b_o) : c10::nullopt));
    return routed_heads.defined() ? put(bypass, ROUTELAB_IN_PART("attention", linear(routed_heads, attn->proj)))
                                  : bypass;
  }
  if (vo) {
    auto heads = v_all;  // (B, T, C): with as many KV heads as query heads, each token's own value is its heads
    if (routed_heads.defined()) heads = put(heads, routed_heads);
    return ROUTELAB_IN_PART("bypass", linear(heads, attn->proj));  // (B, T, C): one W_O over every token
  }
  // w/o-VO: only routed tokens are projected; bypass tokens get no update.
  const auto zeros = torch::zeros({B, T, C}, n.options());
  return routed_heads.defined() ? put(zeros, ROUTELAB_IN_PART("attention", linear(routed_heads, attn->proj))) : zeros;
}

torch::Tensor DTRNetLayerImpl::attend_masked(const torch::Tensor& n, const torch::Tensor& positions,
                                             const torch::Tensor& decision) {
  // The sparse-attention equivalence (Eq. 6) as a dense mask: allowed(q, k) = (q == k) or (both routed, k <= q).
  const auto T = n.size(1);
  const auto [q, k, v] = attn->project(n, positions);
  const auto eye = torch::eye(T, decision.options()).unsqueeze(0);                       // (1, T, T)
  const auto causal = torch::ones({T, T}, decision.options()).tril().unsqueeze(0);       // (1, T, T)
  const auto both = decision.unsqueeze(2).logical_and(decision.unsqueeze(1));          // (B, T, T)
  const auto allowed = eye.logical_or(both.logical_and(causal));
  auto update = attn->output(masked_attention(q, k, v, allowed));  // (B, T, C)
  if (options.bypass() == DtrBypass::None) update = update * decision.unsqueeze(-1).to(update.scalar_type());
  return update;
}

double DTRNetLayerImpl::flops(std::int64_t batch, std::int64_t seq, const Output& out) const {
  const double all = static_cast<double>(batch * seq), k = out.rows;
  const auto& s = shape;
  double f = linear_flops(all, s.d, s.d / 2) + linear_flops(all, s.d / 2, 2.0) + mlp_flops(all, s);
  if (options.routing() == DtrRouting::Expert) f += linear_flops(all, s.d, 1);
  if (options.attention() == DtrAttention::Masked)  // the oracle computes every pair
    return f + dense_layer_flops(static_cast<double>(batch), static_cast<double>(seq), s) - mlp_flops(all, s);
  f += q_k_flops(k, s) + attention_core_flops(out.pairs, s);
  if (options.bypass() == DtrBypass::ValueOutput && s.d_kv < s.d)  // grouped heads: the folded W_O (attend_compact)
    return f + v_flops(all, s) + linear_flops(all, s.d_kv, s.d) + out_proj_flops(k, s);
  if (options.bypass() == DtrBypass::ValueOutput) return f + v_flops(all, s) + out_proj_flops(all, s);
  return f + v_flops(k, s) + out_proj_flops(k, s);
}

DTRNet::DTRNet(TransformerOptions model, DTRNetOptions options) : TransformerTrunk(std::move(model)), dtr_(std::move(options)) {
  pattern_ = parse_layer_pattern(dtr_.routed_layers(), options_.n_layer(), "model.routed_layers");
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    if (pattern_[static_cast<std::size_t>(i)]) {
      routed.push_back(DTRNetLayer(options_, dtr_));
      routed.back()->layer_index = static_cast<int>(i);
      dense.push_back(nullptr);
      list->push_back(routed.back());
    } else {
      routed.push_back(nullptr);
      dense.push_back(DenseBlock(options_, i));
      list->push_back(dense.back());
    }
  }
  init_weights();  // routers included: N(0, 0.02), zero bias, as the reference's HF init (architectures.md 1.1)
}

ModelOutput DTRNet::forward(const torch::Tensor& tokens, bool trace) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  const auto B = tokens.size(0), T = tokens.size(1);
  const auto shape = layer_shape(options_);
  ModelOutput out;
  std::vector<std::optional<DTRNetLayerImpl::Output>> routed_out(static_cast<std::size_t>(options_.n_layer()));
  torch::Tensor pending;  // the last layer's MLP update, added by the next norm's pass (as the dense model chains)
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    if (!routed[i]) {
      auto d = dense[i]->forward_deferred(x, pending, positions);
      if (i > 0) record_layer_state(d.input);
      x = std::move(d.h);
      pending = std::move(d.m);
      continue;
    }
    auto r = routed[i]->forward_deferred(x, pending, positions);
    if (i > 0) record_layer_state(r.input);
    x = r.h;
    pending = r.m;
    routed_out[static_cast<std::size_t>(i)] = std::move(r);
  }
  std::vector<torch::Tensor> routed_on_device;  // by layer: the deferred sized layers' routed tokens
  std::optional<PartScope> part(std::in_place, ROUTELAB_PART_PREFIX "routing");  // the sized layers' counts
  if (DeferredTraceReadback::active()) {
    routed_on_device = defer_sized_layers(routed_out, B * T, out);
  } else if (!settle_sized_layers(routed_out, B * T)) {
    // A layer routed more rows than its capacity held: the forward runs again with every count read exactly (and
    // every capacity sized afresh from them), so it cannot overflow twice. This attempt's activations go first.
    routed_out.clear();
    x = pending = positions = torch::Tensor();
    const ExactRoutedCounts exact;
    return forward(tokens, trace);
  }

  // Eq. 7: lambda * sum_l alpha_l ||G_l[:, 0]||_1, alpha_l = f_l / sum f from hard (detached) counts. As in the
  // reference code the L1 norm is divided by the token count (a mean), which keeps lambda independent of B*T.
  // A deferred sized layer's count stays on the device (defer_sized_layers): its load is a tensor.
  part.emplace(ROUTELAB_PART_PREFIX "router");  // the routing loss and the trace
  auto weighted = torch::zeros({}, x.options().dtype(torch::kFloat));
  auto predictor_loss = torch::zeros({}, x.options().dtype(torch::kFloat));
  double load_sum = 0;
  torch::Tensor load_sum_on_device;
  int predictors = 0;
  const double tokens_all = static_cast<double>(B * T);
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    const auto& slot = routed_out[static_cast<std::size_t>(i)];
    if (!slot) {
      if (trace) out.trace.push_back(dense_layer_trace(static_cast<int>(i), B, T, shape));
      continue;
    }
    const auto& r = *slot;
    const bool deferred = r.routed < 0;
    const double load = deferred ? 0.0 : static_cast<double>(r.routed) / tokens_all;  // f_l (share of tokens)
    const auto l1 = r.gate_attn.mean();                                                 // ||G_l[:,0]||_1 / (B T)
    const auto routed_here = deferred ? routed_on_device[static_cast<std::size_t>(i)] : torch::Tensor();
    if (deferred) {
      const auto load_t = routed_here.to(torch::kFloat) / tokens_all;
      weighted = weighted + load_t * l1;
      load_sum_on_device = load_sum_on_device.defined() ? load_sum_on_device + load_t : load_t;
    } else {
      weighted = weighted + load * l1;
      load_sum += load;
    }
    if (r.predictor_loss.defined()) {
      predictor_loss = predictor_loss + r.predictor_loss;
      ++predictors;
    }
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(i);
      t.kind = "dtrnet";
      t.routed = true;
      t.gate = r.gate_attn.detach();
      t.decision = r.decision;
      t.routed_fraction = load;
      t.on_device["aux_loss"] = l1.detach();  // read back with the other layers' after the last layer
      const bool vo = dtr_.bypass() == DtrBypass::ValueOutput;
      t.tokens_processed = {{"mlp", B * T}, {"router", B * T}};
      if (deferred) {  // read back after the forward (a captured step's replay): the host fields the shape's alone
        t.on_device["routed_fraction"] = routed_here.to(torch::kDouble) / tokens_all;
        t.on_device["tokens_processed.attn"] = routed_here;
        if (vo) t.on_device["tokens_processed.bypass"] = B * T - routed_here;
        if (!vo) t.tokens_processed["bypass"] = 0;
        // The FLOPs are affine in the attention's pairs (every other term is priced at the capacity run).
        auto one_pair = r;
        one_pair.pairs = 1;
        const double base = routed[i]->flops(B, T, r), per_pair = routed[i]->flops(B, T, one_pair) - base;
        const auto runs = r.starts.narrow(0, 1, r.starts.size(0) - 1) - r.starts.narrow(0, 0, r.starts.size(0) - 1);
        t.on_device["flops"] = runs.to(torch::kDouble).square().sum() * per_pair + base;
      } else {
        t.tokens_processed["attn"] = r.routed;
        t.tokens_processed["bypass"] = vo ? B * T - r.routed : 0;
        t.flops = routed[i]->flops(B, T, r);
      }
      t.dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
      if (r.predictor_logits.defined())
        t.on_device["predictor_agreement"] = CausalPredictorImpl::agreement_on_device(r.predictor_logits, r.topk);
      out.trace.push_back(std::move(t));
    }
  }
  part.reset();
  torch::Tensor last;
  out.logits = head(x, pending, last);
  record_layer_state(last);
  if (trace) resolve_on_device(out);
  part.emplace(ROUTELAB_PART_PREFIX "router");
  out.aux_loss = torch::zeros({}, x.options().dtype(torch::kFloat));
  if (is_training()) {  // the routing loss is a training objective only (reference code)
    if (load_sum_on_device.defined())  // 0 / a tiny denominator is 0, as the host's test below
      out.aux_loss = out.aux_loss + dtr_.aux_coeff() * weighted / (load_sum_on_device + load_sum).clamp_min(1e-30);
    else if (load_sum > 0)
      out.aux_loss = out.aux_loss + dtr_.aux_coeff() * weighted / load_sum;
    if (predictors > 0) out.aux_loss = out.aux_loss + dtr_.predictor_coeff() * predictor_loss / predictors;
  }
  return out;
}

bool DTRNet::settle_sized_layers(std::vector<std::optional<DTRNetLayerImpl::Output>>& outs, std::int64_t tokens) {
  std::vector<torch::Tensor> counts;
  for (const auto& o : outs) counts.push_back(o && o->routed < 0 ? o->counts : torch::Tensor());
  for (const auto& [i, lengths] : read_sized_counts(counts)) {
    auto& r = *outs[i];
    const auto capacity = static_cast<std::int64_t>(r.rows);  // the packed rows it ran (its capacity, clamped)
    std::int64_t total = 0;
    for (const auto n : lengths) total += n;
    if (r.padded_len > 0 ? sized_overflow_per_sequence(lengths, r.padded_len)
                         : sized_overflow(lengths, capacity)) {  // routed rows were left out
      logger("core")->debug("DTRNet layer {} routed {} rows past its capacity of {}{}: the forward runs again",
                            i, total, r.padded_len > 0 ? r.padded_len : capacity,
                            r.padded_len > 0 ? " a sequence" : "");
      return false;
    }
    // A batch that routed nothing takes the reference code's random fallback (attend_compact), which needs the
    // exact count.
    if (total == 0 && is_training() && dtr_.routing() == DtrRouting::Token && dtr_.fallback_fraction() > 0)
      return false;
    r.routed = total;
    if (r.padded_len > 0) {  // its attention ran the padded square (the pairs it set)
      r.longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
      continue;
    }
    r.pairs = 0;
    for (const auto n : sized_runs(lengths, capacity)) r.pairs += static_cast<double>(n) * static_cast<double>(n);
  }
  size_next_forwards(outs, tokens);
  return true;
}

void DTRNet::size_next_forwards(const std::vector<std::optional<DTRNetLayerImpl::Output>>& outs,
                                std::int64_t tokens) {
  // Each layer sizes its next forward of this many tokens from the rows it routed in this one: packed rows by their
  // total, unpacked (B, K) rows by the longest sequence.
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i] || outs[i]->routed < 0 || !routed[i]) continue;
    const auto& r = *outs[i];
    const auto sizing = routed[i]->sizing();
    const auto previous = sizing.tokens == tokens ? sizing.capacity : 0;  // for the log
    if (r.packed) {
      size_next_forward(r.routed, tokens, tokens, sizing.capacity, sizing.tokens, sizing.below);
    } else {
      const auto T = r.decision.size(1);
      size_next_forward(r.longest, T, tokens, sizing.capacity, sizing.tokens, sizing.below);
    }
    if (previous > 0 && sizing.capacity != previous)
      logger("core")->debug("DTRNet layer {} routed {} of {} rows: its capacity {} -> {}", i, outs[i]->routed, tokens,
                            previous, sizing.capacity);
  }
}

std::vector<torch::Tensor> DTRNet::defer_sized_layers(
    const std::vector<std::optional<DTRNetLayerImpl::Output>>& outs, std::int64_t tokens, ModelOutput& out) {
  size_next_forwards(outs, tokens);  // layers counted exactly (no capacity yet)
  struct Sized {
    DTRNetLayer layer;
    torch::Tensor counts;
    std::int64_t capacity;
    bool fallback;  ///< a count of 0 takes the reference code's random fallback, which needs the exact count
    SizedRows rows;  ///< kept alive with the check: a captured graph reads them on every replay
  };
  std::vector<Sized> sized;
  std::vector<torch::Tensor> overflows, totals(outs.size());
  const bool fallback = is_training() && dtr_.routing() == DtrRouting::Token && dtr_.fallback_fraction() > 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i] || outs[i]->routed >= 0 || !outs[i]->counts.defined()) continue;
    const auto& r = *outs[i];
    const auto capacity = static_cast<std::int64_t>(r.rows);
    sized.push_back({routed[i], r.counts, capacity, fallback, r.sized_rows});
    const auto& total = totals[i] = r.counts.sum();
    overflows.push_back(fallback ? total.gt(capacity).logical_or(total.eq(0)) : total.gt(capacity));
  }
  if (sized.empty()) return totals;
  out.overflow = torch::stack(overflows).any().to(torch::kFloat);
  out.check_shapes = [sized = std::move(sized), tokens, training = is_training()] {
    std::vector<torch::Tensor> counts;
    for (const auto& s : sized) counts.push_back(s.counts);
    const auto read = read_counts(counts);  // the one wait
    ShapeCheck check;
    for (std::size_t j = 0; j < sized.size(); ++j) {
      const auto& s = sized[j];
      std::int64_t total = 0;
      for (const auto n : read[j]) total += n;
      check.overflowed = check.overflowed || total > s.capacity || (s.fallback && total == 0);
      // The eager forwards' rule (resize_capacity). Micro-batches of one step share the layer (merge_micro_batches
      // calls each part's check): the first to size it sets the capacity, the others can only raise it.
      const auto sizing = s.layer.ptr()->sizing(training);  // the module itself (the holder is const here)
      const auto wanted = resize_capacity(total, s.capacity, tokens, sizing.below);
      sizing.capacity = sizing.capacity == s.capacity ? wanted : std::max(sizing.capacity, wanted);
      sizing.tokens = tokens;
      check.resized = check.resized || sizing.capacity != s.capacity;
    }
    return check;
  };
  return totals;
}

std::unique_ptr<DecodeState> DTRNet::begin_decode(std::int64_t batch) { return new_decode_state(batch); }

torch::Tensor DTRNet::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    auto& cache = state.cache(static_cast<std::size_t>(i));
    if (!routed[i]) {
      x = x + dense[i]->decode_update(x, positions, cache);
      if (trace) trace->layers.push_back(dense_layer_trace(static_cast<int>(i), B, n, layer_shape(options_)));
      continue;
    }
    auto r = routed[i]->decode(x, positions, cache);
    x = r.y;
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(i);
      t.kind = "dtrnet";
      t.routed = true;
      t.gate = r.gate_attn;
      t.decision = r.decision;
      t.routed_fraction = static_cast<double>(r.routed) / static_cast<double>(B * n);
      t.tokens_processed = {{"attn", r.routed}, {"mlp", B * n}};
      trace->layers.push_back(std::move(t));
    }
  }
  state.advance(n);
  return head(x);
}

std::string DTRNet::describe() const {
  std::ostringstream s;
  s << TransformerTrunk::describe() << ", layers " << pattern_string(pattern_);
  return s.str();
}

const OptionTable<DTRNetOptions>& dtrnet_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<DTRNetOptions> t;
    t.value(ROUTELAB_OPTION(routed_layers), T::String,
            "routed (D) layers: bilayer, trilayer, laterhalf, 6-transformer, dtrnet-code, a letter per layer "
            "(T-D-T-D) or routed indices (1,3,5)")
        .choice(ROUTELAB_OPTION(routing), {"token", "expert", "skip"},
                "token: attention iff g_attn > g_bypass (paper); expert: top capacity share per sequence (App. A1); "
                "skip: every token bypasses attention (App. A3)")
        .value(ROUTELAB_OPTION(capacity), T::Float, "expert routing: share of each sequence sent to attention", 0.0,
               1.0)
        .read_when("routing", {"expert"})
        .choice(ROUTELAB_OPTION(bypass), {"vo", "none"},
                "vo: bypass tokens get W_O W_V x_norm (paper); none: no update (w/o-VO ablation, App. A5)")
        .value(ROUTELAB_OPTION(aux_coeff), T::Float, "lambda of the routing loss (Eq. 7)", 0.0, 10.0)
        .training_only()
        .value(ROUTELAB_OPTION(fallback_fraction), T::Float,
               "share of tokens routed at random in training when a batch routes none (reference code; 0 disables)",
               0.0, 1.0)
        .training_only()
        .choice(ROUTELAB_OPTION(attention), {"compact", "masked"},
                "compact: gather the routed tokens, attend, scatter (O(k^2)); masked: dense T x T mask (the "
                "reference oracle)")
        .same_result()
        .value(ROUTELAB_OPTION(predictor_coeff), T::Float, "expert routing: weight of the causal predictor's BCE", 0.0,
               100.0)
        .read_when("routing", {"expert"})
        .training_only();
    return t;
  }();
  return table;
}

namespace {

/// One calibration pass (ArchitectureEntry::force_routed_share): each routed layer's attention bias set from one
/// traced forward's gates so that `fraction` of the tokens go to attention.
void force_dtrnet_share(LanguageModel& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  auto& net = dynamic_cast<DTRNet&>(model);
  for (const auto& t : net.forward(tokens, true).trace) {
    if (!t.routed || !t.gate.defined()) continue;
    const auto& bias = net.routed[static_cast<std::size_t>(t.layer)]->router_out->bias;  // [attention, bypass]
    force_two_way_bias(bias, 0, t.gate, share_count(fraction, t.gate.numel()));
  }
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_dtrnet(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto& m = in.model;
  const auto routed = parse_layer_pattern(m.at("routed_layers").get<std::string>(), t.n_layer(), "model.routed_layers");
  const auto routing = m.at("routing").get<std::string>();
  const bool masked = m.at("attention") == "masked", vo = m.at("bypass") != "none";
  const double fallback = routing == "expert" ? m.at("capacity").get<double>() : routing == "skip" ? 0.0 : 1.0;
  auto f = layer_fractions(in, routed, fallback, 0.0, 1.0);
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d), half = static_cast<double>(s.d / 2);
  if (routing == "skip")  // the skip variant's routers send every token to the bypass
    for (std::size_t i = 0; i < f.size(); ++i)
      if (routed[i]) f[i] = 0.0;
  b.layers(routed, f, "dtrnet", s, [&](int i, LayerFlops& l) {
    const double k = f[static_cast<std::size_t>(i)] * b.T, routed_rows = b.B * k;
    FlopsBuilder::part(l, "router", linear_flops(b.N, d, half) + linear_flops(b.N, half, 2.0));
    if (routing == "expert") FlopsBuilder::part(l, "predictor", linear_flops(b.N, d, 1.0));
    if (masked) {  // the oracle projects every token and computes every (query, key) pair, then masks
      FlopsBuilder::part(l, "attn_qkv", qkv_flops(b.N, s));
      FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
      FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));
    } else {
      FlopsBuilder::part(l, "attn_qk", q_k_flops(routed_rows, s));
      FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * k * k, s));  // compacted: O(k^2)
      if (vo && s.d_kv < s.d) {  // grouped heads: the folded W_O over every token, the full one over routed rows
        FlopsBuilder::part(l, "attn_v", v_flops(b.N, s));
        FlopsBuilder::part(l, "attn_out",
                           linear_flops(b.N, static_cast<double>(s.d_kv), d) + out_proj_flops(routed_rows, s));
      } else if (vo) {
        FlopsBuilder::part(l, "attn_v", v_flops(b.N, s));      // W_V of every token (bypass and attention share it)
        FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));  // one W_O over every token
      } else {
        FlopsBuilder::part(l, "attn_v", v_flops(routed_rows, s));
        FlopsBuilder::part(l, "attn_out", out_proj_flops(routed_rows, s));
      }
    }
    FlopsBuilder::part(l, "mlp", mlp_flops(b.N, s));
  });
  if (masked)
    b.est.notes.push_back("attention 'masked' (the oracle): every token is projected and every pair scored, O(T^2) "
                          "whatever the routed fraction");
  else
    b.est.notes.push_back("compacted attention: the routed tokens of a sequence are gathered and attend among "
                          "themselves, O(k^2) for k routed tokens");
  if (vo && !masked) b.est.notes.push_back("bypass W_O W_V: V and W_O run over every token (shared with attention)");
  if (routing == "skip") b.est.notes.push_back("routing 'skip': fractions forced to 0 (every token bypasses)");
  return b.est;
}

}  // namespace

ArchitectureEntry dtrnet_architecture() {
  ArchitectureEntry entry{
      "dtrnet",
      "DTRNet",
      "DTRNet (Sharma et al.)",
      "Token routing between causal attention over the routed tokens and a token-local W_O W_V bypass; every "
      "token keeps the MLP.",
      schema_of(transformer_options_table(), dtrnet_options_table()),
      [](const nlohmann::json& m, const std::string& path) {
        check_transformer_options(m, path);
        const auto n_layer = m.at("n_layer").get<std::int64_t>();
        const auto routed = parse_layer_pattern(m.at("routed_layers").get<std::string>(), n_layer, path + ".routed_layers");
        if (std::none_of(routed.begin(), routed.end(), [](bool r) { return r; }))
          throw ConfigError(path + ".routed_layers: '" + m.at("routed_layers").get<std::string>() + "' routes no layer of a " +
                            std::to_string(n_layer) + "-layer model (use arch dense)");
      },
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<DTRNet>(transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                        dtrnet_options_table().read(m));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), dtrnet_options_table());
  };
  // A routed layer caches the keys and values of the tokens it sends to attention; bypassed tokens write none.
  entry.kv_entries = kv_entries_of_routed_tokens;
  entry.force_routed_share = force_dtrnet_share;
  // Captured with its routed rows sized from the eager steps before (compact_sized), nothing read back during the
  // step: each replay is checked after it has run and captured again when the routing outgrew or fell well below
  // the shapes (CudaGraphStep). That form needs the packed rows (bf16 on a GPU) and the compacted attention.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.cuda_graph_limits = [](const nlohmann::json& m, const nlohmann::json& train) -> std::string {
    if (m.at("attention") == "masked")
      return "model.attention=masked counts every routed layer's tokens on the host; the compacted attention can be "
             "captured";
    if (train.at("precision") != "bf16")
      return "train.precision=" + train.at("precision").get<std::string>() +
             ": DTRNet's routed rows are sized without a host read only where they run packed (bf16 on a GPU)";
    if (train.value("deterministic", false))
      return "train.deterministic=true counts DTRNet's routed tokens exactly (a host read in each routed layer)";
    return {};
  };
  entry.price_flops = price_dtrnet;
  entry.regulariser_option = "aux_coeff";
  entry.routed_fraction_meaning =
      "share of tokens routed to attention in each routed layer (default: 1; expert routing: "
                                  "model.capacity; skip: 0)";
  entry.color = 0;
  return entry;
}

}  // namespace routelab
