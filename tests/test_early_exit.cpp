// Early exit: the training loss is the uniform mean of every head's CE (through train_step), confidence exiting
// against a sequential state-copying reference, the disabled threshold as the full model, causality with tokens
// exiting, traces' FLOPs and α from cost/flops.h, registry, config errors, checkpoints, overfitting.
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/early_exit.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"

#include "model_test_support.h"
#include "tests/suite.h"

namespace test_early_exit {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 11;

TransformerOptions small(ModelStyle style = ModelStyle::GPT2, std::int64_t kv_heads = 0, std::int64_t layers = 4) {
  return test::small_transformer(style, kv_heads, layers, kVocab, 64);
}

using test::add_style_rows;

std::unique_ptr<torch::optim::AdamW> optimizer(LanguageModel& model, double lr) {
  return make_optimizer(model, nlohmann::json{{"lr", lr}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8},
                                              {"weight_decay", 0.0}});
}

/// Makes the tied heads confident (large embedding norms) and the blocks lively, so that a threshold between
/// confidence quantiles lets tokens exit at several depths.
void make_confident(EarlyExitTransformer& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    if (item.key() == "tok_emb.weight") item.value().normal_(0.0, 0.1);
    if (item.key().find("proj.weight") != std::string::npos || item.key().find("down.weight") != std::string::npos)
      item.value().normal_(0.0, 0.15);
  }
  // Deeper heads sharper (norm gains growing with depth), so that tokens pass the threshold at several depths.
  for (std::size_t l = 0; l < model.exit_norms.size(); ++l) model.exit_norms[l]->weight.fill_(1.0 + 0.3 * double(l));
  model.named_parameters()["final_norm.weight"].fill_(1.0 + 0.3 * double(model.exit_norms.size()));
}

/// A threshold that about `exiting` of the (token, earlier exit head) pairs pass.
double threshold_for(EarlyExitTransformer& model, const torch::Tensor& tokens, double exiting) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.train();
  std::vector<torch::Tensor> confidences;  // every earlier exit head's, pooled
  for (const auto& e : model.forward(tokens).exit_logits) confidences.push_back(torch::softmax(e, -1).amax(-1).reshape({-1}));
  const auto conf = torch::cat(confidences);
  model.train(was_training);
  // Halfway between two neighbouring confidences, so that no token sits on the threshold.
  const auto sorted = std::get<0>(conf.to(torch::kDouble).sort());
  const auto k = std::min<std::int64_t>(static_cast<std::int64_t>((1.0 - exiting) * double(sorted.size(0))),
                                        sorted.size(0) - 2);
  const double tau = 0.5 * (sorted[k].item<double>() + sorted[k + 1].item<double>());
  if (!(tau < 1.0)) throw std::logic_error("saturated heads: no threshold below 1 separates the tokens");
  return tau;
}

/// Sequential decoding with state copying, one position at a time: block l's keys and values come from a
/// per-layer cache of the states that entered block l (an exited token's frozen state). Returns (T, V) logits
/// and each position's exit block.
torch::Tensor incremental_reference(EarlyExitTransformer& model, const torch::Tensor& tokens, double tau,
                                    std::vector<std::int64_t>& exit_at) {
  torch::NoGradGuard no_grad;
  const auto T = tokens.size(0), L = static_cast<std::int64_t>(model.blocks.size()), C = model.options().n_embd();
  auto params = model.named_parameters();
  auto x = at::embedding(params["tok_emb.weight"], tokens);  // (T, C)
  if (model.options().style() == ModelStyle::GPT2) x = x + params["pos_emb.weight"].narrow(0, 0, T);
  std::vector<torch::Tensor> cache;  // per layer (T, C); separate storage each
  for (std::int64_t l = 0; l < L; ++l) cache.push_back(torch::zeros({T, C}));
  std::vector<torch::Tensor> rows;
  exit_at.assign(static_cast<std::size_t>(T), L - 1);
  for (std::int64_t t = 0; t < T; ++t) {
    auto h = x[t];  // (C)
    torch::Tensor logit;
    for (std::int64_t l = 0; l < L; ++l) {
      cache[static_cast<std::size_t>(l)][t].copy_(h);
      if (logit.defined()) continue;  // exited: the frozen state still feeds deeper layers' keys and values
      auto& block = model.blocks[static_cast<std::size_t>(l)];
      const auto seen = cache[static_cast<std::size_t>(l)].narrow(0, 0, t + 1).unsqueeze(0);  // (1, t+1, C)
      const auto a = block->attn(block->norm1(seen), torch::arange(t + 1))[0][t];              // query t only
      const auto h1 = h + a;
      h = h1 + block->mlp(block->norm2(h1.view({1, 1, C}))).view({C});
      const auto head = model.exit_head(static_cast<std::size_t>(l), h.view({1, 1, C})).view({-1});  // (V)
      if (l == L - 1 || torch::softmax(head, -1).max().item<double>() >= tau) {
        logit = head;
        exit_at[static_cast<std::size_t>(t)] = l;
      }
    }
    rows.push_back(logit);
  }
  return torch::stack(rows);  // (T, V)
}

}  // namespace

