// Gradient accumulation (train.grad_accum): k micro-batches of b sequences give the loss and gradient of one batch of
// k·b, in fp32 within 1e-5, step by step (with and without a loss mask) and through the trainer; the trace of an accumulated
// step is the whole batch's; the tokens axis of the figures counts the global batch. Every classifier likewise, with
// uneven micro-batches (an epoch's last step).
#include <QTemporaryDir>
#include <QtTest>

#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/data/classification.h"
#include "core/models/registry.h"
#include "core/models/dense_transformer.h"
#include "core/report/builders/catalog.h"
#include "core/store/run_store.h"
#include "core/train/classification_step.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_grad_accum {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 29, kContext = 16, kBatch = 8;

std::shared_ptr<DenseTransformer> small_dense() {
  torch::manual_seed(21);
  TransformerOptions o;
  o.style(ModelStyle::GPT2).vocab_size(kVocab).max_seq_len(kContext).n_layer(2).n_embd(32).n_head(4).d_ff(64)
      .tie_weights(true).init("normal");
  return std::make_shared<DenseTransformer>(o);
}

std::unique_ptr<MultiTensorAdamW> adamw(LanguageModel& model) {
  std::vector<torch::optim::OptimizerParamGroup> groups{torch::optim::OptimizerParamGroup(model.parameters())};
  return std::make_unique<MultiTensorAdamW>(std::move(groups), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

double max_param_diff(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double m = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) m = std::max(m, (pa[i] - pb[i]).abs().max().item<double>());
  return m;
}

double max_grad_diff(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double m = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    m = std::max(m, (pa[i].grad() - pb[i].grad()).abs().max().item<double>());
  return m;
}

/// An accumulated step against the one batch's: its loss and gradient norm, the gradients it stepped on (the one
/// batch's), and the parameters after it, which agree within AdamW's amplification of rounding in gradients near
/// zero (it divides by their running size).
void expect_same_update(int step, const torch::Tensor& loss_one, const torch::Tensor& loss_accumulated,
                        const torch::Tensor& norm_one, const torch::Tensor& norm_accumulated, torch::nn::Module& one,
                        torch::nn::Module& accumulated) {
  const double loss_diff = std::abs(loss_one.item<double>() - loss_accumulated.item<double>());
  QVERIFY2(loss_diff <= 1e-5, qPrintable(QString("step %1: loss differs by %2").arg(step).arg(loss_diff)));
  QVERIFY(std::abs(norm_one.item<double>() - norm_accumulated.item<double>()) <= 1e-5);
  const double grad_diff = max_grad_diff(one, accumulated);
  QVERIFY2(grad_diff <= 1e-5, qPrintable(QString("step %1: gradients differ by %2").arg(step).arg(grad_diff)));
  const double diff = max_param_diff(one, accumulated);
  QVERIFY2(diff <= 1e-4, qPrintable(QString("step %1: parameters differ by %2").arg(step).arg(diff)));
}

/// A copy-task run of a small dense model with `batch` sequences a forward and `accum` of them a step.
ExperimentConfig copy_run(std::int64_t batch, std::int64_t accum) {
  return resolve_config(nlohmann::json::object(),
                        {"model.n_layer=2", "model.n_embd=32", "model.n_head=4", "model.style=gpt2", "model.dropout=0",
                         "data.source=copy", "train.steps=6", "train.warmup_steps=2", "train.lr=3e-3",
                         "train.log_every=1", "train.eval_every=6", "train.eval_batches=1", "run.threads=2",
                         "train.batch_size=" + std::to_string(batch), "train.grad_accum=" + std::to_string(accum)},
                        "test");
}

/// A run of a small classifier `arch` on 250 synthetic entailment pairs, 2 epochs, `batch` examples a forward and
/// `accum` of them a step; dropout and auxiliary losses off.
ExperimentConfig classifier_run(const std::string& arch, std::int64_t batch, std::int64_t accum) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.n_embd=32", "model.n_head=4", "model.n_layer=1",
                                   "model.dropout=0", "data.source=entailment", "data.tokenizer=word",
                                   "data.context=48", "data.task_train_examples=250", "data.task_eval_examples=32",
                                   "train.epochs=2", "train.lr=1e-3", "train.warmup_steps=2", "train.log_every=1",
                                   "run.threads=2", "train.batch_size=" + std::to_string(batch),
                                   "train.grad_accum=" + std::to_string(accum)};
  if (arch == "tagat") sets.insert(sets.end(), {"model.lambda_ent=0", "model.lambda_bal=0"});
  if (arch == "vanilla-classifier") sets.push_back("model.pool_dropout=0");
  return resolve_config(nlohmann::json::object(), sets, "test");
}

}  // namespace

