// Token-Selective Attention: router init and width, the gated updates against hand references, the TLOps formula
// and depth loss on hand-made gates, sparse mode equal to soft mode on binary gates, causality in every mode,
// traces' FLOPs, residual ratios, registry and config errors, checkpoint re-evaluation, overfitting, the bench, sparse
// inference's FFN rows sized from earlier forwards against exact counts.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include <torch/torch.h>

#include "core/bench/speed_options_bench.h"
#include "core/config/experiment_config.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"

#include "model_test_support.h"
#include "tests/deferred_sizing.h"
#include "tests/suite.h"

namespace test_tsa {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 37;

TransformerOptions small(ModelStyle style = ModelStyle::GPT2, std::int64_t kv_heads = 0, std::int64_t layers = 4) {
  return test::small_transformer(style, kv_heads, layers, kVocab, 64);
}

using test::add_style_rows;

/// Router l outputs the constant halting probability probs[l] (zero final weights, bias logit(p)).
void force_constant_gates(TokenSelectiveAttention& model, const std::vector<double>& probs) {
  torch::NoGradGuard no_grad;
  for (std::size_t l = 0; l < model.routers.size(); ++l) {
    model.routers[l]->fc2->weight.zero_();
    model.routers[l]->fc2->bias.fill_(std::log(probs[l] / (1.0 - probs[l])));
  }
}

/// Router outputs of order `scale` around 0: a per-token mix of halting and running.
void spread_routers(TokenSelectiveAttention& model, double scale) {
  torch::NoGradGuard no_grad;
  for (auto& r : model.routers) {
    r->fc1->weight.normal_(0.0, 1.0);
    r->fc1->bias.zero_();
    r->fc2->weight.normal_(0.0, scale);
    r->fc2->bias.zero_();
  }
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

class TestTsa : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(11); }

  void routerInitAndWidth_data() {
    QTest::addColumn<int>("d");
    QTest::addColumn<int>("hidden");
    QTest::newRow("d 32: floor 16") << 32 << 16;
    QTest::newRow("d 64: d/4 = 16") << 64 << 16;
    QTest::newRow("d 256: d/4") << 256 << 64;
  }
  void routerInitAndWidth() {
    QFETCH(int, d);
    QFETCH(int, hidden);
    QCOMPARE(tsa_router_hidden(d), std::int64_t(hidden));
    TransformerOptions o = small();
    o.n_embd(d).n_head(4).n_layer(3);
    TokenSelectiveAttention model(o);
    QCOMPARE(model.routers.size(), std::size_t(2));  // after blocks 0 .. L-2
    for (auto& r : model.routers) {
      QCOMPARE(r->fc1->weight.sizes().vec(), (std::vector<std::int64_t>{hidden, d}));
      QCOMPARE(r->fc2->weight.sizes().vec(), (std::vector<std::int64_t>{1, hidden}));
      // The final bias survives the trunk's init (which zeroes biases).
      QCOMPARE(r->fc2->bias.item<double>(), -1.0);
      QCOMPARE(r->fc1->bias.abs().sum().item<double>(), 0.0);
      std::int64_t n = 0;
      for (const auto& p : r->parameters()) n += p.numel();
      // §2.2: d^2/4 + d/2 + 1 parameters per router where d/4 >= 16.
      QCOMPARE(n, std::int64_t(d) * hidden + 2 * hidden + 1);
      if (d / 4 >= 16) QCOMPARE(n, std::int64_t(d) * d / 4 + d / 2 + 1);
    }
    // At init p ~ sigmoid(-1) = 0.269 for every token: the small N(0, 0.02) weights barely move it.
    const auto out = model.forward(torch::randint(0, kVocab, {2, 12}, torch::kLong), true);
    for (std::size_t l = 1; l < out.trace.size(); ++l)
      QVERIFY(std::abs(out.trace[l].gate.mean().item<double>() - (1.0 - 1.0 / (1.0 + std::exp(1.0)))) < 0.02);
  }