class TestEarlyExit : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(5); }

  void trainingHeadsAndTrace_data() { add_style_rows(); }
  void trainingHeadsAndTrace() {
    QFETCH(int, style);
    QFETCH(int, kv);
    EarlyExitTransformer model(small(ModelStyle(style), kv));
    QCOMPARE(model.arch_id(), std::string("early-exit"));
    QCOMPARE(model.exit_options().exit_threshold(), 1.0);  // the default evaluates the full model
    const std::int64_t B = 3, T = 10;
    const auto out = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong), true);
    QCOMPARE(out.logits.sizes().vec(), (std::vector<std::int64_t>{B, T, kVocab}));
    QCOMPARE(out.exit_logits.size(), std::size_t(3));
    for (const auto& e : out.exit_logits) {
      QCOMPARE(e.sizes().vec(), (std::vector<std::int64_t>{B, T, kVocab}));
      QVERIFY(e.requires_grad());
    }
    QCOMPARE(out.aux_loss.item<double>(), 0.0);
    QCOMPARE(out.trace.size(), std::size_t(4));
    const auto shape = layer_shape(model.options());
    const double head = linear_flops(B * T, 32, kVocab);
    for (int l = 0; l < 4; ++l) {
      const auto& t = out.trace[std::size_t(l)];
      QCOMPARE(t.layer, l);
      QCOMPARE(t.routed, l > 0);
      QCOMPARE(t.routed_fraction, 1.0);  // training: every token runs every block
      // Training pays the earlier exits' heads as well.
      QVERIFY(std::abs(t.flops - (dense_layer_flops(B, T, shape) + (l < 3 ? head : 0.0))) < 1e-9 * t.flops);
      QCOMPARE(t.dense_flops, dense_layer_flops(B, T, shape));
      QVERIFY(t.stats.at("head_confidence") > 0.0 && t.stats.at("head_confidence") <= 1.0);
    }
    QCOMPARE(out.stats.at("alpha"), 1.0);
    QCOMPARE(out.stats.at("tlops_saved"), 0.0);
    QVERIFY(torch::equal(out.token_data.at("exit_layer"), torch::full({B, T}, 3, torch::kLong)));
  }

  void lossIsUniformMeanOfHeads() {
    EarlyExitTransformer model(small());
    const std::int64_t B = 2, T = 9;
    const auto x = torch::randint(0, kVocab, {B, T}, torch::kLong), y = torch::randint(0, kVocab, {B, T}, torch::kLong);
    auto mask = torch::ones({B, T});
    mask.narrow(1, 0, 3).zero_();  // loss only on positions 3..8, as the synthetic tasks mask their source

    // Hand computation: the mean over the 4 heads of the masked CE, -log softmax at the target.
    model.zero_grad();
    const auto out = model.forward(x);
    std::vector<torch::Tensor> heads = out.exit_logits;
    heads.push_back(out.logits);
    QCOMPARE(heads.size(), std::size_t(4));
    torch::Tensor total = torch::zeros({});
    for (const auto& h : heads) {
      const auto logp = torch::log_softmax(h, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1);  // (B, T)
      const auto ce = -(logp * mask).sum() / mask.sum();
      QVERIFY(std::abs(ce.item<double>() - lm_loss(h, y, mask).item<double>()) < 1e-5);
      total = total + ce / 4.0;
    }
    total.backward();
    double hand_sq = 0;
    for (const auto& p : model.parameters())
      if (p.grad().defined()) hand_sq += p.grad().pow(2).sum().item<double>();
    const double final_only_ce = lm_loss(out.logits, y, mask).item<double>();

    // train_step with lr 0 (nothing moves) and no clipping reports the gradient norm of what it minimised.
    auto opt = optimizer(model, 0.0);
    const auto r = train_step(model, *opt, {x, y, mask}, /*grad_clip=*/0.0, false, false);
    const double grad_norm = r.grad_norm.item<double>();
    QVERIFY2(std::abs(grad_norm - std::sqrt(hand_sq)) < 1e-5 * std::sqrt(hand_sq),
             qPrintable(QString("%1 vs %2").arg(grad_norm).arg(std::sqrt(hand_sq))));
    QVERIFY(std::abs(r.loss.item<double>() - final_only_ce) < 1e-6);  // the reported loss is the last head's

    // The final head alone would give another gradient: the exits really are in the objective.
    model.zero_grad();
    lm_loss(model.forward(x).logits, y, mask).backward();
    double final_sq = 0;
    for (const auto& p : model.parameters())
      if (p.grad().defined()) final_sq += p.grad().pow(2).sum().item<double>();
    QVERIFY(std::abs(std::sqrt(final_sq) - std::sqrt(hand_sq)) > 1e-3 * std::sqrt(hand_sq));
  }

  void exitingMatchesStateCopyingReference_data() { add_style_rows(); }
  void exitingMatchesStateCopyingReference() {
    QFETCH(int, style);
    QFETCH(int, kv);
    EarlyExitTransformer model(small(ModelStyle(style), kv, 5));
    make_confident(model);
    const std::int64_t B = 3, T = 14;
    const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
    const double tau = threshold_for(model, tokens, 0.3);
    model.set_exit_threshold(tau);
    model.eval();
    torch::NoGradGuard no_grad;
    const auto out = model.forward(tokens, true);
    QVERIFY(out.exit_logits.empty());
    const auto exit_layer = out.token_data.at("exit_layer");
    std::vector<int> per_block(5, 0);
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<std::int64_t> exit_at;
      const auto expected = incremental_reference(model, tokens[b], tau, exit_at);
      for (std::int64_t t = 0; t < T; ++t) {
        QCOMPARE(exit_layer[b][t].item<std::int64_t>(), exit_at[std::size_t(t)]);
        ++per_block[std::size_t(exit_at[std::size_t(t)])];
      }
      // An exited token's logits are its exit head's on its frozen state.
      QVERIFY2(torch::allclose(out.logits[b], expected, 1e-4, 1e-4),
               qPrintable(QString("max diff %1").arg((out.logits[b] - expected).abs().max().item<double>())));
    }
    // Tokens left at two or more earlier blocks, and some ran to the end.
    const auto depths = std::count_if(per_block.begin(), per_block.end() - 1, [](int n) { return n > 0; });
    QVERIFY2(depths >= 2 && per_block[4] > 0,
             qPrintable(QString("%1 %2 %3 %4 %5").arg(per_block[0]).arg(per_block[1]).arg(per_block[2])
                            .arg(per_block[3]).arg(per_block[4])));
  }

  void disabledThresholdIsFullModel() {
    EarlyExitTransformer model(small());
    make_confident(model);
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    torch::NoGradGuard no_grad;
    const auto full = model.forward(tokens).logits;  // training mode, dropout 0
    model.eval();
    const auto out = model.forward(tokens, true);
    QVERIFY(torch::equal(out.logits, full));
    QVERIFY(out.exit_logits.empty());
    QCOMPARE(out.stats.at("alpha"), 1.0);
    QVERIFY(torch::equal(out.token_data.at("exit_layer"), torch::full({2, 12}, 3, torch::kLong)));
    // No earlier head is computed when nothing can exit: every layer costs what a dense layer costs.
    for (const auto& t : out.trace) QCOMPARE(t.flops, t.dense_flops);
    // Exiting on, then off again: the option only switches behaviour.
    model.set_exit_threshold(0.0);
    const auto all_exit = model.forward(tokens, true);
    QCOMPARE(all_exit.stats.at("alpha"), 0.0);  // every token leaves after the stem
    QVERIFY(std::abs(all_exit.stats.at("tlops_saved") - 0.75) < 1e-12);
    QVERIFY(torch::equal(all_exit.token_data.at("exit_layer"), torch::zeros({2, 12}, torch::kLong)));
    model.set_exit_threshold(1.0);
    QVERIFY(torch::equal(model.forward(tokens).logits, full));
  }

  void causalityWithExits_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("training");
    QTest::newRow("gpt2 train") << int(ModelStyle::GPT2) << 0 << true;
    QTest::newRow("gpt2 exiting") << int(ModelStyle::GPT2) << 0 << false;
    QTest::newRow("llama exiting") << int(ModelStyle::Llama) << 0 << false;
    QTest::newRow("llama-gqa exiting") << int(ModelStyle::Llama) << 2 << false;
  }
  void causalityWithExits() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(bool, training);
    EarlyExitTransformer model(small(ModelStyle(style), kv));
    make_confident(model);
    const std::int64_t T = 16;
    const auto a = torch::randint(0, kVocab, {2, T}, torch::kLong);
    model.set_exit_threshold(threshold_for(model, a, 0.4));
    model.train(training);
    torch::NoGradGuard no_grad;
    if (!training) {
      const auto alpha = model.forward(a, true).stats.at("alpha");
      QVERIFY2(alpha > 0.2 && alpha < 0.9, qPrintable(QString::number(alpha)));  // tokens do exit
    }
    for (std::int64_t t : {0, 5, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
      const auto la = model.forward(a).logits, lb = model.forward(b).logits;
      QVERIFY(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-6));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
    }
  }

  void traceFlopsAndAlphaWithExits() {
    EarlyExitTransformer model(small(ModelStyle::Llama, 2, 5));
    make_confident(model);
    const std::int64_t B = 3, T = 12, L = 5;
    const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
    model.set_exit_threshold(threshold_for(model, tokens, 0.3));
    model.eval();
    torch::NoGradGuard no_grad;
    const auto out = model.forward(tokens, true);
    const auto exit_layer = out.token_data.at("exit_layer");
    const auto shape = layer_shape(model.options());
    QCOMPARE(shape.d_kv, std::int64_t(16));
    std::vector<double> shares;
    for (std::int64_t l = 0; l < L; ++l) {
      const auto& t = out.trace[std::size_t(l)];
      // Active at block l: not exited at an earlier block.
      const auto active = exit_layer.ge(l);  // (B, T)
      const double n = active.sum().item<double>();
      double expected = 0;
      if (l == 0) {
        expected = dense_layer_flops(B, T, shape);
      } else {
        const double all = B * T;
        expected = q_k_flops(n, shape) + v_flops(n, shape) + linear_flops(all - n, 32, 2 * 16) +
                   attention_core_flops(n * T, shape) + out_proj_flops(n, shape) + mlp_flops(n, shape);
        QVERIFY(torch::equal(t.decision, active));
        QCOMPARE(t.routed_fraction, n / all);
        QCOMPARE(t.tokens_processed.at("mlp"), std::int64_t(n));
        QCOMPARE(t.tokens_processed.at("kv"), B * T);
        shares.push_back(n / all);
      }
      if (l < L - 1) expected += linear_flops(n, 32, kVocab);  // deciding needs this block's head
      QVERIFY2(std::abs(t.flops - expected) < 1e-9 * expected,
               qPrintable(QString("layer %1: %2 vs %3").arg(l).arg(t.flops).arg(expected)));
      QVERIFY(t.flops <= t.dense_flops + linear_flops(B * T, 32, kVocab));
      QCOMPARE(t.dense_flops, dense_layer_flops(B, T, shape));
    }
    double alpha = 0;
    for (const double s : shares) alpha += s / 4.0;
    QVERIFY(alpha > 0.05 && alpha < 0.95);
    QVERIFY(std::abs(out.stats.at("alpha") - alpha) < 1e-12);
    QVERIFY(std::abs(out.stats.at("tlops_saved") - (1.0 - (1.0 + 4 * alpha) / 5)) < 1e-12);
    QCOMPARE(early_exit_block_flops(T, {T, T, T}, shape), dense_layer_flops(B, T, shape));
  }

  void residualRatiosSkipExitedTokens() {
    EarlyExitTransformer model(small());
    make_confident(model);
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    model.set_exit_threshold(threshold_for(model, tokens, 0.5));
    model.eval();
    torch::NoGradGuard no_grad;
    ResidualProbe probe;
    const auto out = model.forward(tokens, true);
    const auto exit_layer = out.token_data.at("exit_layer");
    QCOMPARE(probe.samples.size(), std::size_t(8));
    for (const auto& s : probe.samples) {
      const auto skipped = exit_layer.lt(s.layer);  // exited before this block
      QVERIFY(torch::equal(s.ratio.isnan(), skipped));
    }
  }

  void sharedExitNormAndRegistry() {
    const auto& entry = architecture("early-exit");
    QCOMPARE(entry.display_name, std::string("Early exit"));
    auto model_json = schema_defaults(entry.options);
    model_json["arch"] = "early-exit";
    QCOMPARE(model_json.at("exit_threshold").get<double>(), 1.0);
    QCOMPARE(model_json.at("shared_exit_norm").get<bool>(), false);
    model_json["style"] = "gpt2";
    model_json["n_layer"] = 6;
    model_json["exit_threshold"] = 0.8;
    entry.check(model_json, "model");
    const auto own = create_model(model_json, {37, 32});
    auto* ee = dynamic_cast<EarlyExitTransformer*>(own.get());
    QVERIFY(ee);
    QCOMPARE(ee->exit_options().exit_threshold(), 0.8);
    QCOMPARE(ee->exit_norms.size(), std::size_t(5));
    const auto params = ee->named_parameters();
    QVERIFY(params.contains("exit_norms.4.weight") && params.contains("exit_norms.4.bias"));
    QVERIFY(!params.contains("lm_head.weight"));  // every head is the tied embedding
    QVERIFY(!ee->decays("exit_norms.0.weight", params["exit_norms.0.weight"]));
    QVERIFY(params["blocks.2.mlp.down.weight"].std().item<double>() < 0.006);  // GPT-3 residual scale
    model_json["shared_exit_norm"] = true;
    const auto shared = create_model(model_json, {37, 32});
    QCOMPARE(own->parameter_count() - shared->parameter_count(), std::int64_t(5 * 2 * 32 * 4));  // d 128 default
    QVERIFY(dynamic_cast<EarlyExitTransformer*>(shared.get())->exit_norms.empty());
    QVERIFY(QString::fromStdString(shared->describe()).contains("shared exit norm"));
    const auto c = preset_config("early-exit-charlm");
    QCOMPARE(c.arch(), std::string("early-exit"));
    QCOMPARE(c.model().at("n_embd").get<int>(), 256);
    QCOMPARE(c.model().at("exit_threshold").get<double>(), 1.0);
    QCOMPARE(preset_config("early-exit-charlm", {"model.exit_threshold=0.9"}).model().at("exit_threshold").get<double>(),
             0.9);
  }

  // Cross-field rules of this architecture; every option out of its schema range or of the wrong type is checked
  // for every architecture by test_conformance.
  void configErrorNamesKey_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("key");
    QTest::newRow("one layer") << R"({"arch":"early-exit","n_layer":1})" << "model.n_layer";
  }
  void configErrorNamesKey() {
    QFETCH(QString, overrides);
    QFETCH(QString, key);
    test::check_config_error_names_key(overrides, key, "early-exit");
  }

  void checkpointReevaluatedWithThreshold() {
    QTemporaryDir dir;
    const auto path = dir.filePath("ee.pt").toStdString();
    auto a = std::make_shared<EarlyExitTransformer>(small());
    auto opt = optimizer(*a, 1e-3);
    const auto tokens = torch::randint(0, kVocab, {2, 12}, torch::kLong);
    train_step(*a, *opt, {tokens, tokens, {}}, 1.0, false, false);
    save_checkpoint(path, *a, *opt, {1, 0, 0, "{}", "{}", 0, ""});
    torch::manual_seed(99);
    auto b = std::make_shared<EarlyExitTransformer>(small(), EarlyExitOptions().exit_threshold(0.0));
    load_checkpoint(path, *b, nullptr);  // the threshold adds no parameters
    a->eval();
    b->eval();
    torch::NoGradGuard no_grad;
    QVERIFY(!torch::equal(a->forward(tokens).logits, b->forward(tokens).logits));
    b->set_exit_threshold(1.0);
    QVERIFY(torch::equal(a->forward(tokens).logits, b->forward(tokens).logits));
  }

  void tinyBatchOverfits() {
    EarlyExitTransformer model(small());
    auto opt = optimizer(model, 3e-3);
    const auto x = torch::randint(0, kVocab, {4, 16}, torch::kLong), y = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    double first = 0, last = 0, exit0_first = 0;
    for (int i = 0; i < 100; ++i) {
      if (i == 0) {
        torch::NoGradGuard no_grad;
        exit0_first = lm_loss(model.forward(x).exit_logits[0], y, {}).item<double>();
      }
      const auto r = train_step(model, *opt, {x, y, {}}, 1.0, false, false);
      last = r.loss.item<double>();
      if (i == 0) first = last;
    }
    QVERIFY2(last < 0.1 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
    torch::NoGradGuard no_grad;
    const double exit0_last = lm_loss(model.forward(x).exit_logits[0], y, {}).item<double>();
    QVERIFY2(exit0_last < 0.5 * exit0_first, qPrintable(QString("exit 0: %1 -> %2").arg(exit0_first).arg(exit0_last)));
  }
};

}  // namespace test_early_exit

ROUTELAB_TEST_SUITE(test_early_exit, TestEarlyExit)
#include "test_early_exit.moc"
