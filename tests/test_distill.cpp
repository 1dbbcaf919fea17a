// Distillation from a stored sequential model (issue 22; Radial Networks' post-training route): the KL term, a
// Radial network started from a dense teacher's weights (frozen unless train.distill_layers), its lineage and its
// metric, `bench step` of a distilled step, and the refusals that name train.distill_from.
#include <QtTest/QtTest>
#include <QTemporaryDir>

#include <cmath>
#include <string>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/bench/step_bench.h"
#include "core/store/run_store.h"
#include "core/train/distillation.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_distill {

using namespace routelab;
using test::contains;
using test::error_of;

namespace {

/// A short copy-task run of `arch` in the shape the teacher and the student share.
ExperimentConfig config_of(const std::string& arch, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.style=llama", "model.n_layer=2", "model.n_embd=32",
                                   "model.n_head=4", "data.source=copy", "train.batch_size=8", "train.steps=6",
                                   "train.eval_every=3", "train.eval_batches=1", "train.log_every=1",
                                   "train.warmup_steps=1", "run.threads=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

torch::Tensor param(const LanguageModel& model, const std::string& name) {
  for (const auto& item : model.named_parameters())
    if (item.key() == name) return item.value().detach().clone();
  return {};
}

}  // namespace

class TestDistill : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string db_;
  std::int64_t teacher_ = 0;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite").toStdString();
    const auto outcome = train({config_of("dense", {"train.steps=20", "train.lr=3e-3"}), db_, "teacher", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    teacher_ = outcome.run_id;
  }

  void klIsTheTeachersCrossEntropyLessItsEntropy() {
    torch::manual_seed(3);
    const auto s = torch::randn({2, 5, 7}), t = torch::randn({2, 5, 7});
    QVERIFY(distill_kl(s, s, {}).item<double>() < 1e-6);
    const auto p_t = torch::softmax(t, -1);
    const auto expected = (p_t * (torch::log_softmax(t, -1) - torch::log_softmax(s, -1))).sum(-1);  // (2, 5)
    QVERIFY(std::abs(distill_kl(s, t, {}).item<double>() - expected.mean().item<double>()) < 1e-6);
    auto mask = torch::zeros({2, 5});
    mask[1][2] = 1;
    QVERIFY(std::abs(distill_kl(s, t, mask).item<double>() - expected[1][2].item<double>()) < 1e-6);
  }

  void hiddenLossIsRelativeSquaredError() {
    torch::manual_seed(4);
    const std::vector<torch::Tensor> t = {torch::randn({2, 3, 4}), torch::randn({2, 3, 4})};
    QVERIFY(distill_hidden_loss(t, t, {}).item<double>() < 1e-12);
    const std::vector<torch::Tensor> doubled = {t[0] * 2, t[1] * 2};  // off by the teacher's own norm everywhere
    QVERIFY(std::abs(distill_hidden_loss(doubled, t, {}).item<double>() - 1.0) < 1e-5);
    // Only the first min(S, L) are compared: an extra student step is ignored.
    const std::vector<torch::Tensor> longer = {t[0], t[1], torch::randn({2, 3, 4})};
    QVERIFY(distill_hidden_loss(longer, t, {}).item<double>() < 1e-12);
  }

  void matchingLayerOutputsTrainsTheRouterTowardTheTeacher() {
    const auto outcome = train({config_of("radial", {"train.distill_from=" + std::to_string(teacher_),
                                                     "train.distill_hidden=1"}),
                                db_, "distilled-hidden", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    RunStore store(db_, false);
    const auto hidden = store.metric(outcome.run_id, "train/distill_hidden");
    QCOMPARE(hidden.size(), std::size_t{6});
    QVERIFY(std::isfinite(hidden.back().value) && hidden.back().value >= 0);
  }

  void radialStartsFromTheTeacherAndTrainsItsRouter() {
    const auto outcome =
        train({config_of("radial", {"train.distill_from=" + std::to_string(teacher_)}), db_, "distilled", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    RunStore store(db_, false);
    const auto record = store.run(outcome.run_id);
    QVERIFY(record->parent_run_id.has_value());
    QCOMPARE(*record->parent_run_id, teacher_);
    QVERIFY2(contains(record->notes, "distilled from run " + std::to_string(teacher_) + " (teacher, dense)"),
             record->notes.c_str());
    const auto kl = store.metric(outcome.run_id, "train/distill_kl");
    QCOMPARE(kl.size(), std::size_t{6});
    QVERIFY(kl.front().value >= 0);

    // The layers, embedding and head are the teacher's, untouched by training; the router learned.
    const auto teacher = load_run(db_, teacher_), student = load_run(db_, outcome.run_id);
    for (const auto& [t, s] : std::vector<std::pair<std::string, std::string>>{
             {"blocks.1.attn.qkv.weight", "layers.1.attn.qkv.weight"},
             {"blocks.0.mlp.down.weight", "layers.0.mlp.down.weight"},
             {"tok_emb.weight", "tok_emb.weight"}}) {
      const auto a = param(*teacher.model, t), b = param(*student.model, s);
      QVERIFY2(a.defined() && b.defined(), (t + " / " + s).c_str());
      QVERIFY2(torch::equal(a, b), s.c_str());
    }
    torch::manual_seed(0);
    const auto fresh = create_model(student.config.model(), {student.dataset->tokenizer().vocab_size(),
                                                             student.dataset->context()});
    QVERIFY(!torch::equal(param(*fresh, "router.fc2.weight"), param(*student.model, "router.fc2.weight")));
  }

  void distillLayersTrainsEverything() {
    const auto outcome = train({config_of("radial", {"train.distill_from=" + std::to_string(teacher_),
                                                     "train.distill_layers=true", "train.distill_weight=0.5"}),
                                db_, "distilled-all", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto teacher = load_run(db_, teacher_), student = load_run(db_, outcome.run_id);
    QVERIFY(!torch::equal(param(*teacher.model, "blocks.0.mlp.down.weight"),
                          param(*student.model, "layers.0.mlp.down.weight")));
  }

  void resumedDistillationEqualsUninterrupted() {
    // The teacher is opened again on resume and the frozen weights stay frozen: the curve continues exactly.
    const auto config = config_of("radial", {"train.distill_from=" + std::to_string(teacher_),
                                             "train.distill_hidden=0.5", "train.checkpoint_every=3"});
    const auto whole = train({config, db_, "whole", ""});
    std::atomic<bool> cancel{false};
    test::StopAfter stop(cancel, 3);
    const auto first = train({config, db_, "halves", ""}, &stop, &cancel);
    QCOMPARE(first.status, RunStatus::Stopped);
    QCOMPARE(resume(db_, first.run_id).status, RunStatus::Finished);
    RunStore store(db_, false);
    for (const char* key : {"train/loss", "train/distill_kl", "train/distill_hidden"}) {
      const auto a = store.metric(whole.run_id, key), b = store.metric(first.run_id, key);
      QCOMPARE(b.size(), a.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        QVERIFY2(a[i].step == b[i].step && a[i].value == b[i].value,
                 (std::string(key) + " step " + std::to_string(a[i].step)).c_str());
    }
  }

  void benchStepTimesTheDistilledStep() {
    // bench step builds a distilled config's run as train does (RunSetup): the teacher opened from the store given,
    // its forward and the KL term in every step. Beside the same config undistilled, each step runs a second head
    // (the teacher's) and more loss ops.
    StepBenchOptions o;
    o.steps = 1;
    o.warmup = 0;
    o.profiled = 1;
    o.top = 0;
    o.db = db_;
    const auto run = std::to_string(teacher_);
    const auto distilled = run_step_bench(config_of("radial", {"train.distill_from=" + run}), "distilled", o);
    const auto plain = run_step_bench(config_of("radial"), "plain", o);
    QVERIFY2(contains(distilled.description, "distilled from run " + run + " (teacher, dense; training the router"),
             distilled.description.c_str());
    QCOMPARE(distilled.step_ms.size(), std::size_t{1});
    const auto calls = [](const StepBenchResult& r, const std::string& part) {
      const auto it = r.profile.parts_ms.find(part);
      return it == r.profile.parts_ms.end() ? 0.0 : it->second.forward_calls;
    };
    QVERIFY2(calls(plain, "head") > 0, plain.to_table().c_str());
    QCOMPARE(calls(distilled, "head"), 2 * calls(plain, "head"));
    QVERIFY2(calls(distilled, "loss") > calls(plain, "loss"), distilled.to_table().c_str());
    // The teacher is the given store's run: a store without it is named in the error.
    o.db = dir_.filePath("other.sqlite").toStdString();
    const auto error = error_of<ConfigError>(
        [&] { run_step_bench(config_of("radial", {"train.distill_from=" + run}), "distilled", o); });
    QVERIFY2(contains(error, "train.distill_from: run " + run + " cannot be opened"), error.c_str());
  }

  void refusalsNameTheSetting() {
    auto error = error_of<ConfigError>(
        [&] { train({config_of("dense", {"train.distill_from=" + std::to_string(teacher_)}), db_, "", ""}); });
    QVERIFY2(contains(error, "train.distill_from: ") && contains(error, "architectures that can: radial"),
             error.c_str());
    // A classifier is refused too (it had trained without its teacher), before anything is stored.
    const auto runs_before = RunStore(db_, false).list_runs(true).size();
    error = error_of<ConfigError>([&] {
      train({resolve_config(nlohmann::json::object(),
                            {"model.arch=tagat", "data.source=entailment", "data.tokenizer=word",
                             "train.distill_from=" + std::to_string(teacher_)},
                            "test"),
             db_, "", ""});
    });
    QVERIFY2(contains(error, "train.distill_from: ") && contains(error, "(model.arch=tagat) cannot start from"),
             error.c_str());
    QCOMPARE(RunStore(db_, false).list_runs(true).size(), runs_before);
    error = error_of<ConfigError>([&] { train({config_of("radial", {"train.distill_from=999"}), db_, "", ""}); });
    QVERIFY2(contains(error, "train.distill_from: run 999 cannot be opened"), error.c_str());
    error = error_of<ConfigError>([&] {
      train({config_of("radial", {"train.distill_from=" + std::to_string(teacher_), "data.task_vocab=40"}), db_, "",
             ""});
    });
    QVERIFY2(contains(error, "vocabulary of"), error.c_str());
    error = error_of<ConfigError>([&] {
      train({config_of("radial", {"train.distill_from=" + std::to_string(teacher_), "model.n_embd=64"}), db_, "",
             ""});
    });
    QVERIFY2(contains(error, "no counterpart for"), error.c_str());
  }
};

}  // namespace test_distill

ROUTELAB_TEST_SUITE(test_distill, TestDistill)
#include "test_distill.moc"
