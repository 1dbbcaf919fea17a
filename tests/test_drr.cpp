// Depth Routing Residuals: parity with the paper's PyTorch code (tests/data/drr_reference.py run by /usr/bin/python3),
// causality of the causal form (train and eval, prefix invariance), the seed form's non-causality, router init,
// empty and masked memory, causal summaries, overhead against a hand count, config errors, training.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <fstream>

#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/drr.h"
#include "core/models/registry.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"

#include "model_test_support.h"
#include "tests/suite.h"

namespace test_drr {

using namespace routelab;

namespace {

TransformerOptions small(std::int64_t max_seq_len = 16, std::int64_t layers = 5) {
  TransformerOptions o;
  o.vocab_size(37).max_seq_len(max_seq_len).n_layer(layers).n_embd(32).n_head(4);
  return o;
}

DrrOptions small_drr(DrrMemory memory = DrrMemory::Causal) {
  return DrrOptions().short_window(2).summary_tokens(4).block_size(2).memory(memory);
}

/// Router output weights of order one, so the gates differ per token and the memory paths carry weight.
void spread_routers(DrrTransformer& model, double std = 0.5) {
  torch::NoGradGuard no_grad;
  for (auto& layer : model.layers) {
    layer->router_out->weight.normal_(0.0, std);
    layer->router_out->bias.normal_(0.0, 0.3);
  }
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

/// The reference tensors written by drr_reference.py.
struct Reference {
  nlohmann::json doc;
  std::map<std::string, torch::Tensor> tensors;
  torch::Tensor ids;
};

/// Runs the paper's code; fails (never skips) when python3 or torch is missing.
bool run_reference(const QString& dir, Reference& ref, QString& error) {
  QString script = qEnvironmentVariable("ROUTELAB_TEST_DATA");
  script = script.isEmpty() ? QFINDTESTDATA("data/drr_reference.py") : script + "/drr_reference.py";
  if (script.isEmpty() || !QFile::exists(script)) {
    error = "tests/data/drr_reference.py not found (ROUTELAB_TEST_DATA='" + qEnvironmentVariable("ROUTELAB_TEST_DATA") + "')";
    return false;
  }
  const QString python = "/usr/bin/python3";
  if (!QFile::exists(python)) {
    error = "the DRR parity test needs /usr/bin/python3 with python3-torch (packaging's install script installs both)";
    return false;
  }
  QProcess process;
  process.start(python, {script, dir});
  if (!process.waitForFinished(180000)) {
    error = "drr_reference.py did not finish: " + process.errorString();
    return false;
  }
  if (process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0) {
    error = QString("drr_reference.py failed (exit %1%2): %3")
                .arg(process.exitCode())
                .arg(process.exitCode() == 3 ? ", python3-torch is missing" : "")
                .arg(QString::fromLocal8Bit(process.readAllStandardError()));
    return false;
  }
  std::ifstream index((dir + "/drr_reference.json").toStdString());
  ref.doc = nlohmann::json::parse(index);
  std::ifstream bin((dir + "/drr_reference.bin").toStdString(), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  const auto* floats = reinterpret_cast<const float*>(bytes.data());
  const auto n_floats = static_cast<std::int64_t>(bytes.size() / sizeof(float));
  for (const auto& t : ref.doc.at("tensors")) {
    const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
    const auto offset = t.at("offset").get<std::int64_t>();
    std::int64_t numel = 1;
    for (auto s : shape) numel *= s;
    if (offset + numel > n_floats) {
      error = "drr_reference.bin is shorter than its index";
      return false;
    }
    ref.tensors[t.at("name").get<std::string>()] =
        torch::from_blob(const_cast<float*>(floats + offset), shape, torch::kFloat).clone();
  }
  std::vector<std::int64_t> ids;
  std::int64_t rows = 0;
  for (const auto& row : ref.doc.at("input_ids")) {
    for (const auto& v : row) ids.push_back(v.get<std::int64_t>());
    ++rows;
  }
  ref.ids = torch::tensor(ids, torch::kLong).view({rows, -1});
  return true;
}

/// A DRR model shaped as the reference's SmallDRRTransformer, with its weights.
std::shared_ptr<DrrTransformer> model_from_reference(const Reference& ref, DrrMemory memory) {
  const auto& c = ref.doc.at("config");
  TransformerOptions t;
  t.vocab_size(c.at("vocab_size").get<std::int64_t>())
      .max_seq_len(c.at("max_seq_len").get<std::int64_t>())
      .n_layer(c.at("num_layers").get<std::int64_t>())
      .n_embd(c.at("dim").get<std::int64_t>())
      .n_head(c.at("num_heads").get<std::int64_t>())
      .dropout(c.at("dropout").get<double>());
  DrrOptions o;
  o.short_window(c.at("short_window").get<std::int64_t>())
      .summary_tokens(c.at("summary_tokens").get<std::int64_t>())
      .block_size(c.at("block_size").get<std::int64_t>())
      .memory(memory);
  auto model = std::make_shared<DrrTransformer>(t, o);
  std::map<std::string, torch::Tensor> state;
  for (const auto& [name, tensor] : ref.tensors)
    if (name.rfind("output.", 0) != 0) state[name] = tensor;
  load_seed_parameters(*model, state);
  model->eval();
  return model;
}

}  // namespace

class TestDrr : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(11); }

