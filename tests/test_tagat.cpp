// TAGAT (TAGAT) and its vanilla baseline: the top-k gate, sparse dispatch against the dense oracle (forward and
// gradients), the routing losses on hand-computed gates, padding invariance, FiLM parameterisations, mean pooling,
// overfitting a tiny batch, checkpoint round trips and the registry's task split.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "core/config/experiment_config.h"
#include "core/models/registry.h"
#include "core/models/tagat.h"
#include "core/models/vanilla_classifier.h"
#include "core/train/checkpoint.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_tagat {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 50, kClasses = 3, kContext = 16;

TagatOptions tiny_tagat() {
  return TagatOptions(kVocab, kClasses, kContext).n_layer(2).n_embd(32).n_head(4).n_experts(4).top_k(2).dropout(0.0);
}

VanillaClassifierOptions tiny_vanilla() {
  return VanillaClassifierOptions(kVocab, kClasses, kContext).n_layer(2).n_embd(32).n_head(4).d_ff(64);
}

/// (B, T) tokens in [1, kVocab) with the first `lengths[b]` positions real; the rest padding with junk ids.
struct Inputs {
  torch::Tensor input, mask, segment;
};
Inputs make_inputs(const std::vector<std::int64_t>& lengths, std::int64_t T) {
  const auto B = static_cast<std::int64_t>(lengths.size());
  Inputs in;
  in.input = torch::randint(1, kVocab, {B, T}, torch::kLong);
  in.mask = torch::zeros({B, T}, torch::kBool);
  for (std::int64_t b = 0; b < B; ++b) in.mask[b].narrow(0, 0, lengths[b]).fill_(true);
  in.segment = torch::zeros({B, T}, torch::kLong);
  return in;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

/// The gates of every layer of `model` give the same logits `logits` (N) to every token: weight 0, bias = logits.
void fix_gate_logits(Tagat& model, const std::vector<float>& logits) {
  torch::NoGradGuard no_grad;
  for (auto& layer : model.layers) {
    layer->gate->weight.zero_();
    layer->gate->bias.copy_(torch::tensor(logits));
  }
}

/// Trains `model` on one fixed batch with Adam; returns the final training accuracy.
double overfit(SequenceClassifier& model, int steps) {
  torch::manual_seed(3);
  const auto in = make_inputs({10, 12, 7, 12, 9, 11, 12, 8, 12, 10, 6, 12}, 12);
  const auto labels = torch::randint(0, kClasses, {12}, torch::kLong);
  torch::optim::Adam opt(model.parameters(), torch::optim::AdamOptions(3e-3));
  model.train();
  for (int s = 0; s < steps; ++s) {
    const auto out = model.forward(in.input, in.mask, in.segment);
    const auto loss = torch::nn::functional::cross_entropy(out.logits, labels) + out.aux_loss;
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  model.eval();
  torch::NoGradGuard no_grad;
  const auto out = model.forward(in.input, in.mask, in.segment);
  return out.logits.argmax(-1).eq(labels).to(torch::kFloat).mean().item<double>();
}

}  // namespace

class TestTagat : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void init() { torch::manual_seed(7); }

  void topKWeightsSumToOneOverTheSelected() {
    const auto logits = torch::randn({3, 5, 6});
    const auto g = top_k_gate(logits, 3);
    QCOMPARE(g.weights.sizes().vec(), (std::vector<std::int64_t>{3, 5, 3}));
    QVERIFY(max_diff(g.weights.sum(-1), torch::ones({3, 5})) < 1e-6);
    QVERIFY(max_diff(g.dense.sum(-1), torch::ones({3, 5})) < 1e-6);
    // Exactly the k highest logits carry weight, renormalised over them only (softmax of the k selected logits).
    const auto kth = std::get<0>(logits.topk(3, -1)).select(-1, 2).unsqueeze(-1);  // (3, 5, 1)
    QVERIFY(g.dense.gt(0).eq(logits.ge(kth)).all().item<bool>());
    QVERIFY(g.dense.masked_select(logits.lt(kth)).abs().max().item<double>() == 0.0);
    const auto selected = logits.gather(-1, g.experts);
    QVERIFY(max_diff(g.weights, torch::softmax(selected, -1)) < 1e-6);
    QVERIFY(max_diff(g.dense.gather(-1, g.experts), g.weights) < 1e-7);
  }

  void sparseDispatchEqualsDenseOracle_data() {
    QTest::addColumn<QString>("film");
    QTest::newRow("one_plus_gamma") << "one_plus_gamma";
    QTest::newRow("raw") << "raw";
  }
  void sparseDispatchEqualsDenseOracle() {
    QFETCH(QString, film);
    auto model = std::make_shared<Tagat>(tiny_tagat().film(film == "raw" ? FilmKind::Raw : FilmKind::OnePlusGamma));
    const auto in = make_inputs({9, 5, 12, 1}, 12);
    const auto weights = torch::randn({4, kClasses});
    const auto run = [&](TagatDispatch dispatch) {
      model->set_dispatch(dispatch);
      model->zero_grad();
      const auto out = model->forward(in.input, in.mask, in.segment, /*trace=*/true);
      ((out.logits * weights).sum() + out.aux_loss).backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : model->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
      return std::make_tuple(out.logits.detach(), out.aux_loss.detach(), grads, out.trace);
    };
    const auto [sparse_logits, sparse_aux, sparse_grads, sparse_trace] = run(TagatDispatch::Sparse);
    const auto [dense_logits, dense_aux, dense_grads, dense_trace] = run(TagatDispatch::Dense);
    QVERIFY2(max_diff(sparse_logits, dense_logits) < 1e-5, qPrintable(QString::number(max_diff(sparse_logits, dense_logits))));
    QVERIFY(max_diff(sparse_aux, dense_aux) < 1e-6);
    double worst = 0, largest = 0;
    for (std::size_t i = 0; i < sparse_grads.size(); ++i) {
      worst = std::max(worst, max_diff(sparse_grads[i], dense_grads[i]));
      largest = std::max(largest, sparse_grads[i].abs().max().item<double>());
    }
    QVERIFY2(worst < 1e-5, qPrintable(QString("gradient difference %1").arg(worst)));
    QVERIFY(largest > 1e-3);  // the gradients are not trivially zero
    // Sparse dispatch ran k of N experts per real token; dense ran all N on every token.
    const std::int64_t real = 9 + 5 + 12 + 1;
    QCOMPARE(sparse_trace[0].tokens_processed.at("attn"), real * 2);
    QCOMPARE(dense_trace[0].tokens_processed.at("attn"), real * 4);
    QVERIFY(std::abs(sparse_trace[1].routed_fraction - 0.5) < 1e-12);
    QCOMPARE(dense_trace[1].routed_fraction, 1.0);
    QCOMPARE(dense_trace[0].flops, dense_trace[0].dense_flops);
    QCOMPARE(sparse_trace[0].dense_flops, dense_trace[0].dense_flops);
    QVERIFY(sparse_trace[0].flops < sparse_trace[0].dense_flops);
  }

  void flopsFromTheRoutingEqualHandComputation() {
    // Every token picks experts 2 and 0 (k = 2 of N = 4), C = 32: experts 1 and 3 never run.
    auto model = Tagat(tiny_tagat());
    fix_gate_logits(model, {1.0f, 0.0f, 2.0f, -1.0f});
    const auto in = make_inputs({5, 3}, 6);
    const auto out = model.forward(in.input, in.mask, in.segment, /*trace=*/true);
    const double C = 32, n = 8, sum_sq = 5 * 5 + 3 * 3;
    const double gate = 2 * n * C * 4;
    const double kv = 2 * n * C * 2 * C;
    const double per_query = 2 * (2 * C * C) + 2 * C * 4 * C + 2 * 4 * C * C + 2 * C * 2 * C;  // q, out, FFN, FiLM
    const double expert = kv + n * per_query + 4 * C * sum_sq;
    QCOMPARE(out.trace[0].flops, gate + 2 * expert);
    QCOMPARE(out.trace[1].dense_flops, gate + 4 * expert);
    QCOMPARE(out.trace[1].tokens_processed.at("mlp"), std::int64_t(16));
  }

  void routingLossesEqualHandComputation() {
    // N = 3, k = 2; two real tokens and one padding token.
    const auto logits = torch::tensor({2.0f, 1.0f, 0.0f, 0.5f, 0.0f, 3.0f, 5.0f, 0.0f, 0.0f}).view({1, 3, 3});
    const auto mask = torch::tensor({true, true, false}).view({1, 3});
    const auto g = top_k_gate(logits, 2);
    const auto losses = routing_losses(g, mask);
    const double a0 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), a1 = 1 - a0;  // token 0: experts 0, 1
    const double b2 = std::exp(3.0) / (std::exp(3.0) + std::exp(0.5)), b0 = 1 - b2;  // token 1: experts 2, 0
    const double h0 = -(a0 * std::log(a0) + a1 * std::log(a1)), h1 = -(b2 * std::log(b2) + b0 * std::log(b0));
    const double entropy = (h0 + h1) / 2;
    const std::vector<double> u = {(a0 + b0) / 2, a1 / 2, b2 / 2};
    double balance = 0;
    for (const double ui : u) balance += (ui - 1.0 / 3) * (ui - 1.0 / 3);
    QVERIFY(std::abs(losses.entropy.item<double>() - entropy) < 1e-6);
    for (int i = 0; i < 3; ++i) QVERIFY(std::abs(losses.load[i].item<double>() - u[i]) < 1e-6);
    QVERIFY(std::abs(balance_loss(losses.load).item<double>() - balance) < 1e-6);

    // Through the model: every token gets the same gate logits -> aux = λ_ent H + λ_bal Σ (u - 1/N)².
    auto model = Tagat(TagatOptions(kVocab, kClasses, kContext)
                           .n_layer(2).n_embd(16).n_head(2).n_experts(3).top_k(2).dropout(0.0)
                           .lambda_ent(2.0).lambda_bal(3.0));
    fix_gate_logits(model, {0.5f, 0.0f, 3.0f});
    const auto in = make_inputs({4, 7}, 8);
    const auto out = model.forward(in.input, in.mask, in.segment, /*trace=*/true);
    const double hand_balance =
        (b0 - 1.0 / 3) * (b0 - 1.0 / 3) + (0 - 1.0 / 3) * (0 - 1.0 / 3) + (b2 - 1.0 / 3) * (b2 - 1.0 / 3);
    QVERIFY(std::abs(out.aux_loss.item<double>() - (2.0 * h1 + 3.0 * hand_balance)) < 1e-5);
    QVERIFY(std::abs(out.stats.at("entropy") - h1) < 1e-6);
    QVERIFY(std::abs(out.stats.at("load_imbalance") - hand_balance) < 1e-6);
    QVERIFY(std::abs(out.stats.at("load/L1/E2") - b2) < 1e-6);
    QVERIFY(std::abs(out.stats.at("assign/L0/E0") - 0.5) < 1e-9);  // (token, slot) shares: experts 2 and 0
    QCOMPARE(out.stats.at("assign/L0/E1"), 0.0);
    const auto gate = out.token_data.at("gate");  // (B, T, L, N)
    QCOMPARE(gate.sizes().vec(), (std::vector<std::int64_t>{2, 8, 2, 3}));
    QVERIFY(std::abs(gate[0][0][1][2].item<double>() - b2) < 1e-6);
    QCOMPARE(out.token_data.at("expert").sizes().vec(), (std::vector<std::int64_t>{2, 8, 2, 2}));
  }

  void balanceScopeEqualsHandComputation() {
    // Two layers with different fixed gates (N = 3, k = 2): layer 0 picks experts 2, 0; layer 1 picks 1, 2.
    auto model = Tagat(TagatOptions(kVocab, kClasses, kContext)
                           .n_layer(2).n_embd(16).n_head(2).n_experts(3).top_k(2).dropout(0.0)
                           .lambda_ent(0.0).lambda_bal(1.0));
    {
      torch::NoGradGuard no_grad;
      for (auto& layer : model.layers) layer->gate->weight.zero_();
      model.layers[0]->gate->bias.copy_(torch::tensor({0.5f, 0.0f, 3.0f}));
      model.layers[1]->gate->bias.copy_(torch::tensor({0.0f, 3.0f, 0.5f}));
    }
    const double hi = std::exp(3.0) / (std::exp(3.0) + std::exp(0.5)), lo = 1 - hi;
    // u(L0) = (lo, 0, hi), u(L1) = (0, hi, lo); their mean = (lo/2, hi/2, 1/2).
    const auto sq = [](double u) { return (u - 1.0 / 3) * (u - 1.0 / 3); };
    const double mean_load = sq(lo / 2) + sq(hi / 2) + sq(0.5);
    const double per_layer = sq(lo) + sq(0) + sq(hi);  // the same for both layers
    const auto in = make_inputs({4, 7}, 8);
    auto out = model.forward(in.input, in.mask, in.segment, /*trace=*/true);
    QVERIFY(std::abs(out.aux_loss.item<double>() - mean_load) < 1e-6);
    QVERIFY(std::abs(out.stats.at("load_imbalance") - mean_load) < 1e-6);
    QVERIFY(std::abs(out.stats.at("load_imbalance_per_layer") - per_layer) < 1e-6);
    QVERIFY(per_layer > 3 * mean_load);  // each layer has a dead expert; the mean hides it
    auto scoped = Tagat(TagatOptions(model.options()).balance(BalanceScope::PerLayer));
    torch::NoGradGuard no_grad;
    for (const auto& p : model.named_parameters()) scoped.named_parameters()[p.key()].copy_(p.value());
    out = scoped.forward(in.input, in.mask, in.segment, /*trace=*/true);
    QVERIFY(std::abs(out.aux_loss.item<double>() - per_layer) < 1e-6);
  }

  void paddingNeverChangesThePrediction_data() {
    QTest::addColumn<QString>("arch");
    QTest::newRow("tagat") << "tagat";
    QTest::newRow("tagat-learned-positions") << "tagat-learned";
    QTest::newRow("vanilla-classifier") << "vanilla-classifier";
  }
  void paddingNeverChangesThePrediction() {
    QFETCH(QString, arch);
    std::shared_ptr<SequenceClassifier> model;
    if (arch == "vanilla-classifier")
      model = std::make_shared<VanillaClassifier>(tiny_vanilla());
    else
      model = std::make_shared<Tagat>(tiny_tagat().positional(arch == "tagat" ? PositionalKind::Sinusoidal
                                                                              : PositionalKind::Learned));
    model->eval();
    torch::NoGradGuard no_grad;
    const auto in = make_inputs({6, 3, 6}, 6);
    const auto short_logits = model->forward(in.input, in.mask, in.segment).logits;
    // Append 5 padding positions with arbitrary ids: the same logits.
    const auto pad_ids = torch::randint(0, kVocab, {3, 5}, torch::kLong);
    const auto longer = torch::cat({in.input, pad_ids}, 1);
    const auto longer_mask = torch::cat({in.mask, torch::zeros({3, 5}, torch::kBool)}, 1);
    const auto longer_segment = torch::zeros({3, 11}, torch::kLong);
    const auto long_logits = model->forward(longer, longer_mask, longer_segment).logits;
    QVERIFY2(max_diff(short_logits, long_logits) < 1e-5, qPrintable(QString::number(max_diff(short_logits, long_logits))));
    // Changing a real token does change the prediction (the test can fail).
    auto changed = longer.clone();
    changed[0][2] = (changed[0][2].item<std::int64_t>() % (kVocab - 1)) + 1;  // another id in [1, kVocab)
    QVERIFY(max_diff(model->forward(changed, longer_mask, longer_segment).logits[0], long_logits[0]) > 1e-6);
  }

  void filmParameterisationsAtInit() {
    // With the meta-networks at zero (γ = β = 0) the paper's raw FiLM removes every expert (h = LayerNorm(x)),
    // while (1 + γ) passes the gated experts through.
    torch::NoGradGuard no_grad;
    const auto in = make_inputs({5, 8}, 8);
    std::map<FilmKind, torch::Tensor> logits;
    for (const auto film : {FilmKind::Raw, FilmKind::OnePlusGamma}) {
      torch::manual_seed(21);
      Tagat model(tiny_tagat().film(film));
      model.eval();
      for (auto& layer : model.layers)
        for (auto& f : layer->films) {
          f->weight.zero_();
          f->bias.zero_();
        }
      logits[film] = model.forward(in.input, in.mask, in.segment).logits;
      // The experts-free reference: embeddings, then each layer's output LayerNorm alone.
      auto x = model.tok_emb(in.input) + model.pos_table.narrow(0, 0, 8);
      for (auto& layer : model.layers) x = layer->norm(x);
      const auto reference = model.head(x.select(1, 0));
      if (film == FilmKind::Raw)
        QVERIFY(max_diff(logits[film], reference) < 1e-5);
      else
        QVERIFY(max_diff(logits[film], reference) > 1e-3);
    }
    QVERIFY(max_diff(logits[FilmKind::Raw], logits[FilmKind::OnePlusGamma]) > 1e-3);
  }

  void vanillaMeanPoolingIgnoresPadding() {
    const auto h = torch::tensor({1.0f, 2.0f, 3.0f, 100.0f, 4.0f, 5.0f, 6.0f, 7.0f}).view({2, 4, 1});
    const auto mask = torch::tensor({true, true, true, false, true, true, true, true}).view({2, 4});
    const auto pooled = masked_mean(h, mask);
    QVERIFY(std::abs(pooled[0][0].item<double>() - 2.0) < 1e-6);
    QVERIFY(std::abs(pooled[1][0].item<double>() - 5.5) < 1e-6);
  }

  void tinyModelOverfits_data() {
    QTest::addColumn<QString>("arch");
    QTest::newRow("tagat") << "tagat";
    QTest::newRow("vanilla-classifier") << "vanilla-classifier";
  }
  void tinyModelOverfits() {
    QFETCH(QString, arch);
    std::shared_ptr<SequenceClassifier> model;
    if (arch == "tagat")
      model = std::make_shared<Tagat>(tiny_tagat().n_layer(1));
    else
      model = std::make_shared<VanillaClassifier>(tiny_vanilla().dropout(0.0).pool_dropout(0.0));
    const double accuracy = overfit(*model, 150);
    QVERIFY2(accuracy == 1.0, qPrintable(QString("train accuracy %1").arg(accuracy)));
  }

  void checkpointRoundTrip() {
    const auto path = dir_.filePath("tagat.pt").toStdString();
    auto a = std::make_shared<Tagat>(tiny_tagat().segments(true).positional(PositionalKind::Learned));
    torch::optim::AdamW opt(a->parameters(), torch::optim::AdamWOptions(1e-3));
    save_checkpoint(path, *a, opt, {3, 0, 0, "{}", "{}", 0, ""});
    torch::manual_seed(99);
    auto b = std::make_shared<Tagat>(tiny_tagat().segments(true).positional(PositionalKind::Learned));
    const auto in = make_inputs({7, 4}, 8);
    a->eval();
    b->eval();
    torch::NoGradGuard no_grad;
    QVERIFY(max_diff(a->forward(in.input, in.mask, in.segment).logits, b->forward(in.input, in.mask, in.segment).logits) > 1e-4);
    QCOMPARE(load_checkpoint(path, *b, nullptr).step, std::int64_t(3));
    QCOMPARE(max_diff(a->forward(in.input, in.mask, in.segment).logits, b->forward(in.input, in.mask, in.segment).logits), 0.0);
    // A checkpoint of another shape is refused, naming the file.
    auto other = std::make_shared<Tagat>(tiny_tagat().n_experts(3));
    QVERIFY_THROWS_EXCEPTION(CheckpointError, load_checkpoint(path, *other, nullptr));
  }

  void registryTaskSplit() {
    QCOMPARE(architecture("tagat").task, Task::Classification);
    QCOMPARE(architecture("vanilla-classifier").task, Task::Classification);
    QCOMPARE(architecture("dense").task, Task::LanguageModel);
    const ModelContext ctx{kVocab, kContext, kClasses};
    const auto tagat_json = schema_defaults(architecture("tagat").options);
    auto with_arch = [](nlohmann::json m, const std::string& arch) {
      m["arch"] = arch;
      return m;
    };
    const auto classifier = create_classifier(with_arch(tagat_json, "tagat"), ctx);
    QCOMPARE(QString::fromStdString(classifier->arch_id()), QString("tagat"));
    QVERIFY(classifier->parameter_count() > 0);
    try {
      create_model(with_arch(tagat_json, "tagat"), ctx);
      QFAIL("create_model accepted a classification architecture");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model.arch"), e.what());
    }
    QVERIFY_THROWS_EXCEPTION(
        ConfigError, create_classifier(with_arch(schema_defaults(architecture("dense").options), "dense"), ctx));
    // Decay: linear matrices yes; embeddings, norms, biases no.
    QVERIFY(classifier->decays("layers.0.experts.0.q.weight", torch::zeros({4, 4})));
    QVERIFY(!classifier->decays("tok_emb.weight", torch::zeros({4, 4})));
    QVERIFY(!classifier->decays("head.bias", torch::zeros({4})));
    // Config checks name the key.
    try {
      resolve_config({{"model", {{"arch", "tagat"}, {"top_k", 5}}}});
      QFAIL("top_k > n_experts accepted");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model.top_k"), e.what());
    }
  }
};

}  // namespace test_tagat

ROUTELAB_TEST_SUITE(test_tagat, TestTagat)
#include "test_tagat.moc"