class TestGradAccum : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void stepEqualsOneBatch_data() {
    QTest::addColumn<int>("micro");
    QTest::addColumn<bool>("masked");
    for (const int k : {2, 4, 8}) {
      QTest::newRow(qPrintable(QString("%1 micro-batches").arg(k))) << k << false;
      QTest::newRow(qPrintable(QString("%1 micro-batches, loss mask").arg(k))) << k << true;
    }
  }
  void stepEqualsOneBatch() {
    QFETCH(int, micro);
    QFETCH(bool, masked);
    auto one = small_dense(), accumulated = small_dense();
    auto opt_one = adamw(*one), opt_accumulated = adamw(*accumulated);
    torch::manual_seed(5);
    for (int step = 1; step <= 3; ++step) {
      // A mask that leaves micro-batches different numbers of counted positions: the weighting must follow them.
      const Batch batch{torch::randint(0, kVocab, {kBatch, kContext}, torch::kLong),
                        torch::randint(0, kVocab, {kBatch, kContext}, torch::kLong),
                        masked ? (torch::rand({kBatch, kContext}) < torch::linspace(0.2, 0.9, kBatch).unsqueeze(1))
                                     .to(torch::kFloat)
                               : torch::Tensor()};
      const auto a = train_step(*one, *opt_one, batch, 1.0, false, true, 1);
      const auto b = train_step(*accumulated, *opt_accumulated, batch, 1.0, false, true, micro);
      expect_same_update(step, a.loss, b.loss, a.grad_norm, b.grad_norm, *one, *accumulated);
      if (QTest::currentTestFailed()) return;
      QCOMPARE(b.output.trace.size(), a.output.trace.size());
      for (std::size_t i = 0; i < a.output.trace.size(); ++i) {
        QCOMPARE(b.output.trace[i].tokens_processed, a.output.trace[i].tokens_processed);
        QCOMPARE(b.output.trace[i].flops, a.output.trace[i].flops);
      }
    }
  }

  void microBatchesMustDivideTheBatch() {
    auto model = small_dense();
    auto opt = adamw(*model);
    const Batch batch{torch::zeros({6, kContext}, torch::kLong), torch::zeros({6, kContext}, torch::kLong), {}};
    try {
      train_step(*model, *opt, batch, 1.0, false, false, 4);
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).startsWith("train.grad_accum: 4 micro-batches"), e.what());
    }
  }

  void mergeJoinsTheBatch() {
    // Two micro-batches of 2 sequences: gates and token data join along the batch, counts and FLOPs add up,
    // fractions and stats average (weighed by the parts' examples where given).
    std::vector<ModelOutput> parts(2);
    for (int i = 0; i < 2; ++i) {
      auto& p = parts[static_cast<std::size_t>(i)];
      LayerTrace t;
      t.layer = 1;
      t.kind = "mod";
      t.routed = true;
      t.gate = torch::full({2, 3}, static_cast<double>(i));
      t.decision = torch::full({2, 3}, i == 1, torch::kBool);
      t.routed_fraction = i == 0 ? 0.25 : 0.75;
      t.aux_loss = i == 0 ? 1.0 : 3.0;
      t.tokens_processed = {{"attn", 2 + i}, {"mlp", 6}};
      t.flops = 10.0 * (i + 1);
      t.dense_flops = 40;
      t.stats = {{"agreement", i == 0 ? 0.5 : 1.0}};
      p.trace.push_back(t);
      p.stats = {{"alpha", i == 0 ? 0.2 : 0.4}};
      p.stats_on_device = {{"alpha_hard", torch::full({}, i == 0 ? 0.5 : 0.7, torch::kDouble)}};  // left on the device
      p.token_data["depth"] = torch::full({2, 3}, i + 1, torch::kLong);
      p.aux_loss = torch::full({}, i == 0 ? 0.1 : 0.3);
    }
    auto weighted = merge_micro_batches(parts, {3.0, 1.0});  // a classifier's micro-batches of 3 and 1 examples
    const auto merged = merge_micro_batches(std::move(parts));
    QCOMPARE(weighted.trace.front().routed_fraction, 0.375);
    QCOMPARE(weighted.trace.front().aux_loss, 1.5);
    QCOMPARE(weighted.trace.front().stats.at("agreement"), 0.625);
    QCOMPARE(weighted.stats.at("alpha"), 0.25);
    QVERIFY(std::abs(weighted.aux_loss.item<double>() - 0.15) < 1e-7);
    QCOMPARE(weighted.trace.front().flops, 30.0);  // sums stay sums
    resolve_on_device(weighted);
    QVERIFY(std::abs(weighted.stats.at("alpha_hard") - 0.55) < 1e-12);
    QCOMPARE(merged.trace.size(), std::size_t(1));
    const auto& t = merged.trace.front();
    QCOMPARE(t.kind, std::string("mod"));
    QVERIFY(t.routed);
    QCOMPARE(t.gate.sizes(), (c10::IntArrayRef{4, 3}));
    QCOMPARE(t.gate[3][0].item<double>(), 1.0);
    QCOMPARE(t.decision.sum().item<std::int64_t>(), std::int64_t(6));
    QCOMPARE(t.routed_fraction, 0.5);
    QCOMPARE(t.aux_loss, 2.0);
    QCOMPARE(t.tokens_processed.at("attn"), std::int64_t(5));
    QCOMPARE(t.tokens_processed.at("mlp"), std::int64_t(12));
    QCOMPARE(t.flops, 30.0);
    QCOMPARE(t.dense_flops, 80.0);
    QCOMPARE(t.stats.at("agreement"), 0.75);
    QCOMPARE(merged.stats.at("alpha"), 0.3);
    auto resolved = merged;
    resolve_on_device(resolved);
    QVERIFY(resolved.stats_on_device.empty());
    QVERIFY(std::abs(resolved.stats.at("alpha_hard") - 0.6) < 1e-12);
    QCOMPARE(resolved.stats.at("alpha"), 0.3);
    QCOMPARE(merged.token_data.at("depth").sizes(), (c10::IntArrayRef{4, 3}));
    QVERIFY(std::abs(merged.aux_loss.item<double>() - 0.2) < 1e-7);
  }

  void runsMatchOneBatch() {
    // The trainer draws one step's batch as a whole: 2 x 4 sequences train as 8 do, and the figures' tokens axis
    // counts the 8.
    const auto db = home_.filePath("accum.sqlite").toStdString();
    const auto one = train({copy_run(8, 1), db, "one batch", ""});
    const auto accumulated = train({copy_run(4, 2), db, "accumulated", ""});
    QCOMPARE(accumulated.status, RunStatus::Finished);
    RunStore store(db);
    const auto a = store.metric(one.run_id, "train/loss"), b = store.metric(accumulated.run_id, "train/loss");
    QCOMPARE(b.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      QVERIFY2(std::abs(a[i].value - b[i].value) <= 1e-5,
               qPrintable(QString("step %1: %2 vs %3").arg(a[i].step).arg(a[i].value).arg(b[i].value)));
    FigureRequest request;
    request.name = "curves";
    request.run_ids = {one.run_id, accumulated.run_id};
    request.metric = "train/loss";
    request.x_axis = "tokens";
    request.by_seed = false;
    const auto figure = build_figure(store, request);
    std::vector<std::vector<double>> xs;
    for (const auto& s : figure.panels.front().series)
      if (!s.x.empty()) xs.push_back(s.x);
    QVERIFY(xs.size() >= 2);
    QCOMPARE(xs.back(), xs.front());
    QCOMPARE(xs.front().front(), 8.0 * copy_run(8, 1).data().at("context").get<double>());
  }

  void classifierStepEqualsOneBatch_data() {
    QTest::addColumn<QString>("arch");
    for (const auto& entry : architectures())
      if (entry.task == Task::Classification) QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id);
  }
  void classifierStepEqualsOneBatch() {
    // 7 examples in 3 micro-batches (3, 2, 2), each one's CE weighed by its examples: the step's CE, accuracy and
    // gradient are the one batch's. Dropout off (eval mode) and no auxiliary loss (taken per micro-batch), so both
    // train the same function.
    QFETCH(QString, arch);
    const auto config = classifier_run(arch.toStdString(), 7, 1);
    const auto data = make_classification_dataset(config.data());
    const auto batch = trim_padding(data->batch(Split::Train, {0, 1, 2, 3, 4, 5, 6}));
    const auto make = [&] {
      torch::manual_seed(4);
      auto model = create_classifier(config.model(), {data->vocab_size(), data->max_length(), data->num_classes()});
      model->eval();
      return model;
    };
    auto one = make(), accumulated = make();
    auto opt_one = make_optimizer(*one, config.train()), opt_accumulated = make_optimizer(*accumulated, config.train());
    for (int step = 1; step <= 3; ++step) {
      const bool trace = step == 3;
      const auto a = classification_train_step(*one, *opt_one, batch, 1.0, false, trace, 1);
      const auto b = classification_train_step(*accumulated, *opt_accumulated, batch, 1.0, false, trace, 3);
      QVERIFY2(a.aux_loss.item<double>() == 0.0, "the test's classifier settings leave an auxiliary loss");
      expect_same_update(step, a.loss, b.loss, a.grad_norm, b.grad_norm, *one, *accumulated);
      if (QTest::currentTestFailed()) return;
      QCOMPARE(b.correct, a.correct);
      QCOMPARE(b.examples, std::int64_t(7));
      // The traced step's trace and token data are the whole batch's: the per-layer means over real tokens (the
      // routed share, TAGAT's entropy term) weigh each micro-batch by its real tokens, which differ here.
      QCOMPARE(b.output.trace.size(), a.output.trace.size());
      for (std::size_t i = 0; i < a.output.trace.size(); ++i) {
        const auto& x = a.output.trace[i];
        const auto& y = b.output.trace[i];
        QCOMPARE(y.tokens_processed, x.tokens_processed);
        QVERIFY2(std::abs(y.routed_fraction - x.routed_fraction) <= 1e-6 && std::abs(y.aux_loss - x.aux_loss) <= 1e-6,
                 qPrintable(QString("layer %1: routed %2 vs %3, aux %4 vs %5")
                                .arg(i).arg(y.routed_fraction).arg(x.routed_fraction).arg(y.aux_loss).arg(x.aux_loss)));
        QCOMPARE(y.gate.defined(), x.gate.defined());
        if (x.gate.defined()) QCOMPARE(y.gate.sizes(), x.gate.sizes());
      }
      for (const auto& [key, value] : a.output.token_data) QCOMPARE(b.output.token_data.at(key).sizes(), value.sizes());
      QCOMPARE(b.output.stats.size(), a.output.stats.size());
    }
    // Fewer examples than micro-batches: one example each.
    const auto c = classification_train_step(*accumulated, *opt_accumulated, class_batch_rows(batch, 0, 2), 1.0, false,
                                             false, 3);
    QCOMPARE(c.examples, std::int64_t(2));
  }

  void classifierRunMatchesOneBatch() {
    // 250 examples: 8 steps an epoch of 32 examples (the last 26), run as 2 micro-batches of 16 (13 and 13): the
    // stored losses, accuracies and epoch figures are the one batch's.
    const auto db = home_.filePath("classifier.sqlite").toStdString();
    const auto one = train({classifier_run("vanilla-classifier", 32, 1), db, "one batch", ""});
    const auto accumulated = train({classifier_run("vanilla-classifier", 16, 2), db, "accumulated", ""});
    QVERIFY2(accumulated.status == RunStatus::Finished, accumulated.message.c_str());
    QCOMPARE(accumulated.last_step, std::int64_t(16));
    RunStore store(db);
    for (const std::string key : {"train/loss", "train/accuracy", "train/epoch_loss", "val/loss", "val/accuracy"}) {
      const auto a = store.metric(one.run_id, key), b = store.metric(accumulated.run_id, key);
      QVERIFY2(!a.empty(), key.c_str());
      QCOMPARE(b.size(), a.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        const auto what = QString("%1 step %2: %3 vs %4").arg(key.c_str()).arg(a[i].step).arg(a[i].value);
        QVERIFY2(std::abs(a[i].value - b[i].value) <= 1e-4, qPrintable(what.arg(b[i].value)));
      }
    }
  }
};

}  // namespace test_grad_accum

ROUTELAB_TEST_SUITE(test_grad_accum, TestGradAccum)
#include "test_grad_accum.moc"
