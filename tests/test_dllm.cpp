// D-LLM: shapes and trace, reserved tokens, the straight-through Gumbel flag, skipping and eviction in both
// execution forms, the rate loss and its sine ramp, the router bias init, causality, config errors and overfitting.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/cost/flop_counter.h"
#include "core/models/blocks/attention.h"
#include "core/models/dllm.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"
#include "core/util/process.h"
#include "tests/deferred_sizing.h"
#include "tests/eviction_support.h"
#include "tests/suite.h"

namespace test_dllm {

using namespace routelab;
using routelab::test::output_and_gradients;

namespace {

constexpr std::int64_t kVocab = 37;
/// An eviction test's `chunk` for the flash form (LibTorch's CPU flash attention here; the same function runs CUDA's
/// on a GPU) and for the CPU kernel; chunk >= 0 is the chunked form with that many rows per chunk (0 automatic).
constexpr int kFlash = -1;
constexpr int kCpuKernel = -2;
/// The flash form as the memory-efficient kernel takes it: key/value heads repeated to every query head and their
/// gradients summed back over each group (on the CPU around LibTorch's CPU flash attention).
constexpr int kEfficient = -3;

/// Four layers: the first two always execute, the last two have decision modules (the default "after-2").
TransformerOptions small(ModelStyle style = ModelStyle::Llama, std::int64_t kv_heads = 0) {
  TransformerOptions o;
  o.style(style).vocab_size(kVocab).max_seq_len(32).n_layer(4).n_embd(32).n_head(4).n_kv_head(kv_heads);
  return o;
}

DLLMOptions small_dllm() { return DLLMOptions().router_hidden(16); }

/// Sets the final bias of every decision module: column 0 = skip, column 1 = execute.
void set_bias(DLLM& model, float skip, float execute) {
  torch::NoGradGuard no_grad;
  for (auto& r : model.routers)
    if (r) r->fc2->bias.copy_(torch::tensor({skip, execute}));
}

/// Large final weights and a neutral bias: execute probabilities spread far to both sides of 0.5.
void make_decisions_mixed(DLLM& model) {
  torch::NoGradGuard no_grad;
  for (auto& r : model.routers) {
    if (!r) continue;
    r->fc2->weight.normal_(0.0, 1.0);
    r->fc2->bias.zero_();
  }
}

/// (B, T) bool: random decisions with the reserved first tokens executed.
torch::Tensor random_decisions(std::int64_t B, std::int64_t T, std::int64_t reserved) {
  auto d = torch::rand({B, T}).lt(0.5);
  d.narrow(1, 0, reserved).fill_(true);
  return d;
}

}  // namespace

class TestDLLM : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(7); }

  void forwardShapesAndTrace_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("training");
    QTest::newRow("llama-train") << int(ModelStyle::Llama) << 0 << true;
    QTest::newRow("llama-eval") << int(ModelStyle::Llama) << 0 << false;
    QTest::newRow("gqa-train") << int(ModelStyle::Llama) << 2 << true;
    QTest::newRow("gqa-eval") << int(ModelStyle::Llama) << 2 << false;
    QTest::newRow("gpt2-train") << int(ModelStyle::GPT2) << 0 << true;
    QTest::newRow("gpt2-eval") << int(ModelStyle::GPT2) << 0 << false;
  }
  void forwardShapesAndTrace() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(bool, training);
    DLLM model(small(ModelStyle(style), kv), small_dllm());
    make_decisions_mixed(model);
    model.train(training);
    model.set_progress(1.0);
    const std::int64_t B = 3, T = 11;
    const auto out = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong), true);
    QCOMPARE(out.logits.sizes().vec(), (std::vector<std::int64_t>{B, T, kVocab}));
    QCOMPARE(out.aux_loss.dim(), std::int64_t(0));
    if (training)
      QVERIFY(out.aux_loss.item<double>() > 0);
    else
      QCOMPARE(out.aux_loss.item<double>(), 0.0);
    QCOMPARE(out.trace.size(), std::size_t(4));
    const auto shape = layer_shape(model.options());
    for (int i = 0; i < 2; ++i) {
      QCOMPARE(out.trace[i].kind, std::string("dense"));
      QVERIFY(!out.trace[i].routed);
      QCOMPARE(out.trace[i].flops, dense_layer_flops(B, T, shape));
    }
    for (int i = 2; i < 4; ++i) {
      const auto& t = out.trace[i];
      QCOMPARE(t.layer, i);
      QCOMPARE(t.kind, std::string("dllm"));
      QVERIFY(t.routed);
      QCOMPARE(t.gate.sizes().vec(), (std::vector<std::int64_t>{B, T}));
      QCOMPARE(t.gate.scalar_type(), torch::kFloat);
      QCOMPARE(t.decision.scalar_type(), torch::kBool);
      QVERIFY(t.gate.ge(0).all().item<bool>() && t.gate.le(1).all().item<bool>());
      const auto counts = t.decision.sum(1);  // (B)
      const auto executed = counts.sum().item<std::int64_t>();
      QVERIFY2(executed > 2 * B && executed < B * T, "decisions should be mixed");
      // Priced as executed: inference runs the executed tokens only; training runs every token through the block.
      const auto rows = training ? B * T : executed;
      QCOMPARE(t.tokens_processed.at("attn"), rows);
      QCOMPARE(t.tokens_processed.at("mlp"), rows);
      QCOMPARE(t.tokens_processed.at("router"), B * T);
      QCOMPARE(t.routed_fraction, double(executed) / double(B * T));
      QCOMPARE(t.aux_loss, 0.0);
      // Inference runs the block over the padded (B, K_max) rows of the compacted sequences; the CPU fp32
      // attention kernel computes sum_b k_b^2 pairs.
      const double sum_sq = counts.to(torch::kDouble).pow(2).sum().item<double>();
      const double padded = double(B) * counts.max().item<double>();
      const double block = training ? dense_layer_flops(B, T, shape) : block_flops(padded, sum_sq, shape);
      const double expected = block + linear_flops(B * T, 32, 16) + linear_flops(B * T, 16, 2);
      QVERIFY(std::abs(t.flops - expected) < 1e-6 * expected);
      QCOMPARE(t.dense_flops, dense_layer_flops(B, T, shape));
      QVERIFY(training ? t.flops > t.dense_flops : t.flops < t.dense_flops);
      if (!training) QVERIFY(torch::equal(t.decision.narrow(1, 2, T - 2), t.gate.narrow(1, 2, T - 2).ge(0.5)));
    }
  }

  void reservedTokensAlwaysExecute_data() {
    QTest::addColumn<bool>("training");
    QTest::newRow("train") << true;
    QTest::newRow("eval") << false;
  }
  void reservedTokensAlwaysExecute() {
    QFETCH(bool, training);
    DLLM model(small(), small_dllm().reserved_tokens(3));
    set_bias(model, 10.0f, -10.0f);  // every token wants to skip
    model.train(training);
    const std::int64_t B = 4, T = 12;
    const auto out = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong), true);
    for (int i = 2; i < 4; ++i) {
      const auto& d = out.trace[i].decision;
      QVERIFY(d.narrow(1, 0, 3).all().item<bool>());
      QVERIFY(!d.narrow(1, 3, T - 3).any().item<bool>());
      QCOMPARE(out.trace[i].tokens_processed.at("attn"), training ? B * T : 3 * B);  // training runs every token
    }
  }

  void gumbelFlagIsExactAndPassesGradient() {
    DLLM model(small(), small_dllm());
    const auto logits = (2 * torch::randn({64, 64, 2})).requires_grad_(true);
    const auto w = model.sample_execute(logits);
    QVERIFY(w.eq(0).logical_or(w.eq(1)).all().item<bool>());  // exactly 0 or 1, not 1 +- ulp
    const double executed = w.mean().item<double>();
    QVERIFY(executed > 0.2 && executed < 0.8);
    // The straight-through gradient is the soft sample's: not zero, and opposite on the two logits (up to the
    // rounding of 1 - p against p in softmax's backward).
    w.mul(torch::randn_like(w)).sum().backward();
    const auto g = logits.grad();
    QVERIFY(g.abs().sum().item<double>() > 0);
    QVERIFY(torch::allclose(g.select(-1, 0), -g.select(-1, 1), 1e-4, 1e-6));
  }

  void routerReceivesGradient_data() {
    QTest::addColumn<int>("eviction");
    QTest::newRow("multiplicative") << int(Eviction::Multiplicative);
    QTest::newRow("additive") << int(Eviction::Additive);
  }
  void routerReceivesGradient() {
    QFETCH(int, eviction);
    DLLM model(small(), small_dllm().eviction(Eviction(eviction)));
    model.train();
    model.set_progress(0.0);  // sine ramp: λ = 0, so the gradient comes from the language-model loss alone
    const auto tokens = torch::randint(0, kVocab, {2, 10}, torch::kLong);
    const auto out = model.forward(tokens);
    QCOMPARE(out.aux_loss.item<double>(), 0.0);
    lm_loss(out.logits, tokens, {}).backward();
    for (int i = 2; i < 4; ++i) {
      for (const auto& p : model.routers[i]->parameters()) {
        QVERIFY(p.grad().defined());
        QVERIFY(torch::isfinite(p.grad()).all().item<bool>());
      }
      QVERIFY(model.routers[i]->fc2->weight.grad().abs().sum().item<double>() > 0);
      QVERIFY(model.routers[i]->fc1->weight.grad().abs().sum().item<double>() > 0);
    }
  }

  void skippedTokenUnchangedInEval() {
    DLLM model(small(), small_dllm());
    model.eval();
    const std::int64_t B = 3, T = 14;
    const auto x = torch::randn({B, T, 32});
    const auto positions = torch::arange(T, torch::kLong);
    const auto executed = random_decisions(B, T, 2);
    const auto y = model.skipping_layer(2, x, positions, compact(executed));
    const auto skipped = executed.logical_not();
    QVERIFY(torch::equal(y.index({skipped}), x.index({skipped})));
    QVERIFY((y.index({executed}) - x.index({executed})).abs().amax(-1).gt(1e-4).all().item<bool>());

    // End to end: when every layer routes and every token but the reserved ones skips, a later token's residual
    // is its embedding throughout, so its logits ignore every other token of the sequence.
    DLLM skipping(small(), small_dllm().routed_layers("all"));
    set_bias(skipping, 10.0f, -10.0f);
    skipping.eval();
    const auto a = torch::randint(0, kVocab, {B, T}, torch::kLong);
    auto b = torch::randint(0, kVocab, {B, T}, torch::kLong);
    b.select(1, 9).copy_(a.select(1, 9));
    const auto la = skipping.forward(a).logits, lb = skipping.forward(b).logits;
    QVERIFY(torch::allclose(la.select(1, 9), lb.select(1, 9), 1e-5, 1e-6));
    QVERIFY(!torch::allclose(la.select(1, 1), lb.select(1, 1)));  // reserved tokens do execute
  }

  void sizedEvalEqualsExactCounts_data() {
    QTest::addColumn<bool>("packed");
    QTest::newRow("padded") << false;
    QTest::newRow("packed") << true;
  }
  void sizedEvalEqualsExactCounts() {
    // Eval compactions of the executed tokens sized from the previous forward (on a GPU; forced here): logits and
    // traced counts are the exact forward's, the blocks priced at the rows they ran; a capacity too small runs the
    // forward again with exact counts. Padded (the attention runs the padding anyway: fp32): rows a sequence; packed
    // (it takes packed rows: half precision): rows for the batch.
    QFETCH(bool, packed);
    DLLM model(small(), small_dllm().routed_layers("all"));
    make_decisions_mixed(model);
    model.eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {3, 30}, torch::kLong);
    std::optional<ForcePackedRows> pack;
    if (packed) pack.emplace();
    ModelOutput exact;
    {
      const ExactRoutedCounts counted;
      exact = model.forward(tokens, true);
    }
    const ForcePaddedSized padded;
    const auto sized = model.forward(tokens, true);  // sized by the exact forward's counts
    const auto check = [&](const ModelOutput& out, const char* what) {
      QVERIFY2(torch::allclose(out.logits, exact.logits, 1e-5, 1e-5), what);
      QCOMPARE(out.trace.size(), exact.trace.size());
      for (std::size_t i = 0; i < out.trace.size(); ++i) {
        QCOMPARE(out.trace[i].routed_fraction, exact.trace[i].routed_fraction);
        QCOMPARE(out.trace[i].tokens_processed, exact.trace[i].tokens_processed);
      }
    };
    check(sized, "sized");
    int mixed = 0, priced_higher = 0;
    for (std::size_t i = 0; i < exact.trace.size(); ++i) {
      const auto f = exact.trace[i].routed_fraction;
      mixed += f > 0.2 && f < 0.8;
      priced_higher += sized.trace[i].flops > exact.trace[i].flops;  // the margin's rows, priced as run
    }
    QVERIFY2(mixed >= 2, "the mixed routers should execute part of the tokens in most layers");
    QVERIFY(priced_higher >= 2);
    QCOMPARE(model.sizing[2].packed > 0, packed);
    QCOMPARE(model.sizing[2].len > 0, !packed);
    // A capacity one row short of what a sequence (padded) or the batch (packed) executes: the forward runs again
    // with exact counts.
    const auto counts = exact.trace[2].decision.sum(1);
    const auto needed = (packed ? counts.sum() : counts.max()).item<std::int64_t>();
    model.sizing[2].capacity = needed - 1;
    const auto rerun = model.forward(tokens, true);
    check(rerun, "overflowed");
    QVERIFY(!model.sizing[2].counts.defined());  // the rerun counted exactly
    QVERIFY(model.sizing[2].capacity >= needed);
    check(model.forward(tokens, true), "sized again");
    QVERIFY(model.sizing[2].counts.defined());
    // Untraced under DeferredTraceReadback (a forward captured as a CUDA graph): settled only after the forward.
    test::check_deferred_sizing(model, tokens, exact.logits, [&] { model.sizing[2].capacity = needed - 1; });
    if (QTest::currentTestFailed()) return;
    QCOMPARE(model.sizing[2].capacity, needed - 1);  // sized afresh by the exact rerun, not by the overflowed counts
    {
      const ExactRoutedCounts counted;
      check(model.forward(tokens, true), "rerun after the deferred overflow");
    }
    QVERIFY(model.sizing[2].capacity >= needed);
  }

  void compactedEqualsEvictingForm_data() {
    QTest::addColumn<int>("eviction");
    QTest::addColumn<int>("kv");
    QTest::addColumn<double>("tolerance");
    // Multiplicative renormalises by (row sum + 1e-6): not exact, so a looser tolerance.
    QTest::newRow("additive-mha") << int(Eviction::Additive) << 0 << 2e-5;
    QTest::newRow("additive-gqa") << int(Eviction::Additive) << 2 << 2e-5;
    QTest::newRow("multiplicative-mha") << int(Eviction::Multiplicative) << 0 << 1e-4;
    QTest::newRow("multiplicative-gqa") << int(Eviction::Multiplicative) << 2 << 1e-4;
  }
  void compactedEqualsEvictingForm() {
    QFETCH(int, eviction);
    QFETCH(int, kv);
    QFETCH(double, tolerance);
    DLLM model(small(ModelStyle::Llama, kv), small_dllm().eviction(Eviction(eviction)));
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t B = 4, T = 16;
    const auto x = torch::randn({B, T, 32});
    const auto positions = torch::arange(T, torch::kLong);
    const auto executed = random_decisions(B, T, 2);
    const auto evicting = model.evicting_layer(3, x, positions, executed.to(torch::kFloat));
    const auto compacted = model.skipping_layer(3, x, positions, compact(executed));
    const double diff = (evicting - compacted).abs().max().item<double>();
    QVERIFY2(diff < tolerance, qPrintable(QString("max difference %1").arg(diff)));
    // Without eviction (every key visible) the executed tokens would differ: the comparison has teeth.
    const auto all_keys = model.evicting_layer(3, x, positions, torch::ones({B, T}));
    const auto visible = x + (all_keys - x) * executed.unsqueeze(-1);
    QVERIFY((visible - compacted).abs().max().item<double>() > 1e-3);
  }

  void evictionFormsEqualMaterialised_data() {
    QTest::addColumn<int>("eviction");
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<bool>("soft");  // flags strictly between 0 and 1 (the multiplicative form takes any weight)
    // key/value heads of 6 query heads (2: groups of 3); the flash form serves them grouped
    QTest::addColumn<int>("kv_heads");
    for (const auto& [name, eviction] : {std::pair{"multiplicative", Eviction::Multiplicative},
                                         std::pair{"additive", Eviction::Additive}}) {
      for (const int chunk : {1, 5, 13, 0})
        QTest::addRow("%s-chunk%d", name, chunk) << int(eviction) << chunk << false << false << 6;
      QTest::addRow("%s-bf16", name) << int(eviction) << 4 << true << false << 6;
      QTest::addRow("%s-flash", name) << int(eviction) << kFlash << false << false << 6;
      QTest::addRow("%s-flash-bf16", name) << int(eviction) << kFlash << true << false << 6;
      QTest::addRow("%s-flash-grouped", name) << int(eviction) << kFlash << false << false << 2;
      QTest::addRow("%s-efficient-grouped", name) << int(eviction) << kEfficient << false << false << 2;
      QTest::addRow("%s-cpu", name) << int(eviction) << kCpuKernel << false << false << 6;
      QTest::addRow("%s-cpu-bf16", name) << int(eviction) << kCpuKernel << true << false << 6;
      QTest::addRow("%s-cpu-grouped", name) << int(eviction) << kCpuKernel << false << false << 2;
    }
    QTest::addRow("multiplicative-soft-cpu") << int(Eviction::Multiplicative) << kCpuKernel << false << true << 6;
    QTest::addRow("multiplicative-soft") << int(Eviction::Multiplicative) << 3 << false << true << 6;
    QTest::addRow("multiplicative-soft-flash") << int(Eviction::Multiplicative) << kFlash << false << true << 6;
    QTest::addRow("multiplicative-flash-bf16-grouped")
        << int(Eviction::Multiplicative) << kFlash << true << false << 2;
    QTest::addRow("multiplicative-soft-efficient-grouped")
        << int(Eviction::Multiplicative) << kEfficient << false << true << 2;
    QTest::addRow("multiplicative-efficient-bf16-grouped")
        << int(Eviction::Multiplicative) << kEfficient << true << false << 2;
  }
  void evictionFormsEqualMaterialised() {
    QFETCH(int, eviction);
    QFETCH(int, chunk);
    QFETCH(bool, bf16);
    QFETCH(bool, soft);
    QFETCH(int, kv_heads);
    const bool efficient = chunk == kEfficient, flash = chunk == kFlash || efficient, cpu = chunk == kCpuKernel;
    if (flash && !flash_eviction_available()) QSKIP("LibTorch before 2.3 has no flash attention");
    torch::manual_seed(11);
    const std::int64_t B = 2, H = 6, T = 13, hd = 8;
    // LibTorch's flash attention and the CPU kernel take no double: their full-precision rows run in fp32.
    const auto dtype = bf16 ? torch::kBFloat16 : flash || cpu ? torch::kFloat : torch::kDouble;
    auto flags = soft ? torch::rand({B, T}, torch::kDouble) : random_decisions(B, T, 2).to(torch::kDouble);
    flags.narrow(1, 0, 2).fill_(1.0);
    // Sharp scores (q doubled) for the chunked form. The flash form leaves out the official 1e-6 in the
    // renormalisation, a relative 1e-6 / m with m a row's softmax mass on executed keys: it is held to rows with m
    // at least 1e-2 (checked below), where that is 1e-4 of the output at most.
    const std::vector<torch::Tensor> inputs = {torch::randn({B, H, T, hd}, torch::kDouble).mul_(flash ? 1 : 2),
                                               torch::randn({B, kv_heads, T, hd}, torch::kDouble),
                                               torch::randn({B, kv_heads, T, hd}, torch::kDouble), flags};
    const auto all_heads = [&](const torch::Tensor& x) { return repeat_kv(x, H / kv_heads); };
    if (flash && eviction == int(Eviction::Multiplicative)) {
      const auto future = torch::ones({T, T}, torch::kBool).triu(1);
      const auto scores = torch::matmul(inputs[0], all_heads(inputs[1]).transpose(-2, -1)).div(std::sqrt(hd));
      const auto probs = torch::softmax(scores.masked_fill(future, -INFINITY), -1);
      QVERIFY((probs * flags.view({B, 1, 1, T})).sum(-1).min().item<double>() >= 1e-2);
    }
    const auto upstream = torch::randn({B, H, T, hd}, torch::kDouble);
    const auto form = [&](const std::vector<torch::Tensor>& x, const torch::Tensor& w) {
      if (flash)
        return evicting_attention_flash(x[0], x[1], x[2], w, Eviction(eviction),
                                        efficient ? EvictionKernel::Efficient : EvictionKernel::Flash);
      if (cpu) return evicting_attention_cpu(x[0], all_heads(x[1]), all_heads(x[2]), w, Eviction(eviction));
      return evicting_attention_chunked(x[0], all_heads(x[1]), all_heads(x[2]), w, Eviction(eviction), chunk);
    };
    // Output and gradients of <out, upstream> with respect to q, k, v and w, through `form` or the materialised one.
    const auto run = [&](bool tested, torch::ScalarType type) {
      return output_and_gradients(inputs, type, upstream, [&](const std::vector<torch::Tensor>& x) {
        if (tested) return form(x, x[3]);
        return evicting_attention_materialised(x[0], all_heads(x[1]), all_heads(x[2]), x[3], Eviction(eviction));
      });
    };
    const auto error = [](const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); };
    // Every form computes scores and probabilities in fp32: in double (chunked) or fp32 (flash, CPU kernel) inputs
    // they agree to fp32 rounding. In bf16 the scores are rounded to bf16 (as the materialised form rounds them), in another
    // order, so the tested form is held to three times the materialised form's own distance from the double result
    // (the chunked dq came to more than twice it with LibTorch 1.13).
    const auto tested = run(true, dtype), reference = run(false, torch::kDouble);
    const auto materialised = bf16 ? run(false, dtype) : reference;
    const char* names[] = {"output", "dq", "dk", "dv", "dw"};
    for (std::size_t i = 0; i < tested.size(); ++i) {
      const double scale = std::max(reference[i].abs().max().item<double>(), 1.0);
      const double diff = error(tested[i], reference[i]);
      const double allowed = bf16 ? std::max(3.0 * error(materialised[i], reference[i]), 1e-2 * scale)
                                  : (flash ? 1e-4 : cpu ? 2e-5 : 1e-5) * scale;
      QVERIFY2(diff <= allowed, qPrintable(QString("%1: max difference %2 (allowed %3)").arg(names[i]).arg(diff).arg(allowed)));
    }
    // The flash form zeroes what its evicted keys' weight of 2^-40 would leave in their key and value gradients.
    if (flash && !soft) {
      const auto evicted = flags.lt(0.5).view({B, 1, T, 1}).expand({B, kv_heads, T, hd});
      QVERIFY(evicted.any().item<bool>());
      QCOMPARE(tested[2].masked_select(evicted).abs().max().item<double>(), 0.0);
      QCOMPARE(tested[3].masked_select(evicted).abs().max().item<double>(), 0.0);
    }
    // The flags reach the output, and only the multiplicative form passes a gradient to them.
    if (eviction == int(Eviction::Multiplicative))
      QVERIFY(tested[4].abs().max().item<double>() > 1e-3);
    else
      QCOMPARE(tested[4].abs().max().item<double>(), 0.0);
    std::vector<torch::Tensor> plain;
    for (std::size_t i = 0; i < 3; ++i) plain.push_back(inputs[i].to(dtype));
    const auto all_keys = form(plain, torch::ones({B, T}));
    QVERIFY((all_keys.to(torch::kDouble) - tested[0]).abs().max().item<double>() > 1e-3);
  }

  void cpuEvictionKernelAcrossBlocks_data() {
    QTest::addColumn<int>("eviction");
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("H");
    // T 300: three query blocks (128 rows), every head of a sequence in one softmax call; T 1200 with three heads:
    // ten blocks, one head per call (H T^2 above 4 M floats).
    QTest::addColumn<bool>("recompute");
    for (const bool recompute : {false, true}) {
      const auto row = [&](const char* name) -> QTestData& {
        return QTest::newRow((std::string(name) + (recompute ? "-recomputed" : "")).c_str());
      };
      row("multiplicative-3-blocks") << int(Eviction::Multiplicative) << 300 << 4 << recompute;
      row("additive-3-blocks") << int(Eviction::Additive) << 300 << 4 << recompute;
      row("multiplicative-head-per-call") << int(Eviction::Multiplicative) << 1200 << 3 << recompute;
    }
  }
  void cpuEvictionKernelAcrossBlocks() {
    // The CPU kernel's blocks, their packed probabilities (or, recomputed, each row's log-normaliser) and the
    // backward's accumulation over blocks (dK, dV and the flags' gradient) against the chunked form in double; its
    // forward without a gradient against its forward with one.
    QFETCH(int, eviction);
    QFETCH(int, T);
    QFETCH(int, H);
    QFETCH(bool, recompute);
    std::optional<RecomputeCpuAttention> from_lse;
    if (recompute) from_lse.emplace();
    torch::manual_seed(13);
    const std::int64_t B = 2, hd = 8;
    auto flags = random_decisions(B, T, 2).to(torch::kFloat);
    const std::vector<torch::Tensor> inputs = {torch::randn({B, H, T, hd}).mul_(2), torch::randn({B, H, T, hd}),
                                               torch::randn({B, H, T, hd}), flags};
    const auto upstream = torch::randn({B, H, T, hd}, torch::kDouble);
    const auto tested = output_and_gradients(inputs, torch::kFloat, upstream, [&](const std::vector<torch::Tensor>& x) {
      return evicting_attention_cpu(x[0], x[1], x[2], x[3], Eviction(eviction));
    });
    const auto reference =
        output_and_gradients(inputs, torch::kDouble, upstream, [&](const std::vector<torch::Tensor>& x) {
          return evicting_attention_chunked(x[0], x[1], x[2], x[3], Eviction(eviction), 128);
        });
    const char* names[] = {"output", "dq", "dk", "dv", "dw"};
    for (std::size_t i = 0; i < tested.size(); ++i) {
      const double scale = std::max(reference[i].abs().max().item<double>(), 1.0);
      const double diff = (tested[i] - reference[i]).abs().max().item<double>();
      QVERIFY2(diff <= 5e-5 * scale,
               qPrintable(QString("%1: max difference %2 (scale %3)").arg(names[i]).arg(diff).arg(scale)));
    }
    if (eviction == int(Eviction::Multiplicative)) QVERIFY(tested[4].abs().max().item<double>() > 1e-3);
    // Without a gradient the kernel keeps no probabilities (each block's in a buffer of its own): the same output.
    torch::NoGradGuard no_grad;
    const auto evaluated = evicting_attention_cpu(inputs[0], inputs[1], inputs[2], inputs[3], Eviction(eviction));
    const double diff = (evaluated.to(torch::kDouble) - tested[0]).abs().max().item<double>();
    QVERIFY2(diff <= 1e-6 * std::max(tested[0].abs().max().item<double>(), 1.0), qPrintable(QString::number(diff)));
  }

  void theCpuTrainsThroughTheCpuKernel() {
    // On the CPU evicting_attention is the CPU kernel (grouped heads repeated for it), priced at the full square as
    // the dense CPU kernel is; ROUTELAB_CPU_EVICTION=0 would send it to the chunked form.
    const std::int64_t B = 2, H = 4, T = 150, hd = 8;
    if (!cpu_eviction_active(torch::Device(torch::kCPU))) QSKIP("ROUTELAB_CPU_EVICTION=0 in the environment");
    QVERIFY(!cpu_eviction_active(torch::Device(torch::kCUDA)));
    torch::manual_seed(3);
    const auto q = torch::randn({B, H, T, hd}), k = torch::randn({B, 2, T, hd}), v = torch::randn({B, 2, T, hd});
    const auto w = random_decisions(B, T, 2).to(torch::kFloat);
    double pairs = 0;
    const auto out = evicting_attention(q, k, v, w, Eviction::Multiplicative, &pairs);
    QCOMPARE(pairs, static_cast<double>(B * T * T));
    const auto kernel = evicting_attention_cpu(q, repeat_kv(k, 2), repeat_kv(v, 2), w, Eviction::Multiplicative);
    QVERIFY(torch::equal(out, kernel));
    // Where it keeps them, the causal blocks' probabilities (T 300: blocks of 128, 128 and 44 rows against 128, 256
    // and 300 keys).
    QCOMPARE(cpu_eviction_saved_bytes(1, 1, 300), 4.0 * (128 * 128 + 128 * 256 + 44 * 300));
  }

  void flashEvictionRefusesHalf() {
    // fp16 cannot hold an evicted key's weight of 2^-40 (nor its gradient sums): refused by name, not miscomputed.
    if (!flash_eviction_available()) QSKIP("LibTorch before 2.3 has no flash attention");
    QVERIFY(!flash_eviction_active(torch::Device(torch::kCUDA), torch::kHalf, 64));
    const auto x = torch::randn({1, 2, 5, 8}).to(torch::kHalf);
    try {
      evicting_attention_flash(x, x, x, torch::ones({1, 5}), Eviction::Multiplicative);
      QFAIL("no error");
    } catch (const c10::Error& e) {
      QVERIFY2(std::string(e.what()).find("fp16") != std::string::npos, e.what());
    }
  }

  void fusedEvictionKernelByPrecision() {
    // On a GPU the flash form runs in both precisions: bf16 on flash attention, fp32 (which flash attention does not
    // take) on memory-efficient attention; never on the CPU (its own kernel), and not past a head size of 254.
    if (!flash_eviction_available()) QSKIP("LibTorch before 2.3 has no flash attention");
    const auto on = [](const char* name) { return !switched_off_in_environment(name); };
    const torch::Device gpu(torch::kCUDA), cpu(torch::kCPU);
    QCOMPARE(flash_eviction_active(gpu, torch::kBFloat16, 64), on("ROUTELAB_FLASH_EVICTION"));
    QCOMPARE(efficient_eviction_active(gpu, torch::kFloat, 64), on("ROUTELAB_EFFICIENT_EVICTION"));
    QVERIFY(!flash_eviction_active(gpu, torch::kFloat, 64));
    QVERIFY(!efficient_eviction_active(gpu, torch::kBFloat16, 64));
    QVERIFY(!efficient_eviction_active(cpu, torch::kFloat, 64) && !flash_eviction_active(cpu, torch::kBFloat16, 64));
    QVERIFY(!efficient_eviction_active(gpu, torch::kFloat, 255) && !flash_eviction_active(gpu, torch::kBFloat16, 255));
  }

  void chunksPricedAsComputed() {
    // Chunks of 5 rows over T 13: rows 0-4 against keys 0-4, 5-9 against 0-9, 10-12 against 0-12.
    const std::int64_t B = 2, H = 3, T = 13, hd = 8;
    QCOMPARE(evicting_attention_pairs(B, H, T, 5), 2.0 * (5 * 5 + 5 * 10 + 3 * 13));
    QCOMPARE(evicting_attention_pairs(B, H, T, 0), 2.0 * T * T);  // one chunk at this size: the full square
    const auto q = torch::randn({B, H, T, hd}), k = torch::randn({B, H, T, hd}), v = torch::randn({B, H, T, hd});
    FlopCounter counter;
    evicting_attention_chunked(q, k, v, torch::ones({B, T}), Eviction::Multiplicative, 5);
    counter.stop();
    // Scores and the weighted sum: 2 products of 2 FLOPs per multiply-add over hd, for every head and pair.
    QCOMPARE(counter.flops(), 4.0 * hd * H * evicting_attention_pairs(B, H, T, 5));
  }

  void rateLossByHand() {
    // Four layers, two always executed. Dynamic flags for one sequence of four tokens:
    // layer 2: 1 1 0 1, layer 3: 1 1 0 0 -> activation (2 + w2 + w3) / 4 = 1, 1, 0.5, 0.75.
    // Dropping the two reserved tokens: |0.5 - 0.5| and |0.75 - 0.5| -> mean 0.125.
    const auto activation = (2 + torch::tensor({{1.f, 1.f, 0.f, 1.f}}) + torch::tensor({{1.f, 1.f, 0.f, 0.f}})) / 4;
    QVERIFY(std::abs(DLLM::rate_loss(activation, 2, 0.5).item<double>() - 0.125) < 1e-7);
    QCOMPARE(DLLM::rate_loss(activation, 4, 0.5).item<double>(), 0.0);

    // The model's aux loss is λ times the same computation on the decisions it took.
    DLLM model(small(), small_dllm().reserved_tokens(3).target(0.3).rate_coeff(2.0));
    make_decisions_mixed(model);
    model.train();
    model.set_progress(1.0);
    const std::int64_t T = 9;
    const auto out = model.forward(torch::randint(0, kVocab, {2, T}, torch::kLong), true);
    auto by_hand = torch::full({2, T}, 2.0);  // layers 0 and 1 count 1
    for (int i = 2; i < 4; ++i) by_hand += out.trace[i].decision.to(torch::kFloat);
    by_hand /= 4.0;
    const double expected = 2.0 * (by_hand.narrow(1, 3, T - 3) - 0.3).abs().mean().item<double>();
    QVERIFY2(std::abs(out.aux_loss.item<double>() - expected) < 1e-6,
             qPrintable(QString("%1 vs %2").arg(out.aux_loss.item<double>()).arg(expected)));
  }

  void rateLossSteersExecution() {
    // With 2 of 4 layers always executed, a target of 0.75 asks the dynamic layers to execute half the tokens;
    // they start near 0.87 (bias [0.1, 2.0]). The gradient reaches the routers through the straight-through flag.
    DLLM model(small(), small_dllm().target(0.75).rate_schedule(RateSchedule::Constant));
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {8, 16}, torch::kLong);
    const auto activation = [&] {
      const auto out = model.forward(x, true);
      return (2.0 + out.trace[2].routed_fraction + out.trace[3].routed_fraction) / 4.0;
    };
    const double before = activation();
    for (int i = 0; i < 100; ++i) train_step(model, *opt, {x, x, {}}, 1.0, false, false);
    const double after = activation();
    qInfo("executed fraction over all layers %g -> %g (target 0.75)", before, after);
    QVERIFY(before > 0.85 && after < before - 0.1);
    QVERIFY2(std::abs(after - 0.75) < 0.08, qPrintable(QString("%1 -> %2").arg(before).arg(after)));
  }

  void routerRunsInFp32UnderAutocast() {
    DLLM model(small(), small_dllm());
    const auto x = torch::randn({2, 8, 32});
    const auto reference = model.routers[2]->forward(x);
    torch::Tensor under_autocast;
    {
      AutocastGuard autocast(true, torch::kCPU);
      under_autocast = model.routers[2]->forward(x);
    }
    QCOMPARE(under_autocast.scalar_type(), torch::kFloat);
    QVERIFY(torch::equal(under_autocast, reference));
    // A bf16 step and a bf16 eval pass run end to end.
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto tokens = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    model.set_progress(0.5);
    const auto r = train_step(model, *opt, {tokens, tokens, {}}, 1.0, /*bf16=*/true, false);
    QVERIFY(std::isfinite(r.loss.item<double>()) && std::isfinite(r.aux_loss.item<double>()));
    model.eval();
    AutocastGuard autocast(true, torch::kCPU);
    QVERIFY(torch::isfinite(model.forward(tokens).logits).all().item<bool>());
  }

  void sineRamp() {
    DLLM model(small(), small_dllm().rate_coeff(5.0));
    model.set_progress(0.0);
    QCOMPARE(model.rate_weight(), 0.0);
    model.set_progress(0.5);
    QVERIFY(std::abs(model.rate_weight() - 5.0 * std::sin(std::numbers::pi / 4)) < 1e-12);
    model.set_progress(1.0);
    QVERIFY(std::abs(model.rate_weight() - 5.0) < 1e-12);
    model.set_progress(3.0);  // clamped
    QVERIFY(std::abs(model.rate_weight() - 5.0) < 1e-12);
    DLLM constant(small(), small_dllm().rate_coeff(5.0).rate_schedule(RateSchedule::Constant));
    constant.set_progress(0.0);
    QCOMPARE(constant.rate_weight(), 5.0);
    // The forwards read λ from a device tensor that set_progress rewrites in place (a step captured as a CUDA graph
    // reads each step's λ from the same memory), and the rate loss follows it.
    const auto lambda = model.rate_weight_on(torch::kCPU);
    const auto* memory = lambda.data_ptr<float>();
    model.set_progress(0.5);
    QCOMPARE(model.rate_weight_on(torch::kCPU).data_ptr<float>(), memory);
    QVERIFY(std::abs(lambda.item<double>() - 5.0 * std::sin(std::numbers::pi / 4)) < 1e-6);
    model.train();
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    const auto aux = [&](double progress) {
      model.set_progress(progress);
      torch::manual_seed(5);  // the same Gumbel samples
      return model.forward(tokens).aux_loss.item<double>();
    };
    const double half = aux(0.5), full = aux(1.0);
    QVERIFY(full > 0);
    QVERIFY(std::abs(half / full - std::sin(std::numbers::pi / 4)) < 1e-5);
    QCOMPARE(aux(0.0), 0.0);
  }

  void finalBiasInitSurvives() {
    DLLM model(small(), DLLMOptions());  // official hidden width 512
    const auto params = model.named_parameters();
    QVERIFY(!params.contains("routers.0.fc2.bias") && !params.contains("routers.1.fc2.bias"));
    for (const char* layer : {"2", "3"}) {
      const auto bias = params[std::string("routers.") + layer + ".fc2.bias"];
      QVERIFY(torch::equal(bias, torch::tensor({0.1f, 2.0f})));
      QCOMPARE(params[std::string("routers.") + layer + ".fc1.bias"].abs().sum().item<double>(), 0.0);
      QCOMPARE(params[std::string("routers.") + layer + ".norm.weight"].mean().item<double>(), 1.0);
    }
    // Through the registry's factory as well; the initial model executes nearly every token.
    auto created = architecture("dllm").create(resolve_config({{"model", {{"arch", "dllm"}, {"n_layer", 4}}}}).model(),
                                               {kVocab, 16});
    QCOMPARE(created->arch_id(), std::string("dllm"));
    QVERIFY(torch::equal(created->named_parameters()["routers.3.fc2.bias"], torch::tensor({0.1f, 2.0f})));
    created->eval();
    const auto out = created->forward(torch::randint(0, kVocab, {2, 16}, torch::kLong), true);
    QVERIFY(out.trace[3].routed_fraction > 0.95);
  }

  void causality_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("training");
    QTest::newRow("llama-eval") << int(ModelStyle::Llama) << 0 << false;
    QTest::newRow("gqa-eval") << int(ModelStyle::Llama) << 2 << false;
    QTest::newRow("gpt2-eval") << int(ModelStyle::GPT2) << 0 << false;
    QTest::newRow("llama-train-same-noise") << int(ModelStyle::Llama) << 0 << true;
  }
  void causality() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(bool, training);
    DLLM model(small(ModelStyle(style), kv), small_dllm());
    make_decisions_mixed(model);
    model.train(training);
    torch::NoGradGuard no_grad;
    const std::int64_t T = 16;
    const auto a = torch::randint(0, kVocab, {2, T}, torch::kLong);
    const auto run = [&](const torch::Tensor& tokens) {
      torch::manual_seed(3);  // the same Gumbel noise in training
      return model.forward(tokens, true);
    };
    const auto reference = run(a);
    for (int i = 2; i < 4; ++i) {
      const auto executed = reference.trace[i].decision.narrow(1, 2, T - 2);
      QVERIFY2(executed.any().item<bool>() && !executed.all().item<bool>(), "decisions should be mixed");
    }
    for (std::int64_t t : {0, 5, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
      const auto la = reference.logits, lb = run(b).logits;
      QVERIFY(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-6));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
    }
  }

  void configErrorsNameTheirKey_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::newRow("pattern") << "routed_layers" << R"("T-D")";
    QTest::newRow("index") << "routed_layers" << R"("2,7")";
    QTest::newRow("reserved") << "reserved_tokens" << "0";
    QTest::newRow("eviction") << "eviction" << R"("sideways")";
    QTest::newRow("target") << "target" << "1.5";
    QTest::newRow("schedule") << "rate_schedule" << R"("cosine")";
  }
  void configErrorsNameTheirKey() {
    QFETCH(QString, key);
    QFETCH(QString, value);
    nlohmann::json overrides = {{"model", {{"arch", "dllm"}, {"n_layer", 4}}}};
    overrides["model"][key.toStdString()] = nlohmann::json::parse(value.toStdString());
    try {
      resolve_config(overrides);
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model." + key), e.what());
    }
    // The constructor rejects the same pattern with the same key.
    if (key == "routed_layers")
      QVERIFY_THROWS_EXCEPTION(ConfigError, DLLM(small(), small_dllm().routed_layers("T-D")));
  }

  void tinyBatchOverfits() {
    DLLM model(small(), small_dllm());
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {4, 16}, torch::kLong), y = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    const int steps = 100;
    double first = 0, last = 0;
    for (int i = 0; i < steps; ++i) {
      model.set_progress(double(i) / steps);
      last = train_step(model, *opt, {x, y, {}}, 1.0, false, false).loss.item<double>();
      if (i == 0) first = last;
    }
    qInfo("cross-entropy %g -> %g", first, last);
    QVERIFY2(last < 0.1 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
  }
};

}  // namespace test_dllm

ROUTELAB_TEST_SUITE(test_dllm, TestDLLM)
#include "test_dllm.moc"
