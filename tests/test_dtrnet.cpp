// DTRNet: the compacted attention against the dense-masked oracle, the two paths, the routing
// loss, the variants (patterns, expert choice, skip, w/o-VO), router gradients and causality at inference.
#include <QtTest>

#include <torch/torch.h>

#include <optional>

#include "core/config/options.h"
#include "core/cost/flop_counter.h"
#include "core/models/dtrnet.h"
#include "core/models/registry.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_dtrnet {

using namespace routelab;

namespace {

TransformerOptions small(ModelStyle style, std::int64_t kv_heads = 0, std::int64_t layers = 4) {
  TransformerOptions o;
  o.style(style).vocab_size(29).max_seq_len(32).n_layer(layers).n_embd(32).n_head(4).n_kv_head(kv_heads);
  return o;
}

/// Sets the router's output bias so that every token prefers attention (bias > 0) or bypass (bias < 0).
void bias_router(DTRNetLayerImpl& layer, double attention_minus_bypass) {
  torch::NoGradGuard no_grad;
  layer.router_out->weight.zero_();
  layer.router_out->bias.copy_(torch::tensor({attention_minus_bypass / 2, -attention_minus_bypass / 2}));
}

std::vector<torch::Tensor> grads_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

/// A DTRNet (T-D-D-T, Llama style) whose random routers send a mix of tokens each way.
std::shared_ptr<DTRNet> mixed_routing_model(std::int64_t kv_heads, bool vo) {
  DTRNetOptions o;
  o.routed_layers("T-D-D-T").bypass(vo ? DtrBypass::ValueOutput : DtrBypass::None);
  auto model = std::make_shared<DTRNet>(small(ModelStyle::Llama, kv_heads), o);
  torch::NoGradGuard no_grad;
  for (auto& layer : model->routed)
    if (layer) layer->router_out->weight.normal_(0, 1.0);
  return model;
}

/// A traced forward and, in training mode, the gradients of its loss (cross-entropy plus the routing loss).
struct StepResult {
  ModelOutput out;
  std::vector<torch::Tensor> grads;
};
StepResult traced_step(DTRNet& model, const torch::Tensor& tokens, const torch::Tensor& target) {
  model.zero_grad();
  torch::manual_seed(3);  // the same dropout masks
  StepResult r{model.forward(tokens, true), {}};
  if (model.is_training()) {
    (torch::cross_entropy_loss(r.out.logits.reshape({-1, 29}), target.reshape({-1})) + r.out.aux_loss).backward();
    r.grads = grads_of(model);
  }
  return r;
}

/// Two steps of mixed_routing_model agree: logits, routing loss, gradients, and the routed layers' (1, 2) traces.
void check_same_step(const StepResult& a, const StepResult& b, const char* what) {
  QVERIFY2(torch::allclose(a.out.logits, b.out.logits, 1e-5, 1e-5), what);
  QVERIFY2(torch::allclose(a.out.aux_loss, b.out.aux_loss, 1e-6, 1e-7), what);
  QCOMPARE(a.grads.size(), b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    QVERIFY2(torch::allclose(a.grads[i], b.grads[i], 1e-5, 1e-6),
             qPrintable(QString("%1: parameter %2").arg(what).arg(i)));
  for (const int l : {1, 2}) {
    QCOMPARE(a.out.trace[l].tokens_processed, b.out.trace[l].tokens_processed);
    QCOMPARE(a.out.trace[l].routed_fraction, b.out.trace[l].routed_fraction);
    QVERIFY(torch::equal(a.out.trace[l].decision, b.out.trace[l].decision));
  }
}

void check_causal(LanguageModel& model, std::int64_t vocab) {
  model.eval();
  torch::NoGradGuard no_grad;
  const std::int64_t T = 24;
  const auto a = torch::randint(0, vocab, {2, T}, torch::kLong);
  for (std::int64_t t : {0, 7, 22}) {
    auto b = a.clone();
    b.narrow(1, t + 1, T - t - 1).random_(0, vocab);
    const auto la = model.forward(a).logits, lb = model.forward(b).logits;
    QVERIFY2(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-5),
             qPrintable(QString("position %1 changed").arg(t)));
    QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
  }
}

}  // namespace