  // The seed form on the paper's weights reproduces the paper's code: every layer, every gate, the final norm.
  void seedParity() {
    QTemporaryDir dir;
    Reference ref;
    QString error;
    QVERIFY2(run_reference(dir.path(), ref, error), qPrintable(error));
    auto model = model_from_reference(ref, DrrMemory::Seed);
    torch::NoGradGuard no_grad;
    const auto s = model->states(ref.ids, /*trace=*/true, /*keep_layers=*/true);
    const auto L = model->num_layers();
    QCOMPARE(static_cast<std::int64_t>(s.layers.size()), L);
    for (std::int64_t i = 0; i < L; ++i) {
      const auto expected = ref.tensors.at("output.layer." + std::to_string(i));
      const double diff = max_abs_diff(s.layers[std::size_t(i)], expected);
      QVERIFY2(diff < 1e-5, qPrintable(QString("layer %1: max |diff| %2").arg(i).arg(diff)));
      const auto gates = ref.tensors.at("output.gates." + std::to_string(i));
      const double gate_diff = max_abs_diff(s.gates.select(2, i), gates);
      QVERIFY2(gate_diff < 1e-5, qPrintable(QString("gates of layer %1: max |diff| %2").arg(i).arg(gate_diff)));
      // Non-trivial gates: the parity exercises all three paths.
      QVERIFY(gates.std().item<double>() > 0.01);
    }
    const double diff = max_abs_diff(s.final, ref.tensors.at("output.final"));
    QVERIFY2(diff < 1e-5, qPrintable(QString("final norm: max |diff| %1").arg(diff)));
    qInfo("seed parity against torch %s: last layer max |diff| %g, final norm %g",
          ref.doc.at("torch_version").get<std::string>().c_str(),
          max_abs_diff(s.layers.back(), ref.tensors.at("output.layer." + std::to_string(L - 1))), diff);
    // The layers differ from each other, so matching them one by one is not a trivial check.
    QVERIFY(max_abs_diff(s.layers[0], s.layers[1]) > 0.1);

    // The causal form on the same weights agrees where it must. Layer 0 has no memory yet, so its gates read only
    // the embeddings and equal the paper's at every position; its output at the last position (whose causal attention
    // sees the whole sequence) equals the paper's. Earlier positions differ: the paper's attention reads the future.
    auto causal = model_from_reference(ref, DrrMemory::Causal);
    const auto c = causal->states(ref.ids, true, true);
    const auto T = ref.ids.size(1);
    QVERIFY(max_abs_diff(c.gates.select(2, 0), ref.tensors.at("output.gates.0")) < 1e-5);
    const auto seed_layer0 = ref.tensors.at("output.layer.0");
    QVERIFY2(max_abs_diff(c.layers[0].select(1, T - 1), seed_layer0.select(1, T - 1)) < 1e-5,
             qPrintable(QString::number(max_abs_diff(c.layers[0].select(1, T - 1), seed_layer0.select(1, T - 1)))));
    QVERIFY(max_abs_diff(c.layers[0].narrow(1, 0, T - 1), seed_layer0.narrow(1, 0, T - 1)) > 1e-3);
    // From layer 1 on the memories differ (the paper's reads later positions), so does the last position.
    QVERIFY(max_abs_diff(c.layers[1].select(1, T - 1), ref.tensors.at("output.layer.1").select(1, T - 1)) > 1e-3);
  }