  void forwardShapesAndTrace_data() { add_style_rows(); }
  void forwardShapesAndTrace() {
    QFETCH(int, style);
    QFETCH(int, kv);
    TokenSelectiveAttention model(small(ModelStyle(style), kv), TsaOptions().depth_coeff(0.01));
    QCOMPARE(model.arch_id(), std::string("tsa"));
    const std::int64_t B = 3, T = 10;
    const auto out = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong), true);
    QCOMPARE(out.logits.sizes().vec(), (std::vector<std::int64_t>{B, T, kVocab}));
    QVERIFY(out.exit_logits.empty());
    QCOMPARE(out.trace.size(), std::size_t(4));
    const auto shape = layer_shape(model.options());
    const double router = 2.0 * B * T * (32 * 16 + 16 * 1);
    QCOMPARE(out.trace[0].kind, std::string("dense"));
    QVERIFY(!out.trace[0].routed);
    QCOMPARE(out.trace[0].flops, dense_layer_flops(B, T, shape));
    double gate_sum = 0;
    for (int l = 1; l < 4; ++l) {
      const auto& t = out.trace[std::size_t(l)];
      QCOMPARE(t.layer, l);
      QCOMPARE(t.kind, std::string("tsa"));
      QVERIFY(t.routed);
      QCOMPARE(t.gate.sizes().vec(), (std::vector<std::int64_t>{B, T}));
      QCOMPARE(t.gate.scalar_type(), torch::kFloat);
      QVERIFY(!t.gate.requires_grad());
      QCOMPARE(t.decision.scalar_type(), torch::kBool);
      QVERIFY(torch::equal(t.decision, t.gate.ge(0.5)));  // p <= 0.5
      // Soft training: everything runs, plus the router.
      QVERIFY(std::abs(t.routed_fraction - t.gate.mean().item<double>()) < 1e-9);
      QCOMPARE(t.tokens_processed.at("mlp"), B * T);
      QCOMPARE(t.tokens_processed.at("router"), B * T);
      QVERIFY(std::abs(t.flops - (dense_layer_flops(B, T, shape) + router)) < 1e-9 * t.flops);
      QCOMPARE(t.dense_flops, dense_layer_flops(B, T, shape));
      QCOMPARE(t.stats.at("active_share"), t.decision.to(torch::kDouble).mean().item<double>());
      gate_sum += t.gate.to(torch::kDouble).mean().item<double>();
    }
    const double alpha = gate_sum / 3;
    QVERIFY(std::abs(out.stats.at("alpha") - alpha) < 1e-6);
    QVERIFY(std::abs(out.stats.at("tlops_saved") - (1.0 - (1.0 + 3 * alpha) / 4)) < 1e-6);
    QVERIFY(std::abs(out.aux_loss.item<double>() - 0.01 * alpha) < 1e-7);
    QVERIFY(out.aux_loss.requires_grad());
    QVERIFY(model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong)).trace.empty());
    QVERIFY(model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong)).stats.empty());
  }

  void tlopsFormulaOnHandGates() {
    // The paper's own operating points (L = 6): copy alpha 0.341 -> 54.9% saved, Shakespeare 0.726 -> 22.8%.
    QVERIFY(std::abs(tlops_from_active({0.341, 0.341, 0.341, 0.341, 0.341}).saved - 0.549167) < 1e-6);
    QVERIFY(std::abs(tlops_from_active({0.726, 0.726, 0.726, 0.726, 0.726}).saved - 0.228333) < 1e-6);
    // Hand-made gates on a 4-layer model: active 1 - p = (0.5, 1.0, 0.25) -> alpha 7/12, saved 1 - 2.75/4.
    const auto t = tlops_from_active({0.5, 1.0, 0.25});
    QVERIFY(std::abs(t.alpha - 7.0 / 12.0) < 1e-12);
    QVERIFY(std::abs(t.saved - 0.3125) < 1e-12);
    QCOMPARE(tlops_from_active({1.0, 1.0}).saved, 0.0);
    QVERIFY(std::abs(tlops_from_active({0.0, 0.0, 0.0}).saved - 0.75) < 1e-12);  // only the stem runs

    // The same gates forced through the model, in training and in both eval modes.
    TokenSelectiveAttention model(small(), TsaOptions().depth_coeff(0.2));
    force_constant_gates(model, {0.5, 0.0001, 0.75});
    const auto tokens = torch::randint(0, kVocab, {2, 9}, torch::kLong);
    for (const auto mode : {0, 1, 2}) {
      model.train(mode == 0);
      model.set_inference(mode == 2 ? TsaInference::Sparse : TsaInference::Soft);
      const auto out = model.forward(tokens, true);
      const double alpha = (0.5 + 0.9999 + 0.25) / 3;
      QVERIFY(std::abs(out.stats.at("alpha") - alpha) < 1e-6);
      QVERIFY(std::abs(out.stats.at("tlops_saved") - (1.0 - (1.0 + 3 * alpha) / 4)) < 1e-6);
      // p <= 0.5 keeps the first two blocks' tokens and halts the third's.
      QVERIFY(std::abs(out.stats.at("alpha_hard") - 2.0 / 3.0) < 1e-12);
      QVERIFY(std::abs(out.stats.at("tlops_saved_hard") - 0.25) < 1e-12);
      QVERIFY(std::abs(out.aux_loss.item<double>() - 0.2 * alpha) < 1e-6);
      QVERIFY(std::abs(out.trace[1].aux_loss - 0.5 / 3) < 1e-6);
      // Sparse: the halted block's FFN runs for nobody; soft: for everybody.
      QCOMPARE(out.trace[3].tokens_processed.at("mlp"), std::int64_t(mode == 2 ? 0 : 18));
      QCOMPARE(out.trace[3].routed_fraction, mode == 2 ? 0.0 : out.trace[3].gate.mean().item<double>());
    }
  }

  void depthLossGradientPath() {
    const double lambda = 0.3;
    TokenSelectiveAttention model(small(), TsaOptions().depth_coeff(lambda));
    const std::vector<double> probs = {0.2, 0.6, 0.9};
    force_constant_gates(model, probs);
    const auto tokens = torch::randint(0, kVocab, {2, 8}, torch::kLong);
    model.forward(tokens).aux_loss.backward();
    // d/db2_l of lambda (1/(L-1)) sum_l mean(1 - sigmoid(b2_l)) = -lambda/(L-1) p_l (1 - p_l).
    for (std::size_t l = 0; l < 3; ++l) {
      const double expected = -lambda / 3.0 * probs[l] * (1.0 - probs[l]);
      QVERIFY2(std::abs(model.routers[l]->fc2->bias.grad().item<double>() - expected) < 1e-6,
               qPrintable(QString("router %1: %2 vs %3").arg(l).arg(model.routers[l]->fc2->bias.grad().item<double>())
                              .arg(expected)));
    }
    // With live routers the depth loss reaches the blocks that feed them, never the last block (it feeds none)
    // nor the head.
    model.zero_grad();
    spread_routers(model, 0.5);
    model.forward(tokens).aux_loss.backward();
    const auto params = model.named_parameters();
    QVERIFY(params["routers.0.fc1.weight"].grad().abs().sum().item<double>() > 0);
    QVERIFY(params["blocks.0.mlp.down.weight"].grad().abs().sum().item<double>() > 0);
    QVERIFY(params["blocks.2.attn.proj.weight"].grad().abs().sum().item<double>() > 0);
    const auto last = params["blocks.3.mlp.down.weight"].grad();
    QVERIFY(!last.defined() || last.abs().sum().item<double>() == 0);
    // The task loss trains the routers through the gates alone (§2.3: the interpolation keeps the gradient).
    model.zero_grad();
    const auto out = model.forward(tokens);
    lm_loss(out.logits, tokens, {}).backward();
    for (auto& r : model.routers) QVERIFY(r->fc2->weight.grad().abs().sum().item<double>() > 0);
  }

  void gatedUpdatesMatchHandReference_data() {
    add_style_rows();
  }
  void gatedUpdatesMatchHandReference() {
    QFETCH(int, style);
    QFETCH(int, kv);
    for (const bool sparse : {false, true}) {
      TokenSelectiveAttention model(small(ModelStyle(style), kv, 3),
                                    TsaOptions().inference(sparse ? TsaInference::Sparse : TsaInference::Soft));
      spread_routers(model, 0.5);
      model.eval();
      torch::NoGradGuard no_grad;
      const std::int64_t B = 3, T = 11;
      const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
      const auto positions = torch::arange(T);
      auto params = model.named_parameters();
      // Reference: eqs. 1, 3, 4 written out densely; sparse multiplies the gate by 1[p <= 0.5] and runs the FFN
      // for every token (the model gathers the active rows instead).
      auto x = at::embedding(params["tok_emb.weight"], tokens);  // (B, T, C)
      if (ModelStyle(style) == ModelStyle::GPT2) x = x + params["pos_emb.weight"].narrow(0, 0, T);
      auto h = model.blocks[0]->forward(x, positions);
      std::int64_t halted = 0, ran = 0;
      for (std::size_t l = 0; l < 2; ++l) {
        const auto p = torch::sigmoid(model.routers[l]->logits(h));  // (B, T)
        auto g = 1.0 - p;
        if (sparse) g = g * p.le(0.5).to(torch::kFloat);
        halted += p.gt(0.5).sum().item<std::int64_t>();
        ran += p.le(0.5).sum().item<std::int64_t>();
        auto& block = model.blocks[l + 1];
        h = h + g.unsqueeze(-1) * block->attn(block->norm1(h), positions);
        h = h + g.unsqueeze(-1) * block->mlp(block->norm2(h));
      }
      QVERIFY(halted > 3 && ran > 3);  // a real mix of decisions
      const auto final_norm = std::dynamic_pointer_cast<NormImpl>(model.named_children()["final_norm"]);
      QVERIFY(final_norm);
      const auto expected = at::linear(final_norm->forward(h), params["tok_emb.weight"]);  // tied head
      const auto out = model.forward(tokens, true);
      QVERIFY2(torch::allclose(out.logits, expected, 1e-4, 1e-5),
               qPrintable(QString("max diff %1").arg(max_diff(out.logits, expected))));
      QVERIFY(torch::equal(out.logits, model.forward(tokens).logits));  // tracing changes nothing
      if (sparse) QVERIFY(out.trace[2].tokens_processed.at("mlp") < B * T);
    }
  }

  void sparseEqualsSoftOnBinaryGates_data() { add_style_rows(); }
  void sparseEqualsSoftOnBinaryGates() {
    QFETCH(int, style);
    QFETCH(int, kv);
    TokenSelectiveAttention model(small(ModelStyle(style), kv));
    spread_routers(model, 1e5);  // |logit| in the thousands: sigmoid gives exactly 0 or 1 in fp32
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t B = 4, T = 16;
    const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
    model.set_inference(TsaInference::Soft);
    const auto soft = model.forward(tokens, true);
    std::int64_t halted = 0;
    for (std::size_t l = 1; l < soft.trace.size(); ++l) {
      const auto& g = soft.trace[l].gate;
      QVERIFY2(torch::logical_or(g.eq(0), g.eq(1)).all().item<bool>(), "gates are not binary");
      halted += g.eq(0).sum().item<std::int64_t>();
    }
    QVERIFY(halted > 5 && halted < 3 * B * T - 5);
    model.set_inference(TsaInference::Sparse);
    const auto sparse = model.forward(tokens, true);
    QVERIFY2(torch::allclose(sparse.logits, soft.logits, 1e-5, 1e-5),
             qPrintable(QString("max diff %1").arg(max_diff(sparse.logits, soft.logits))));
    for (std::size_t l = 1; l < soft.trace.size(); ++l) {
      const auto active = sparse.trace[l].decision.sum().item<std::int64_t>();
      QCOMPARE(sparse.trace[l].tokens_processed.at("mlp"), active);
      QCOMPARE(sparse.trace[l].tokens_processed.at("attn"), B * T);  // attention stays dense
      QCOMPARE(sparse.trace[l].routed_fraction, double(active) / double(B * T));
      const auto shape = layer_shape(model.options());
      const double expected = dense_layer_flops(B, T, shape) - mlp_flops(B * T - active, shape) +
                              2.0 * B * T * (32 * 16 + 16);
      QVERIFY(std::abs(sparse.trace[l].flops - expected) < 1e-9 * expected);
      QVERIFY(sparse.trace[l].flops <= soft.trace[l].flops);
    }
    QCOMPARE(sparse.stats.at("alpha"), soft.stats.at("alpha"));
  }

  void sizedSparseFfnEqualsExactCounts_data() { add_style_rows(); }
  void sizedSparseFfnEqualsExactCounts() {
    // Sparse inference's FFN rows sized from the previous forward (a GPU; forced here): after one forward that counts
    // exactly, each block gathers a capacity of rows without reading its count back, and the model reads every
    // block's count once; logits and the traced counts are the exact forward's, the FFN priced at the rows it ran.
    // Rows too few for a block's active tokens run the forward again with exact counts.
    QFETCH(int, style);
    QFETCH(int, kv);
    TokenSelectiveAttention model(small(ModelStyle(style), kv), TsaOptions().inference(TsaInference::Sparse));
    spread_routers(model, 1.0);
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t B = 3, T = 40;
    const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
    ModelOutput exact;
    {
      const ExactRoutedCounts counted;
      exact = model.forward(tokens, true);
    }
    const ForcePaddedSized sized_rows;
    std::vector<std::int64_t> active(model.sized_ffn.size());
    for (std::size_t l = 0; l < active.size(); ++l) {
      active[l] = exact.trace[l + 1].tokens_processed.at("mlp");
      QVERIFY2(active[l] > 3 && active[l] < B * T - 8, "the spread routers should halt a mix of tokens");
      QCOMPARE(model.sized_ffn[l].tokens, B * T);
      QCOMPARE(model.sized_ffn[l].capacity, next_capacity(active[l], 0, B * T));
      QVERIFY(!model.sized_ffn[l].counts.defined());
      model.sized_ffn[l].capacity = active[l] + 5;  // below the 120 tokens next_capacity may round up to
    }
    const auto check = [&](const ModelOutput& out, const char* what) {
      QVERIFY2(torch::allclose(out.logits, exact.logits, 1e-5, 1e-5),
               qPrintable(QString("%1: max diff %2").arg(what).arg(max_diff(out.logits, exact.logits))));
      QCOMPARE(out.trace.size(), exact.trace.size());
      for (std::size_t i = 0; i < out.trace.size(); ++i) {
        QCOMPARE(out.trace[i].routed_fraction, exact.trace[i].routed_fraction);
        QCOMPARE(out.trace[i].tokens_processed, exact.trace[i].tokens_processed);
        QCOMPARE(out.trace[i].stats, exact.trace[i].stats);
        if (exact.trace[i].routed) QVERIFY(torch::equal(out.trace[i].decision, exact.trace[i].decision));
      }
      QCOMPARE(out.stats, exact.stats);
    };
    const auto sized = model.forward(tokens, true);
    check(sized, "sized");
    const auto shape = layer_shape(model.options());
    for (std::size_t l = 0; l < active.size(); ++l) {
      QVERIFY(model.sized_ffn[l].counts.defined());  // it ran sized, priced at its 5 rows more than active
      QCOMPARE(model.sized_ffn[l].rows.capacity, active[l] + 5);
      const double extra = sized.trace[l + 1].flops - exact.trace[l + 1].flops;
      QVERIFY2(std::abs(extra - mlp_flops(5.0, shape)) < 1e-9 * sized.trace[l + 1].flops,
               qPrintable(QString::number(extra)));
    }
    model.sized_ffn[1].capacity = 1;  // fewer rows than the block's active tokens
    const auto rerun = model.forward(tokens, true);
    check(rerun, "overflowed");
    QVERIFY(!model.sized_ffn[1].counts.defined());  // the rerun counted exactly
    QVERIFY(model.sized_ffn[1].capacity >= active[1]);
    // Untraced under DeferredTraceReadback (a forward captured as a CUDA graph): settled only after the forward.
    test::check_deferred_sizing(model, tokens, exact.logits, [&] { model.sized_ffn[1].capacity = 1; });
    if (QTest::currentTestFailed()) return;
    QCOMPARE(model.sized_ffn[1].capacity, std::int64_t{1});  // sized afresh by an exact rerun, not by these counts
    model.set_inference(TsaInference::Soft);  // soft inference runs every row: nothing sized
    model.forward(tokens, true);
    for (const auto& s : model.sized_ffn) QVERIFY(!s.counts.defined());
  }

  void inferenceOptionOnlyAffectsEval() {
    TokenSelectiveAttention a(small(), TsaOptions().inference(TsaInference::Soft));
    torch::manual_seed(11);
    TokenSelectiveAttention b(small(), TsaOptions().inference(TsaInference::Sparse));
    spread_routers(a, 0.5);
    {
      torch::NoGradGuard no_grad;
      const auto pa = a.named_parameters();
      auto pb = b.named_parameters();
      QCOMPARE(pa.size(), pb.size());  // no parameters of its own
      for (const auto& item : pa) pb[item.key()].copy_(item.value());
    }
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    QVERIFY(torch::equal(a.forward(tokens).logits, b.forward(tokens).logits));  // training: soft in both
    a.eval();
    b.eval();
    torch::NoGradGuard no_grad;
    QVERIFY(!torch::allclose(a.forward(tokens).logits, b.forward(tokens).logits, 1e-4, 1e-4));
  }

  void causality_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("mode");  // 0 training soft, 1 eval soft, 2 eval sparse
    QTest::newRow("gpt2 train") << int(ModelStyle::GPT2) << 0 << 0;
    QTest::newRow("gpt2 eval soft") << int(ModelStyle::GPT2) << 0 << 1;
    QTest::newRow("gpt2 eval sparse") << int(ModelStyle::GPT2) << 0 << 2;
    QTest::newRow("llama train") << int(ModelStyle::Llama) << 0 << 0;
    QTest::newRow("llama-gqa eval soft") << int(ModelStyle::Llama) << 2 << 1;
    QTest::newRow("llama-gqa eval sparse") << int(ModelStyle::Llama) << 2 << 2;
  }
  void causality() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(int, mode);
    TokenSelectiveAttention model(small(ModelStyle(style), kv),
                                  TsaOptions().inference(mode == 2 ? TsaInference::Sparse : TsaInference::Soft));
    spread_routers(model, 0.5);
    model.train(mode == 0);
    torch::NoGradGuard no_grad;
    const std::int64_t T = 16;
    const auto a = torch::randint(0, kVocab, {2, T}, torch::kLong);
    for (const auto& t : model.forward(a, true).trace)
      if (t.routed)
        QVERIFY2(t.stats.at("active_share") > 0.1 && t.stats.at("active_share") < 0.9,
                 qPrintable(QString::number(t.stats.at("active_share"))));
    for (std::int64_t t : {0, 6, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
      const auto la = model.forward(a).logits, lb = model.forward(b).logits;
      QVERIFY(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-6));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
    }
  }

  void residualRatios() {
    TokenSelectiveAttention model(small());
    force_constant_gates(model, {0.3, 0.3, 0.3});
    model.eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {2, 8}, torch::kLong);
    // p = 1 (bias +200): a routed block adds nothing; soft reports ratio 0, sparse marks the tokens skipped.
    {
      for (auto& r : model.routers) r->fc2->bias.fill_(200.0);
      for (const auto mode : {TsaInference::Soft, TsaInference::Sparse}) {
        model.set_inference(mode);
        ResidualProbe probe;
        model.forward(tokens);
        QCOMPARE(probe.samples.size(), std::size_t(8));  // attn and mlp of every block
        for (const auto& s : probe.samples) {
          QCOMPARE(s.ratio.sizes().vec(), (std::vector<std::int64_t>{2, 8}));
          if (s.layer == 0)
            QVERIFY(s.ratio.gt(0).all().item<bool>());
          else if (mode == TsaInference::Soft)
            QCOMPARE(s.ratio.abs().max().item<double>(), 0.0);
          else
            QVERIFY(s.ratio.isnan().all().item<bool>());
        }
      }
    }
    // p = 0.3: the recorded update is the gated one, 0.7 of the block's own delta.
    {
      force_constant_gates(model, {0.3, 0.3, 0.3});
      model.set_inference(TsaInference::Soft);
      ResidualProbe gated;
      model.forward(tokens);
      std::vector<torch::Tensor> gated_ratios;
      for (const auto& s : gated.samples) gated_ratios.push_back(s.ratio);
      QCOMPARE(gated_ratios.size(), std::size_t(8));
      QVERIFY(gated_ratios[2].gt(0).all().item<bool>());  // layer 1 attn
      // Layer 1's attention sees the same stream whatever its gate: its ratio scales with (1 - p).
      force_constant_gates(model, {0.65, 0.3, 0.3});
      gated.samples.clear();
      model.forward(tokens);
      QVERIFY(torch::allclose(gated.samples[2].ratio, gated_ratios[2] * (0.35 / 0.7), 1e-4, 1e-6));
    }
  }

  void registryEntryAndDecay() {
    const auto& entry = architecture("tsa");
    QCOMPARE(entry.display_name, std::string("Token-Selective Attention"));
    auto model_json = schema_defaults(entry.options);
    model_json["arch"] = "tsa";
    QCOMPARE(model_json.at("depth_coeff").get<double>(), 0.001);
    QCOMPARE(model_json.at("inference").get<std::string>(), std::string("soft"));
    model_json["inference"] = "sparse";
    model_json["depth_coeff"] = 0.05;
    model_json["style"] = "gpt2";
    model_json["n_layer"] = 6;
    entry.check(model_json, "model");
    const auto model = create_model(model_json, {37, 32});
    auto* tsa = dynamic_cast<TokenSelectiveAttention*>(model.get());
    QVERIFY(tsa);
    QVERIFY(tsa->tsa_options().inference() == TsaInference::Sparse);
    QCOMPARE(tsa->tsa_options().depth_coeff(), 0.05);
    QCOMPARE(tsa->routers.size(), std::size_t(5));
    const auto params = tsa->named_parameters();
    // App. A: residual projections at 0.02/sqrt(2L) = 0.0041, other matrices at 0.02, router bias -1.
    QVERIFY(params["blocks.3.attn.proj.weight"].std().item<double>() < 0.006);
    QVERIFY(params["blocks.3.mlp.down.weight"].std().item<double>() < 0.006);
    QVERIFY(params["blocks.3.attn.qkv.weight"].std().item<double>() > 0.017);
    QVERIFY(params["routers.4.fc1.weight"].std().item<double>() > 0.017);
    QCOMPARE(params["routers.4.fc2.bias"].item<double>(), -1.0);
    QVERIFY(!params.contains("lm_head.weight"));  // tied
    // No weight decay on biases, norms and embeddings; the matrices (routers' included) decay.
    QVERIFY(tsa->decays("routers.0.fc1.weight", params["routers.0.fc1.weight"]));
    QVERIFY(tsa->decays("blocks.1.mlp.up.weight", params["blocks.1.mlp.up.weight"]));
    QVERIFY(!tsa->decays("routers.0.fc2.bias", params["routers.0.fc2.bias"]));
    QVERIFY(!tsa->decays("blocks.1.norm1.weight", params["blocks.1.norm1.weight"]));
    QVERIFY(!tsa->decays("tok_emb.weight", params["tok_emb.weight"]));
    QVERIFY(!tsa->decays("pos_emb.weight", params["pos_emb.weight"]));
    QVERIFY(QString::fromStdString(tsa->describe()).contains("sparse"));
  }

  // Cross-field rules of this architecture; every option out of its schema range or of the wrong type is checked
  // for every architecture by test_conformance.
  void configErrorNamesKey_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("key");
    QTest::newRow("one layer") << R"({"arch":"tsa","n_layer":1})" << "model.n_layer";
    QTest::newRow("heads") << R"({"arch":"tsa","n_head":3})" << "model.n_head";
  }
  void configErrorNamesKey() {
    QFETCH(QString, overrides);
    QFETCH(QString, key);
    test::check_config_error_names_key(overrides, key, "tsa");
  }

  void presetsResolve() {
    for (const auto* name : {"tsa-copy", "tsa-sort", "tsa-charlm"}) {
      const auto c = preset_config(name);
      QCOMPARE(c.arch(), std::string("tsa"));
      QCOMPARE(c.model().at("style").get<std::string>(), std::string("gpt2"));
      QCOMPARE(c.train().at("beta2").get<double>(), 0.95);
      QCOMPARE(c.train().at("weight_decay").get<double>(), 0.1);
    }
    QCOMPARE(preset_config("tsa-copy").model().at("n_embd").get<int>(), 128);
    QCOMPARE(preset_config("tsa-copy").train().at("steps").get<int>(), 10000);
    QCOMPARE(preset_config("tsa-charlm").model().at("n_embd").get<int>(), 256);
    QCOMPARE(preset_config("tsa-charlm").data().at("context").get<int>(), 128);
    QCOMPARE(preset_config("tsa-charlm").train().at("batch_size").get<int>(), 64);
    // The eval-only option is settable on a preset.
    QCOMPARE(preset_config("tsa-charlm", {"model.inference=sparse"}).model().at("inference").get<std::string>(),
             std::string("sparse"));
  }

  void checkpointReevaluatedSparse() {
    QTemporaryDir dir;
    const auto path = dir.filePath("tsa.pt").toStdString();
    auto a = std::make_shared<TokenSelectiveAttention>(small());
    auto opt = make_optimizer(*a, nlohmann::json::parse(
                                      R"({"lr":1e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1})"));
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    train_step(*a, *opt, {tokens, tokens, {}}, 1.0, false, false);
    save_checkpoint(path, *a, *opt, {1, 0, 0, "{}", "{}", 0, ""});
    torch::manual_seed(99);
    auto soft = std::make_shared<TokenSelectiveAttention>(small());
    auto sparse = std::make_shared<TokenSelectiveAttention>(small(), TsaOptions().inference(TsaInference::Sparse));
    load_checkpoint(path, *soft, nullptr);
    load_checkpoint(path, *sparse, nullptr);
    a->eval();
    soft->eval();
    sparse->eval();
    torch::NoGradGuard no_grad;
    QVERIFY(torch::equal(a->forward(tokens).logits, soft->forward(tokens).logits));
    // Every p is still about 0.27 < 0.5 after one step: sparse runs every token with the same (1 - p) weights as
    // soft, so the two agree.
    QVERIFY(torch::allclose(sparse->forward(tokens).logits, soft->forward(tokens).logits, 1e-5, 1e-5));
    QCOMPARE(sparse->forward(tokens, true).stats.at("alpha_hard"), 1.0);
  }

  void tinyBatchOverfits() {
    TokenSelectiveAttention model(small(), TsaOptions().depth_coeff(0.01));
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {4, 16}, torch::kLong), y = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    double first = 0, last = 0;
    for (int i = 0; i < 100; ++i) {
      const auto r = train_step(model, *opt, {x, y, {}}, 1.0, false, false);
      last = r.loss.item<double>();
      if (i == 0) first = last;
    }
    QVERIFY2(last < 0.1 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
  }

  void bf16StepRuns() {
    TokenSelectiveAttention model(small());
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    const auto r = train_step(model, *opt, {x, x, {}}, 1.0, /*bf16=*/true, /*trace=*/true);
    QVERIFY(std::isfinite(r.loss.item<double>()) && std::isfinite(r.aux_loss.item<double>()));
    QVERIFY(r.output.stats.count("alpha"));
    model.eval();
    model.set_inference(TsaInference::Sparse);
    torch::NoGradGuard no_grad;
    AutocastGuard autocast(true, torch::kCPU);
    QVERIFY(std::isfinite(model.forward(x, true).logits.to(torch::kFloat).sum().item<double>()));
  }

  void benchForcesActiveFraction() {
    // The generic speed-options bench on TSA: its hook forces the active share, sparse runs fewer FLOPs than soft.
    SpeedBenchOptions o;
    o.arch = "tsa";
    o.batch = 4;
    o.seq = 32;
    o.n_embd = 32;
    o.n_layer = 4;
    o.n_head = 4;
    o.d_ff = 64;
    o.vocab = 17;
    o.warmup = 0;
    o.reps = 1;
    o.threads = 1;
    o.fractions = {1.0, 0.726, 0.25, 0.0};
    const auto r = bench_speed_options(o);
    QCOMPARE(r.rows.size(), std::size_t(4));
    for (const auto& row : r.rows) {
      QVERIFY2(std::abs(row.share - row.target) < 1.0 / 128, qPrintable(QString("%1 vs %2").arg(row.share).arg(row.target)));
      QVERIFY(row.dense_ms > 0 && row.base_ms > 0 && row.fast_ms > 0);
      QVERIFY(row.base_flops_ratio > 1.0);  // soft runs everything plus the routers
      QVERIFY(row.fast_flops_ratio <= row.base_flops_ratio);
    }
    QVERIFY(r.rows[3].fast_flops_ratio < r.rows[1].fast_flops_ratio);
    const auto table = QString::fromStdString(r.to_table());
    QVERIFY2(table.contains("fast_ms") && table.contains("0.726") && table.contains("sparse"), qPrintable(table));
    o.arch = "dense";  // no speed options: refused by name
    try {
      bench_speed_options(o);
      QFAIL("dense has no speed options");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("'dense' has no speed options"), e.what());
    }
  }

};

}  // namespace test_tsa

ROUTELAB_TEST_SUITE(test_tsa, TestTsa)
#include "test_tsa.moc"