class TestDTRNet : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(11); }

  void compactEqualsMaskedOracle_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("vo");
    QTest::newRow("llama") << int(ModelStyle::Llama) << 0 << true;
    QTest::newRow("llama-gqa") << int(ModelStyle::Llama) << 2 << true;
    QTest::newRow("gpt2") << int(ModelStyle::GPT2) << 0 << true;
    QTest::newRow("llama-without-vo") << int(ModelStyle::Llama) << 2 << false;
    QTest::newRow("gpt2-without-vo") << int(ModelStyle::GPT2) << 0 << false;
  }
  void compactEqualsMaskedOracle() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(bool, vo);
    DTRNetLayer layer(small(ModelStyle(style), kv), DTRNetOptions().bypass(vo ? DtrBypass::ValueOutput : DtrBypass::None));
    {
      torch::NoGradGuard no_grad;  // a router that sends a mix of tokens each way
      layer->router_out->weight.normal_(0, 1.0);
    }
    const auto x = torch::randn({3, 13, 32});
    const auto positions = torch::arange(13, torch::kLong);
    const auto grad = torch::randn({3, 13, 32});
    std::vector<torch::Tensor> outputs, x_grads;
    std::vector<std::vector<torch::Tensor>> param_grads;
    // Compacted rows padded, compacted rows packed (the GPU's half-precision path, its attention padding internally
    // here), and the masked oracle.
    for (const int variant : {0, 1, 2}) {
      layer->options.attention(variant == 2 ? DtrAttention::Masked : DtrAttention::Compact);
      std::optional<ForcePackedRows> packed;
      if (variant == 1) packed.emplace();
      layer->zero_grad();
      const auto xi = x.clone().requires_grad_();
      FlopCounter counted;
      const auto r = layer->forward(xi, positions);
      counted.stop();
      const auto routed = r.decision.sum().item<std::int64_t>();
      QVERIFY2(routed > 3 && routed < 36, "the random router should route a mix of tokens");
      if (variant == 1) {  // no padding rows projected, and priced as run
        QCOMPARE(r.rows, static_cast<double>(routed));
        QVERIFY2(std::abs(counted.flops() - layer->flops(3, 13, r)) < 1e-6 * counted.flops(),
                 qPrintable(QString("counted %1, traced %2").arg(counted.flops()).arg(layer->flops(3, 13, r))));
      }
      (r.y * grad).sum().backward();
      outputs.push_back(r.y.detach());
      x_grads.push_back(xi.grad());
      param_grads.push_back(grads_of(*layer));
    }
    for (const std::size_t other : {1, 2}) {
      QVERIFY(torch::allclose(outputs[0], outputs[other], 1e-5, 1e-5));
      QVERIFY(torch::allclose(x_grads[0], x_grads[other], 1e-5, 1e-5));
      for (std::size_t i = 0; i < param_grads[0].size(); ++i)
        QVERIFY2(torch::allclose(param_grads[0][i], param_grads[other][i], 1e-5, 1e-5),
                 qPrintable(QString("variant %1, parameter %2").arg(other).arg(i)));
    }
  }

  void routedTokensNeverReadBypassTokens() {
    DTRNetLayer layer(small(ModelStyle::Llama, 2), DTRNetOptions());
    layer->eval();
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({2, 16, 32});
    const auto positions = torch::arange(16, torch::kLong);
    const auto a = layer->forward(x, positions);
    // Perturb only bypass tokens, slightly enough that no decision flips.
    const auto bypass = a.decision.logical_not().unsqueeze(-1);
    const auto x2 = x + 1e-2 * torch::randn_like(x) * bypass;
    const auto b = layer->forward(x2, positions);
    QVERIFY(torch::equal(a.decision, b.decision));
    const auto routed = a.decision.unsqueeze(-1).expand_as(a.y);
    QVERIFY(a.y.masked_select(routed).numel() > 0);
    QVERIFY(torch::allclose(a.y.masked_select(routed), b.y.masked_select(routed), 1e-6, 1e-6));
    QVERIFY(!torch::allclose(a.y.masked_select(routed.logical_not()), b.y.masked_select(routed.logical_not())));
  }

  void bypassIsValueThenOutputProjection_data() {
    QTest::addColumn<int>("kv");
    QTest::newRow("mha") << 0;
    QTest::newRow("gqa") << 2;
  }
  void bypassIsValueThenOutputProjection() {
    QFETCH(int, kv);
    DTRNetLayer layer(small(ModelStyle::Llama, kv), DTRNetOptions());
    bias_router(*layer, -8.0);  // every token bypasses
    layer->eval();              // (training would route a random 15% instead: the reference fallback)
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({2, 10, 32});
    const auto r = layer->forward(x, torch::arange(10, torch::kLong));
    QCOMPARE(r.routed, std::int64_t(0));
    const auto n = layer->norm1(x);
    const auto g_bypass = torch::softmax(layer->router_logits(x), -1).select(-1, 1).unsqueeze(-1);
    const auto h = x + g_bypass * layer->attn->value_only(n);  // W_O(repeat_kv(W_V x_norm))
    QVERIFY(torch::allclose(r.y, h + layer->mlp(layer->norm2(h)), 1e-5, 1e-5));
  }

  void allRoutedEqualsDenseLayerScaledByGate() {
    DTRNetLayer layer(small(ModelStyle::Llama, 2), DTRNetOptions());
    bias_router(*layer, 3.0);  // every token takes attention, g_attn = sigmoid(3)
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({2, 12, 32});
    const auto positions = torch::arange(12, torch::kLong);
    const auto r = layer->forward(x, positions);
    QCOMPARE(r.routed, std::int64_t(24));
    const double g = 1.0 / (1.0 + std::exp(-3.0));
    QVERIFY(torch::allclose(r.gate_attn, torch::full_like(r.gate_attn, g), 1e-6, 1e-6));
    const auto h = x + g * layer->attn->forward(layer->norm1(x), positions);  // the dense attention sub-layer
    QVERIFY(torch::allclose(r.y, h + layer->mlp(layer->norm2(h)), 1e-5, 1e-5));
  }

  void gradientsReachEveryRouterParameter_data() {
    QTest::addColumn<QString>("routing");
    QTest::newRow("token") << "token";
    QTest::newRow("expert") << "expert";
    QTest::newRow("skip") << "skip";
  }
  void gradientsReachEveryRouterParameter() {
    QFETCH(QString, routing);
    DTRNetOptions o;
    o.routing(routing == "expert" ? DtrRouting::Expert : routing == "skip" ? DtrRouting::Skip : DtrRouting::Token);
    DTRNet model(small(ModelStyle::Llama, 2, 6), o);  // T-D-T-D-T-T: two routed layers
    model.train();
    const auto tokens = torch::randint(0, 29, {2, 16}, torch::kLong);
    const auto out = model.forward(tokens);
    (torch::nn::functional::cross_entropy(out.logits.reshape({-1, 29}), tokens.reshape(-1)) + out.aux_loss).backward();
    int checked = 0;
    for (const auto& item : model.named_parameters()) {
      if (item.key().find("router") == std::string::npos && item.key().find("predictor") == std::string::npos) continue;
      QVERIFY2(item.value().grad().defined() && item.value().grad().abs().sum().item<double>() > 0,
               qPrintable(QString::fromStdString(item.key())));
      ++checked;
    }
    QCOMPARE(checked, routing == "expert" ? 4 * 2 + 2 * 2 : 4 * 2);  // two routed layers of the bilayer 4-layer model
  }

  void routingLossByHand() {
    // Two routed layers with fixed, known scores: f_l and mean g_attn give lambda * sum f_l g_l / sum f_l.
    DTRNetOptions o;
    o.routed_layers("T-D-D-T").aux_coeff(0.5).fallback_fraction(0.0);
    DTRNet model(small(ModelStyle::Llama), o);
    bias_router(*model.routed[1], 2.0);   // all routed, g = sigmoid(2)
    bias_router(*model.routed[2], -1.0);  // none routed, g = sigmoid(-1): f = 0 contributes nothing
    model.train();
    const auto out = model.forward(torch::randint(0, 29, {2, 8}, torch::kLong), true);
    const double g1 = 1.0 / (1.0 + std::exp(-2.0));
    QCOMPARE(out.trace[1].routed_fraction, 1.0);
    QCOMPARE(out.trace[2].routed_fraction, 0.0);
    QVERIFY(std::abs(out.aux_loss.item<double>() - 0.5 * (1.0 * g1 + 0.0) / 1.0) < 1e-6);

    bias_router(*model.routed[2], 1.0);  // now layer 2 routes all too: weights 1/2 each
    const auto both = model.forward(torch::randint(0, 29, {2, 8}, torch::kLong));
    const double g2 = 1.0 / (1.0 + std::exp(-1.0));
    QVERIFY(std::abs(both.aux_loss.item<double>() - 0.5 * (g1 + g2) / 2.0) < 1e-6);

    model.eval();  // a training objective only
    QCOMPARE(model.forward(torch::randint(0, 29, {2, 8}, torch::kLong)).aux_loss.item<double>(), 0.0);
  }

  void expertChoiceRoutesCapacityInTraining() {
    DTRNet model(small(ModelStyle::Llama), DTRNetOptions().routing(DtrRouting::Expert).capacity(0.25));
    model.train();
    const auto out = model.forward(torch::randint(0, 29, {3, 20}, torch::kLong), true);
    for (const auto& t : out.trace) {
      if (!t.routed) continue;
      QVERIFY(t.decision.sum(1).eq(5).all().item<bool>());
      QCOMPARE(t.tokens_processed.at("attn"), std::int64_t(15));
      QVERIFY(t.stats.count("predictor_agreement") == 1);
    }
  }

  void skipRoutesNothing() {
    DTRNet model(small(ModelStyle::Llama), DTRNetOptions().routing(DtrRouting::Skip));
    model.train();
    const auto out = model.forward(torch::randint(0, 29, {2, 12}, torch::kLong), true);
    QCOMPARE(out.trace[1].tokens_processed.at("attn"), std::int64_t(0));
    QCOMPARE(out.trace[1].tokens_processed.at("bypass"), std::int64_t(24));
    QCOMPARE(out.aux_loss.item<double>(), 0.0);
    QVERIFY(out.trace[1].flops < out.trace[1].dense_flops);
  }

  void sizedCompactionEqualsExactCounts_data() {
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("vo");
    QTest::newRow("gqa") << 2 << true;
    QTest::newRow("mha") << 0 << true;
    QTest::newRow("without-vo") << 2 << false;
  }
  void sizedCompactionEqualsExactCounts() {
    // Packed rows (the GPU's path, attended padded here) sized from the previous forward: after one forward that
    // counts exactly, the layers take a capacity and read nothing back until the model's one read after the last
    // layer; loss, gradients and the trace are the exact count's, the projections priced at the capacity they ran.
    // A capacity too small runs the forward again with exact counts; so does a layer that routes nothing in training.
    QFETCH(int, kv);
    QFETCH(bool, vo);
    const auto holder = mixed_routing_model(kv, vo);
    auto& model = *holder;
    model.train();
    const ForcePackedRows packed;
    const auto tokens = torch::randint(0, 29, {3, 20}, torch::kLong), target = torch::randint(0, 29, {3, 20});
    const auto step = [&] { return traced_step(model, tokens, target); };
    const auto& same = check_same_step;
    StepResult exact;
    {
      const ExactRoutedCounts counted;
      exact = step();
    }
    for (const int l : {1, 2}) {
      const auto routed = exact.out.trace[l].tokens_processed.at("attn");
      QVERIFY2(routed > 5 && routed < 55, "the random routers should route a mix of tokens");
      QCOMPARE(model.routed[l]->capacity_tokens, std::int64_t(60));
      QCOMPARE(model.routed[l]->capacity, next_capacity(routed, 0, 60));
      model.routed[l]->capacity = routed + 5;  // a capacity with a few unrouted rows as padding (64 rows is all 60)
    }
    const auto sized = step();
    same(exact, sized, "sized");
    const auto shape = layer_shape(model.options());
    for (const int l : {1, 2}) {  // priced as run: the 5 padding rows projected and attended in runs of their own
      const auto counts = exact.out.trace[l].decision.sum(1).contiguous();
      const std::vector<std::int64_t> lengths(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + 3);
      const auto all_runs = sized_runs(lengths, exact.out.trace[l].tokens_processed.at("attn") + 5);
      double runs = 0;  // the padding runs' pairs
      for (std::size_t i = lengths.size(); i < all_runs.size(); ++i)
        runs += static_cast<double>(all_runs[i]) * static_cast<double>(all_runs[i]);
      const double more = q_k_flops(5, shape) + (vo ? 0.0 : v_flops(5, shape)) +
                          (vo && kv == 0 ? 0.0 : out_proj_flops(5, shape)) + attention_core_flops(runs, shape);
      QCOMPARE(sized.out.trace[l].flops - exact.out.trace[l].flops, more);
    }
    model.routed[2]->capacity = 3;  // fewer rows than it routes
    const auto rerun = step();
    same(exact, rerun, "overflowed");
    QVERIFY(model.routed[2]->capacity >= exact.out.trace[2].tokens_processed.at("attn"));
    {
      const ExactRoutedCounts counted;  // the exact form's flops again, after the rerun
      QCOMPARE(rerun.out.trace[2].flops, exact.out.trace[2].flops);
    }
    bias_router(*model.routed[1], -8.0);  // routes nothing: the reference code's fallback needs the exact count
    const auto fallback = model.forward(tokens, true);
    QCOMPARE(fallback.trace[1].tokens_processed.at("attn"), std::int64_t(9));  // floor(0.15 * 60)
  }

  void paddedSizedEqualsExactCounts_data() { sizedCompactionEqualsExactCounts_data(); }
  void paddedSizedEqualsExactCounts() {
    // Unpacked (B, K) rows (a GPU in fp32, whose attention runs the padded rows) sized from the previous forward: a
    // capacity of rows a sequence, nothing read back until the model's one read after the last layer; loss,
    // gradients and the trace are the exact count's, in training and in eval, the layer priced at the padded rows and
    // square it ran. A sequence past its rows runs the forward again with exact counts.
    QFETCH(int, kv);
    QFETCH(bool, vo);
    const auto holder = mixed_routing_model(kv, vo);
    auto& model = *holder;
    const ForcePaddedSized padded;
    const std::int64_t B = 3, T = 32;
    const auto tokens = torch::randint(0, 29, {B, T}, torch::kLong), target = torch::randint(0, 29, {B, T});
    const auto step = [&] { return traced_step(model, tokens, target); };
    const auto& same = check_same_step;
    const auto shape = layer_shape(model.options());
    for (const bool training : {true, false}) {
      training ? model.train() : model.eval();
      StepResult exact;
      {
        const ExactRoutedCounts counted;
        exact = step();
      }
      std::vector<std::int64_t> longest(3, 0);
      for (const int l : {1, 2}) {
        const auto counts = exact.out.trace[l].decision.sum(1);
        longest[l] = counts.max().item<std::int64_t>();
        QVERIFY2(counts.min().item<std::int64_t>() > 3 && longest[l] < T - 4, "a mix of tokens each way");
        const auto sizing = model.routed[l]->sizing();
        QCOMPARE(sizing.tokens, B * T);
        QCOMPARE(sizing.capacity, next_capacity(longest[l], 0, T));
        sizing.capacity = longest[l] + 3;  // 3 rows a sequence more than the longest (64 would be all 32)
      }
      const auto sized = step();
      same(exact, sized, training ? "sized, training" : "sized, eval");
      for (const int l : {1, 2}) {  // priced as run: 3 B rows more, the whole padded square attended
        const auto counts = exact.out.trace[l].decision.sum(1).to(torch::kDouble);
        const double K = static_cast<double>(longest[l] + 3), rows = 3.0 * B;
        const double square = B * K * K - counts.square().sum().item<double>();
        const double more = q_k_flops(rows, shape) + (vo ? 0.0 : v_flops(rows, shape)) +
                            (vo && kv == 0 ? 0.0 : out_proj_flops(rows, shape)) + attention_core_flops(square, shape);
        const double diff = sized.out.trace[l].flops - exact.out.trace[l].flops;
        QVERIFY2(std::abs(diff - more) < 1e-9 * exact.out.trace[l].flops,
                 qPrintable(QString("%1 vs %2").arg(diff).arg(more)));
      }
      model.routed[2]->sizing().capacity = longest[2] - 1;  // fewer rows than its longest sequence routes
      const auto rerun = step();
      same(exact, rerun, training ? "overflowed, training" : "overflowed, eval");
      QVERIFY(model.routed[2]->sizing().capacity >= longest[2]);
    }
  }

  void deferredFormReadsAfterTheForward() {
    // The form a step captured as a CUDA graph runs (under DeferredTraceReadback): sized rows and nothing read back
    // during the forward; the counts, the trace's routed share, tokens and FLOPs and the aux loss stay on the device,
    // and come out as those of the form that reads; an overflow becomes a flag on the device that skips the update
    // (the parameters stay), and check_shapes, read after the forward, grows the layer that overflowed.
    const auto make = [] {
      torch::manual_seed(21);
      DTRNetOptions o;
      o.routed_layers("T-D-D-T");
      auto model = std::make_shared<DTRNet>(small(ModelStyle::Llama, 2), o);
      torch::NoGradGuard no_grad;  // routers that send a mix of tokens each way
      for (auto& layer : model->routed)
        if (layer) layer->router_out->weight.normal_(0, 1.0);
      model->train();
      return model;
    };
    const ForcePackedRows packed;
    const auto tokens = torch::randint(0, 29, {3, 20}, torch::kLong), target = torch::randint(0, 29, {3, 20});
    auto model = make();
    model->forward(tokens, true);  // counts exactly and sizes the layers
    const auto forward = [&](bool deferred) {
      std::optional<DeferredTraceReadback> defer;
      if (deferred) defer.emplace();
      return model->forward(tokens, true);
    };
    const auto read = forward(false);
    auto deferred = forward(true);
    QVERIFY(!read.overflow.defined() && !read.check_shapes);
    QVERIFY(deferred.overflow.defined() && deferred.check_shapes);
    QCOMPARE(deferred.overflow.item<float>(), 0.0f);
    QVERIFY(torch::equal(read.logits, deferred.logits));
    QVERIFY(torch::allclose(read.aux_loss, deferred.aux_loss, 1e-6, 1e-8));
    for (const int l : {1, 2}) QVERIFY(!deferred.trace[l].tokens_processed.count("attn"));  // on the device
    resolve_on_device(deferred.trace);
    for (const int l : {1, 2}) {
      QCOMPARE(deferred.trace[l].tokens_processed, read.trace[l].tokens_processed);
      QCOMPARE(deferred.trace[l].routed_fraction, read.trace[l].routed_fraction);
      QCOMPARE(deferred.trace[l].flops, read.trace[l].flops);
    }
    const auto capacity = model->routed[1]->capacity;
    const auto fits = deferred.check_shapes();
    QVERIFY(!fits.overflowed && !fits.resized);
    QCOMPARE(model->routed[1]->capacity, capacity);

    const auto routed = read.trace[2].tokens_processed.at("attn");
    QVERIFY2(routed > 5, "the random router should route a mix of tokens");
    model->routed[2]->capacity = 3;  // fewer rows than it routes
    const auto over = forward(true);
    QCOMPARE(over.overflow.item<float>(), 1.0f);
    const auto grown = over.check_shapes();
    QVERIFY(grown.overflowed && grown.resized);
    QCOMPARE(model->routed[2]->capacity, next_capacity(routed, 3, 60));
    QVERIFY(model->routed[2]->capacity >= routed);

    // A new capacity costs a capture (or an eager rerun when it was too small): a layer shrinks only after 16 checks,
    // or forwards, in a row found it well below its capacity.
    const auto wide = torch::randint(0, 29, {8, 32}, torch::kLong);
    auto shrinking = make();
    shrinking->eval();
    architecture("dtrnet").force_routed_share(*shrinking, wide, 0.2);
    shrinking->train();
    shrinking->forward(wide);  // sizes the layers for 256 tokens
    const auto small_capacity = shrinking->routed[1]->capacity;
    QVERIFY2(small_capacity < 192, qPrintable(QString::number(small_capacity)));
    shrinking->routed[1]->capacity = shrinking->routed[2]->capacity = 256;
    const auto wide_out = [&] {
      const DeferredTraceReadback defer;
      return shrinking->forward(wide);
    }();
    for (int check = 1; check < 16; ++check) {
      QVERIFY(!wide_out.check_shapes().resized);
      QCOMPARE(shrinking->routed[1]->capacity, std::int64_t(256));
    }
    QVERIFY(wide_out.check_shapes().resized);
    QCOMPARE(shrinking->routed[1]->capacity, small_capacity);
    shrinking->routed[1]->capacity = 256;  // the eager forwards follow the same rule
    for (int forward = 1; forward < 16; ++forward) {
      shrinking->forward(wide);
      QCOMPARE(shrinking->routed[1]->capacity, std::int64_t(256));
    }
    shrinking->forward(wide);
    QCOMPARE(shrinking->routed[1]->capacity, small_capacity);

    if (!MultiTensorAdamW::fused_available()) QSKIP("the update skipped on a flag needs the fused AdamW kernel");
    // Training steps: a deferred step that fits updates as a step that reads; one that overflows leaves every
    // parameter as it was.
    auto twin = make();
    const auto optimizer = [](DTRNet& m) {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(m.parameters());
      // A small rate: AdamW's first steps move every weight by about the rate, which at 1e-2 sends every token of
      // these routers one way.
      return std::make_unique<MultiTensorAdamW>(std::move(groups), torch::optim::AdamWOptions(1e-4));
    };
    auto opt = optimizer(*model), twin_opt = optimizer(*twin);
    const Batch batch{tokens, target, {}};
    train_step(*model, *opt, batch, 1.0, false, false);  // sizes both alike
    train_step(*twin, *twin_opt, batch, 1.0, false, false);
    {
      const DeferredTraceReadback defer;
      const auto r = train_step(*model, *opt, batch, 1.0, false, true);
      for (const int l : {1, 2})  // a mix still: no layer left to the training fallback
        QVERIFY(r.output.trace[l].on_device.at("tokens_processed.attn").item<double>() > 5);
      QCOMPARE(r.output.overflow.item<float>(), 0.0f);
    }
    train_step(*twin, *twin_opt, batch, 1.0, false, true);
    const auto a = model->parameters(), b = twin->parameters();
    for (std::size_t i = 0; i < a.size(); ++i)
      QVERIFY2(torch::allclose(a[i], b[i], 1e-5, 1e-6), qPrintable(QString("parameter %1").arg(i)));
    std::vector<torch::Tensor> before;
    for (const auto& p : a) before.push_back(p.detach().clone());
    model->routed[2]->capacity = 3;
    {
      const DeferredTraceReadback defer;
      const auto r = train_step(*model, *opt, batch, 1.0, false, true);
      QCOMPARE(r.output.overflow.item<float>(), 1.0f);
    }
    for (std::size_t i = 0; i < a.size(); ++i) QVERIFY(torch::equal(a[i].detach(), before[i]));
  }

  void trainingFallbackRoutesFifteenPercent() {
    DTRNetOptions o;
    o.routed_layers("T-D-T-T");
    DTRNet model(small(ModelStyle::Llama), o);
    bias_router(*model.routed[1], -8.0);
    model.train();
    const auto train = model.forward(torch::randint(0, 29, {4, 25}, torch::kLong), true);
    QCOMPARE(train.trace[1].tokens_processed.at("attn"), std::int64_t(15));  // floor(0.15 * 100)
    model.eval();
    const auto eval = model.forward(torch::randint(0, 29, {4, 25}, torch::kLong), true);
    QCOMPARE(eval.trace[1].tokens_processed.at("attn"), std::int64_t(0));
  }

  void flopsFollowTheRouting() {
    DTRNetOptions o;
    o.routed_layers("T-D-T-T");
    DTRNet model(small(ModelStyle::Llama), o);
    model.eval();
    torch::NoGradGuard no_grad;
    const auto out = model.forward(torch::randint(0, 29, {2, 16}, torch::kLong), true);
    const auto& t = out.trace[1];
    const auto k = t.decision.sum(1).to(torch::kDouble);
    const auto shape = layer_shape(model.options());
    // Q and K run over the padded (B, K_max) rows of the compacted sequences; the CPU attention over sum_b k_b^2.
    const double padded = 2 * k.max().item<double>();
    const double expected = linear_flops(32, 32, 16) + linear_flops(32, 16, 2) + q_k_flops(padded, shape) +
                            attention_core_flops(k.pow(2).sum().item<double>(), shape) + v_flops(32, shape) +
                            out_proj_flops(32, shape) + mlp_flops(32, shape);
    QCOMPARE(t.flops, expected);
    QCOMPARE(out.trace[0].flops, out.trace[0].dense_flops);
  }

  void causalityAtInference_data() {
    QTest::addColumn<QString>("variant");
    for (const char* v : {"bilayer", "trilayer", "laterhalf", "6-transformer", "expert", "skip", "without-vo", "gpt2",
                          "masked"})
      QTest::newRow(v) << v;
  }
  void causalityAtInference() {
    QFETCH(QString, variant);
    const std::int64_t L = variant == "6-transformer" ? 8 : 6;
    auto shape = small(variant == "gpt2" ? ModelStyle::GPT2 : ModelStyle::Llama, 2, L);
    DTRNetOptions o;
    const bool named = variant == "bilayer" || variant == "trilayer" || variant == "laterhalf" || variant == "6-transformer";
    o.routed_layers(named ? variant.toStdString() : "bilayer");
    if (variant == "expert") o.routing(DtrRouting::Expert);
    if (variant == "skip") o.routing(DtrRouting::Skip);
    if (variant == "without-vo") o.bypass(DtrBypass::None);
    if (variant == "masked") o.attention(DtrAttention::Masked);
    DTRNet model(shape, o);
    if (variant == "expert")  // let the untrained predictor select about half of the tokens
      for (auto& layer : model.routed)
        if (layer) {
          torch::NoGradGuard no_grad;
          layer->predictor->linear->weight.normal_(0, 1.0);
        }
    check_causal(model, 29);
  }

  void registryEntryChecksItsKeys() {
    const auto& entry = architecture("dtrnet");
    auto m = schema_defaults(entry.options);
    m["n_layer"] = 4;
    entry.check(m, "model");
    m["routed_layers"] = "T-D-T";
    try {
      entry.check(m, "model");
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).startsWith("model.routed_layers: 'T-D-T' names 3 layers"), e.what());
    }
    m["routed_layers"] = "none";
    QVERIFY_THROWS_EXCEPTION(ConfigError, entry.check(m, "model"));
    m["routed_layers"] = "1";
    m["max_seq_len"] = 16;
    m["arch"] = "dtrnet";
    const auto model = create_model(m, {29, 16});
    QCOMPARE(QString::fromStdString(model->arch_id()), QString("dtrnet"));
    QVERIFY(QString::fromStdString(model->describe()).contains("T-D-T-T"));
  }

  void aStepInsideAutocastWithAutocastOffIsTheTopLevelStep() {
    // A training step called inside an autocast region (a benchmark's) under AutocastOff runs as train_step does at
    // the top level, autocast for its forward only: the same gradients bit for bit. Without AutocastOff its backward
    // runs under autocast too, which re-casts the fp32 router's products to bf16: other gradients.
    const auto x = torch::randint(0, 29, {2, 16}, torch::kLong), y = torch::randint(0, 29, {2, 16}, torch::kLong);
    enum class Mode { TopLevel, InsideWithOff, Inside };
    const auto step_grads = [&](Mode mode) {
      torch::manual_seed(3);
      DTRNet model(small(ModelStyle::Llama), DTRNetOptions());
      auto opt = make_optimizer(model, nlohmann::json::parse(
                                           R"({"lr":0.0,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
      std::optional<AutocastGuard> outer;
      std::optional<AutocastOff> off;
      if (mode != Mode::TopLevel) outer.emplace(true, torch::kCPU);
      if (mode == Mode::InsideWithOff) off.emplace(torch::kCPU);
      train_step(model, *opt, {x, y, {}}, 1.0, /*bf16=*/true, /*trace=*/false);
      return grads_of(model);
    };
    const auto top = step_grads(Mode::TopLevel), with_off = step_grads(Mode::InsideWithOff),
               inside = step_grads(Mode::Inside);
    bool any = false, all_equal = true, inside_differs = false;
    for (std::size_t i = 0; i < top.size(); ++i) {
      any = any || top[i].abs().sum().item<double>() > 0;
      all_equal = all_equal && torch::equal(top[i], with_off[i]);
      inside_differs = inside_differs || !torch::equal(top[i], inside[i]);
    }
    QVERIFY(any);
    QVERIFY2(all_equal, "a step under AutocastOff differs from the top-level step");
    QVERIFY2(inside_differs, "a backward under autocast changed nothing: the check above cannot fail");
  }

  void tinyBatchOverfits() {
    DTRNet model(small(ModelStyle::Llama), DTRNetOptions());
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, 29, {4, 16}, torch::kLong), y = torch::randint(0, 29, {4, 16}, torch::kLong);
    double first = 0, last = 0;
    for (int i = 0; i < 150; ++i) {
      last = train_step(model, *opt, {x, y, {}}, 1.0, false, false).loss.item<double>();
      if (i == 0) first = last;
    }
    QVERIFY2(last < 0.2 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
  }
};

}  // namespace test_dtrnet

ROUTELAB_TEST_SUITE(test_dtrnet, TestDTRNet)
#include "test_dtrnet.moc"