  // Without any memory read (one token, no complete block before the last layer) both forms are the same function.
  void formsAgreeWithoutMemoryAhead() {
    auto o = small(8, 3);
    torch::manual_seed(3);
    DrrTransformer seed(o, small_drr(DrrMemory::Seed).block_size(3));
    spread_routers(seed);
    torch::manual_seed(3);
    DrrTransformer causal(o, small_drr(DrrMemory::Causal).block_size(3));
    spread_routers(causal);
    seed.eval();
    causal.eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, 37, {3, 1}, torch::kLong);  // T = 1: nothing lies ahead of a position
    const auto a = seed.states(tokens, false, true), b = causal.states(tokens, false, true);
    for (std::size_t i = 0; i < a.layers.size(); ++i)
      QVERIFY2(max_abs_diff(a.layers[i], b.layers[i]) < 1e-6, qPrintable(QString("layer %1").arg(i)));
  }

  void causalFormIsCausal_data() {
    QTest::addColumn<bool>("training");
    QTest::newRow("train") << true;
    QTest::newRow("eval") << false;
  }
  void causalFormIsCausal() {
    QFETCH(bool, training);
    DrrTransformer model(small(), small_drr());
    spread_routers(model);
    model.train(training);
    torch::NoGradGuard no_grad;
    const std::int64_t T = 16;
    const auto a = torch::randint(0, 37, {2, T}, torch::kLong);
    const auto la = model.forward(a).logits;
    for (std::int64_t t : {0, 3, 7, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, 37);
      const auto lb = model.forward(b).logits;
      QVERIFY2(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-6),
               qPrintable(QString("t=%1 diff %2").arg(t).arg(max_abs_diff(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1)))));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
      // A prefix alone gives the same logits: summary chunks are cut over max_seq_len, not over T.
      const auto prefix = model.forward(a.narrow(1, 0, t + 1)).logits;
      QVERIFY2(torch::allclose(prefix, la.narrow(1, 0, t + 1), 1e-5, 1e-6), qPrintable(QString("prefix t=%1").arg(t)));
    }
    // The memories were in play: layer 4 reads two layer outputs and two block summaries, with real weight.
    const auto out = model.forward(a, true);
    QCOMPARE(out.trace[4].stats.at("short_entries"), double(2 * T));
    QCOMPARE(out.trace[4].stats.at("long_entries"), double(2 * 4));
    QVERIFY(out.trace[4].stats.at("gate_short") > 0.05 && out.trace[4].stats.at("gate_long") > 0.05);
  }

  void seedFormIsNotCausal() {
    DrrTransformer model(small(), small_drr(DrrMemory::Seed));
    spread_routers(model);
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t T = 16;
    const auto a = torch::randint(0, 37, {2, T}, torch::kLong);
    auto b = a.clone();
    b.select(1, T - 1).add_(1).remainder_(37);  // another last token
    // The last token changes the first position's output: memory, summaries and attention all see the future.
    const double diff = max_abs_diff(model.forward(a).logits.select(1, 0), model.forward(b).logits.select(1, 0));
    QVERIFY2(diff > 1e-4, qPrintable(QString::number(diff)));
  }

  void routerInitGivesIdentityBias() {
    DrrTransformer model(small(), small_drr());
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t B = 2, T = 16, L = 5;
    const auto out = model.forward(torch::randint(0, 37, {B, T}, torch::kLong), true);
    const auto expected = torch::softmax(torch::tensor({2.0f, 0.0f, -0.5f}), 0);  // (3)
    const auto gates = out.token_data.at("drr_gates");                          // (B, T, L, 3)
    QCOMPARE(gates.sizes().vec(), (std::vector<std::int64_t>{B, T, L, 3}));
    QVERIFY(max_abs_diff(gates, expected.view({1, 1, 1, 3}).expand_as(gates)) < 1e-6);
    const double g0 = expected[0].item<double>();
    for (const auto& t : out.trace) {
      QCOMPARE(t.kind, std::string("drr"));
      QVERIFY(t.routed);
      QCOMPARE(t.gate.sizes().vec(), (std::vector<std::int64_t>{B, T}));
      QVERIFY(max_abs_diff(t.gate, torch::full({B, T}, 1.0 - g0)) < 1e-6);
      QVERIFY(std::abs(t.routed_fraction - (1.0 - g0)) < 1e-6);
      QCOMPARE(t.decision.sum().item<std::int64_t>(), std::int64_t(0));  // identity is every token's largest gate
      QVERIFY(std::abs(t.stats.at("gate_identity") - g0) < 1e-6);
      QVERIFY(std::abs(t.stats.at("gate_short") - expected[1].item<double>()) < 1e-6);
      QVERIFY(std::abs(t.stats.at("gate_long") - expected[2].item<double>()) < 1e-6);
    }
    QVERIFY(std::abs(out.stats.at("gate_identity") - g0) < 1e-6);
    QVERIFY(std::abs(out.stats.at("gate_long") - expected[2].item<double>()) < 1e-6);
    QCOMPARE(out.aux_loss.item<double>(), 0.0);
    QVERIFY(model.forward(torch::randint(0, 37, {B, T}, torch::kLong)).trace.empty());
  }

  void emptyMemoryGivesZeroContext() {
    DepthMemoryAttention attention(16, 4);
    const auto x = torch::randn({2, 5, 16}, torch::requires_grad());
    QVERIFY(torch::equal(attention(x, torch::zeros({2, 0, 16})), torch::zeros({2, 5, 16})));
    // Rows that see no entry give zero, without NaN forward or backward.
    const auto memory = torch::randn({2, 3, 16}, torch::requires_grad());
    auto visible = torch::zeros({5, 3}, torch::kBool);
    visible[2][0].fill_(true);
    visible[4].fill_(true);
    const auto out = attention(x, memory, visible);
    QVERIFY(torch::equal(out.select(1, 0), torch::zeros({2, 16})));
    QVERIFY(torch::equal(out.select(1, 3), torch::zeros({2, 16})));
    QVERIFY(out.select(1, 2).abs().sum().item<double>() > 0);
    out.sum().backward();
    QVERIFY(torch::isfinite(x.grad()).all().item<bool>() && torch::isfinite(memory.grad()).all().item<bool>());

    // In the model: a sequence shorter than the first summary chunk reads no long-term memory and stays finite.
    DrrTransformer model(small(16, 4), small_drr());
    spread_routers(model);
    torch::NoGradGuard no_grad;
    const auto short_out = model.forward(torch::randint(0, 37, {2, 3}, torch::kLong), true);  // first chunk is [0, 4)
    QVERIFY(torch::isfinite(short_out.logits).all().item<bool>());
    for (const auto& t : short_out.trace) {
      QCOMPARE(t.stats.at("long_entries"), 0.0);
      QCOMPARE(t.tokens_processed.at("long_memory"), std::int64_t(0));
    }
  }

  // Each row of a masked memory attention equals the paper's unmasked attention over only the entries it may see:
  // two layer outputs interleaved by position (the model's layout: each row sees a prefix, which the CPU's
  // staircase kernel scores) and side by side (the masked rectangle).
  void maskedMemoryMatchesPerRowReference_data() {
    QTest::addColumn<bool>("interleaved");
    QTest::newRow("interleaved (staircase)") << true;
    QTest::newRow("side by side (masked)") << false;
  }
  void maskedMemoryMatchesPerRowReference() {
    QFETCH(bool, interleaved);
    DepthMemoryAttention attention(16, 4);
    torch::NoGradGuard no_grad;
    const std::int64_t T = 6;
    const auto x = torch::randn({2, T, 16});
    const auto memory = torch::randn({2, 2 * T, 16});
    const auto pos = torch::arange(T);
    const auto causal = pos.unsqueeze(0) <= pos.unsqueeze(1);  // (T, T): s <= t
    const auto visible = interleaved ? torch::stack({causal, causal}, 2).reshape({T, 2 * T}) : causal.repeat({1, 2});
    const auto out = attention(x, memory, visible, interleaved);
    for (std::int64_t t = 0; t < T; ++t) {
      const auto entries = visible[t].nonzero().squeeze(1);
      QCOMPARE(entries.numel(), 2 * (t + 1));
      const auto expected = attention(x.narrow(1, t, 1), memory.index_select(1, entries));
      QVERIFY2(max_abs_diff(out.narrow(1, t, 1), expected) < 1e-6, qPrintable(QString("row %1").arg(t)));
    }
  }

  void staircaseMemoryEqualsMaskedMemory() {
    // The same entries in the two layouts (interleaved by position: the staircase kernel on the CPU; side by side:
    // the masked rectangle), with rows that see nothing (a long-term memory's first positions): equal outputs and
    // gradients of the input, the memory and the projections.
    const std::int64_t T = 40, layers = 3, C = 16;
    DepthMemoryAttention staircase(C, 4), masked(C, 4);
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < staircase->parameters().size(); ++i)
        masked->parameters()[i].copy_(staircase->parameters()[i]);
    }
    const auto x = torch::randn({2, T, C}, torch::requires_grad());
    const auto memory = torch::randn({2, layers, T, C}, torch::requires_grad());  // (B, layer, position, C)
    const auto pos = torch::arange(T);
    const auto causal = (pos.unsqueeze(0) + 3) <= pos.unsqueeze(1);  // rows 0..2 see nothing
    const auto by_position = memory.transpose(1, 2).reshape({2, T * layers, C});
    const auto side_by_side = memory.reshape({2, layers * T, C});
    const auto a =
        staircase(x, by_position, causal.unsqueeze(2).expand({T, T, layers}).reshape({T, T * layers}), true);
    const auto b = masked(x, side_by_side, causal.repeat({1, layers}));
    QVERIFY2(max_abs_diff(a, b) < 1e-5, qPrintable(QString::number(max_abs_diff(a, b))));
    QVERIFY(a.narrow(1, 0, 3).abs().max().item<double>() == 0.0);
    const auto weights = torch::randn_like(a);
    const auto grads_a = torch::autograd::grad({(a * weights).sum()}, {x, memory}, {}, true);
    const auto grads_b = torch::autograd::grad({(b * weights).sum()}, {x, memory}, {}, true);
    for (std::size_t i = 0; i < grads_a.size(); ++i)
      QVERIFY2(max_abs_diff(grads_a[i], grads_b[i]) < 1e-5, qPrintable(QString("input %1").arg(i)));
    (a * weights).sum().backward();
    (b * weights).sum().backward();
    for (std::size_t i = 0; i < staircase->parameters().size(); ++i)
      QVERIFY2(max_abs_diff(staircase->parameters()[i].grad(), masked->parameters()[i].grad()) < 1e-4,
               qPrintable(QString("parameter %1").arg(i)));
  }

  void causalSummariesUseAdaptivePoolChunks() {
    // adaptive_avg_pool1d(10 -> 4) cuts [0,3) [2,5) [5,8) [7,10) (overlapping when S does not divide T).
    const auto chunks = summary_chunks(10, 4);
    const std::vector<std::pair<int, int>> expected = {{0, 3}, {2, 5}, {5, 8}, {7, 10}};
    QCOMPARE(chunks.size(), expected.size());
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      QCOMPARE(chunks[i].start, std::int64_t(expected[i].first));
      QCOMPARE(chunks[i].end, std::int64_t(expected[i].second));
    }
    SummaryPool pool(16, 4);
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({2, 10, 16});
    QVERIFY(max_abs_diff(pool->pool_chunks(x, chunks), pool(x)) < 1e-6);
    // Complete chunks of a prefix of 6 tokens with chunks cut over max_seq_len 10: the first two.
    QCOMPARE(drr_summary_tokens(DrrOptions().summary_tokens(4), 6, 10), std::int64_t(2));
    QCOMPARE(drr_summary_tokens(DrrOptions().summary_tokens(4), 10, 10), std::int64_t(4));
    QCOMPARE(drr_summary_tokens(DrrOptions().summary_tokens(4).memory(DrrMemory::Seed), 6, 10), std::int64_t(4));
  }

  // d 8, 2 heads, 3 layers, W 2, S 2, block 2, router h = d, vocab 11, T = max_seq_len = 4, tied head.
  void overheadMatchesHandCount() {
    TransformerOptions t;
    t.vocab_size(11).max_seq_len(4).n_layer(3).n_embd(8).n_head(2);
    const auto o = DrrOptions().short_window(2).summary_tokens(2).block_size(2).router_hidden_mult(1);
    // Plain layer: LayerNorms 2*16, qkv 8*24+24, proj 64+8, MLP 8*32+32 and 32*8+8 = 872; x3 = 2616.
    // Outside the layers: token embedding 88, positions 32, final norm 16 = 136.
    // DRR per layer: router LayerNorm 16 + 8*8+8 + 8*3+3 = 115, memory attentions 2*4*64 = 512; pool 16+64+8 = 88.
    const double base_params = 2616 + 136, drr_params = 2616 + 3 * (115 + 512) + 88 + 136;
    // FLOPs at T = 4: plain layer qkv 1536 + scores/weighted sum 4*16*8 = 512 + proj 512 + MLP 4096 = 6656 (x3);
    // head 2*4*8*11 = 704. DRR: router 512+192 per layer; layer 1 short memory over 4 entries 512+1024+512+512
    // and the pool after it: projection 512 and (causal form) the chunk average, a (2, 4) x (4, 8) product 128;
    // layer 2 short over 8 entries 512+2048+1024+512 and long over 2 entries 512+512+256+512.
    const double base_flops = 3 * 6656 + 704;
    const double drr_flops = base_flops + 3 * 704 + (2560 + 512 + 128) + (4096 + 1792);
    const auto r = drr_overhead(t, o);
    QCOMPARE(r.seq, std::int64_t(4));
    QCOMPARE(r.base_params, base_params);
    QCOMPARE(r.arch_params, drr_params);
    QCOMPARE(r.base_stack_params, 2616.0);
    QCOMPARE(r.arch_stack_params, drr_params - 136);
    QCOMPARE(r.base_flops, base_flops);
    QCOMPARE(r.arch_flops, drr_flops);
    QCOMPARE(r.base_stack_flops, base_flops - 704);
    QCOMPARE(r.arch_stack_flops, drr_flops - 704);
    QCOMPARE(r.param_overhead(), drr_params / base_params - 1);

    // The models built from these shapes have exactly these counts, and the trace prices the same work.
    DrrTransformer drr(t, o);
    auto plain = t;
    plain.style(ModelStyle::GPT2);
    DenseTransformer dense(plain);
    QCOMPARE(double(drr.parameter_count()), drr_params);
    QCOMPARE(double(dense.parameter_count()), base_params);
    torch::NoGradGuard no_grad;
    const auto out = drr.forward(torch::randint(0, 11, {3, 4}, torch::kLong), true);
    double flops = 0, dense_flops = 0;
    for (const auto& l : out.trace) flops += l.flops, dense_flops += l.dense_flops;
    QCOMPARE(flops, 3 * (drr_flops - 704));
    QCOMPARE(dense_flops, 3 * (base_flops - 704));
    QVERIFY(QString::fromStdString(drr.describe()).contains("parameters (layers +"));
  }

  // Cross-field rules of this architecture; every option out of its schema range or of the wrong type is checked
  // for every architecture by test_conformance.
  void configErrorNamesKey_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("key");
    QTest::newRow("seed memory for an LM") << R"({"arch":"drr","memory":"seed"})" << "model.memory";
    QTest::newRow("heads") << R"({"arch":"drr","n_head":3})" << "model.n_head";
    QTest::newRow("style is not an option") << R"({"arch":"drr","style":"llama"})" << "model.style";
  }
  void configErrorNamesKey() {
    QFETCH(QString, overrides);
    QFETCH(QString, key);
    test::check_config_error_names_key(overrides, key, "drr");
  }

  void registryEntry() {
    const auto& entry = architecture("drr");
    QCOMPARE(entry.display_name, std::string("Depth Routing Residuals"));
    auto m = schema_defaults(entry.options);
    m["arch"] = "drr";
    QCOMPARE(m.at("short_window").get<int>(), 4);
    QCOMPARE(m.at("summary_tokens").get<int>(), 8);
    QCOMPARE(m.at("block_size").get<int>(), 4);
    QCOMPARE(m.at("router_hidden_mult").get<int>(), 1);
    QCOMPARE(m.at("memory").get<std::string>(), std::string("causal"));
    m["n_layer"] = 2;
    entry.check(m, "model");
    const auto model = create_model(m, {37, 32});
    auto* drr = dynamic_cast<DrrTransformer*>(model.get());
    QVERIFY(drr);
    QVERIFY(drr->drr_options().memory() == DrrMemory::Causal);
    QCOMPARE(drr->options().max_seq_len(), std::int64_t(32));
    QVERIFY(QString::fromStdString(drr->describe()).contains("causal"));
    // The registry refuses the seed form even when its check is bypassed.
    m["memory"] = "seed";
    try {
      create_model(m, {37, 32});
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model.memory"), e.what());
    }
    // Residual projections of the block get the scaled init; the router's last layer keeps the paper's init.
    const auto params = drr->named_parameters();
    QVERIFY(params["blocks.1.attn.proj.weight"].std().item<double>() < 0.013);
    QVERIFY(params["blocks.1.short_mem_attn.k_proj.weight"].std().item<double>() > 0.017);
    QCOMPARE(params["blocks.1.router_out.weight"].abs().sum().item<double>(), 0.0);
  }

  void residualProbeSeesEveryBlock() {
    DrrTransformer model(small(16, 3), small_drr());
    torch::NoGradGuard no_grad;
    ResidualProbe probe;
    model.forward(torch::randint(0, 37, {2, 8}, torch::kLong));
    QCOMPARE(probe.samples.size(), std::size_t(6));
    QCOMPARE(probe.samples[4].layer, 2);
    QCOMPARE(probe.samples[4].block, std::string("attn"));
    QCOMPARE(probe.samples[5].block, std::string("mlp"));
    QVERIFY(torch::isfinite(probe.samples[5].ratio).all().item<bool>());
  }

  void shortTrainingLowersLoss() {
    DrrTransformer model(small(), small_drr());
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, 37, {4, 16}, torch::kLong), y = torch::randint(0, 37, {4, 16}, torch::kLong);
    double first = 0, last = 0;
    for (int i = 0; i < 80; ++i) {
      const auto r = train_step(model, *opt, {x, y, {}}, 1.0, false, i == 79);
      last = r.loss.item<double>();
      if (i == 0) first = last;
      if (i == 79) QVERIFY(torch::isfinite(r.output.token_data.at("drr_gates")).all().item<bool>());
    }
    QVERIFY2(last < 0.2 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
    // The routers learned: their last layers left the zero init.
    for (const auto& layer : model.layers) QVERIFY(layer->router_out->weight.abs().sum().item<double>() > 0);
    // bf16 autocast runs.
    const auto r = train_step(model, *opt, {x, y, {}}, 1.0, /*bf16=*/true, /*trace=*/true);
    QVERIFY(std::isfinite(r.loss.item<double>()));
  }
};

}  // namespace test_drr

ROUTELAB_TEST_SUITE(test_drr, TestDrr)
#include "test_drr.moc"
