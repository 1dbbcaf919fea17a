// The multi-tensor AdamW and gradient clipping against LibTorch's one-tensor-at-a-time torch::optim::AdamW and
// torch::nn::utils::clip_grad_norm_: same trajectory (the foreach kernel bit for bit, the fused one within rounding),
// parameters without a gradient left alone, the saved state interchangeable, and no step count drift after a load.
#include <QtTest>

#include <torch/torch.h>

#include "core/train/optimizer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_optimizer {

using namespace routelab;

namespace {

/// Three parameters of different shapes in two groups (decay / no decay), the third without a gradient on odd steps
/// (as a router whose tokens all skipped a block).
struct Problem {
  std::vector<torch::Tensor> params;
  explicit Problem(std::uint64_t seed) {
    torch::manual_seed(seed);
    params = {torch::randn({7, 5}).requires_grad_(), torch::randn({5}).requires_grad_(),
              torch::randn({3, 4, 2}).requires_grad_()};
  }
  std::vector<torch::optim::OptimizerParamGroup> groups(double wd) const {
    std::vector<torch::optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<torch::Tensor>{params[0], params[2]},
                   std::make_unique<torch::optim::AdamWOptions>(options(wd)));
    g.emplace_back(std::vector<torch::Tensor>{params[1]}, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    return g;
  }
  static torch::optim::AdamWOptions options(double wd) {
    return torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd);
  }
  /// Gradients of a fixed loss; the third parameter gets none on odd steps.
  void backward(int step) {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    auto loss = (params[0].sin() * 3).sum() + params[1].pow(3).sum();
    if (step % 2 == 0) loss = loss + (params[2] * params[2]).mean() * 5;
    loss.backward();
  }
};

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

}  // namespace

class TestOptimizer : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesLibTorchAdamW_data() {
    QTest::addColumn<int>("kernel");
    QTest::addColumn<double>("tolerance");
    QTest::newRow("foreach") << static_cast<int>(AdamWKernel::Foreach) << 0.0;  // the same operations in the same order
    if (MultiTensorAdamW::fused_available()) QTest::newRow("fused") << static_cast<int>(AdamWKernel::Fused) << 1e-6;
  }
  void matchesLibTorchAdamW() {
    QFETCH(int, kernel);
    QFETCH(double, tolerance);
    Problem ref(7), ours(7);
    torch::optim::AdamW reference(ref.groups(0.1), Problem::options(0.1));
    MultiTensorAdamW multi(ours.groups(0.1), Problem::options(0.1), static_cast<AdamWKernel>(kernel));
    const auto untouched = ours.params[2].detach().clone();
    for (int step = 1; step <= 12; ++step) {
      ref.backward(step);
      ours.backward(step);
      reference.step();
      multi.step();
      if (step == 1) {  // no gradient at step 1: the parameter did not move and got no state
        QVERIFY(torch::equal(ours.params[2].detach(), untouched));
      }
      const double diff = max_diff(ref.params, ours.params);
      QVERIFY2(diff <= tolerance, qPrintable(QString("step %1: max |diff| %2").arg(step).arg(diff)));
    }
    QVERIFY(!torch::equal(ours.params[2].detach(), untouched));
  }

  void learningRateOnTheDeviceMatches() {
    // A CUDA graph's optimizer reads its rate from a tensor staged before each step: the same trajectory as the
    // rate passed by value, through a schedule (the tensor is fp32, the value double: within rounding).
    if (!MultiTensorAdamW::fused_available()) QSKIP("this LibTorch has no fused AdamW kernel");
    Problem by_value(11), staged(11);
    MultiTensorAdamW a(by_value.groups(0.1), Problem::options(0.1));
    MultiTensorAdamW b(staged.groups(0.1), Problem::options(0.1));
    b.keep_learning_rates_on_device();
    for (int step = 1; step <= 8; ++step) {
      const double lr = 3e-2 * step / 8.0;
      set_learning_rate(a, lr);
      set_learning_rate(b, lr);
      b.stage_learning_rates();
      by_value.backward(step);
      staged.backward(step);
      a.step();
      b.step();
      const double diff = max_diff(by_value.params, staged.params);
      QVERIFY2(diff <= 1e-6, qPrintable(QString("step %1: max |diff| %2").arg(step).arg(diff)));
    }
    // Without staging, a new rate does not reach the kernel: the tensor keeps the last staged one.
    set_learning_rate(b, 0.0);
    const auto before = staged.params[0].detach().clone();
    staged.backward(9);
    b.step();
    QVERIFY(!torch::equal(staged.params[0].detach(), before));
  }

  void replayedStepsAreCounted() {
    // A replayed graph steps on the device only; count_replayed_step keeps the host's counts (checkpoints) in step.
    Problem p(13);
    MultiTensorAdamW opt(p.groups(0.1), Problem::options(0.1));
    for (int step = 1; step <= 2; ++step) {
      p.backward(step);
      opt.step();
    }
    opt.count_replayed_step();  // every parameter has a gradient after step 2
    std::vector<std::int64_t> steps;
    for (const auto& [key, state] : opt.state())
      steps.push_back(static_cast<torch::optim::AdamWParamState&>(*state).step());
    std::sort(steps.begin(), steps.end());
    QCOMPARE(steps, (std::vector<std::int64_t>{2, 3, 3}));
  }

  void flaggedStepLeavesEverything() {
    // A captured step whose forward overflowed its routed shapes skips its update on a flag read on the device: the
    // parameters, moments and the kernel's step counts stay, so the steps after it are those of a run without it.
    if (!MultiTensorAdamW::fused_available()) QSKIP("this LibTorch has no fused AdamW kernel");
    Problem plain(17), flagged(17);
    MultiTensorAdamW a(plain.groups(0.1), Problem::options(0.1));
    MultiTensorAdamW b(flagged.groups(0.1), Problem::options(0.1));
    const auto step_both = [&](int step, const torch::Tensor& flag) {
      plain.backward(step);
      flagged.backward(step);
      if (!flag.defined() || flag.item<float>() == 0) a.step();  // the plain run has no skipped step
      if (flag.defined()) b.skip_next_step_if(flag);
      b.step();
    };
    step_both(1, torch::Tensor());
    std::vector<torch::Tensor> before;
    for (const auto& p : flagged.params) before.push_back(p.detach().clone());
    step_both(2, torch::ones({}));  // skipped
    for (std::size_t i = 0; i < before.size(); ++i) QVERIFY(torch::equal(flagged.params[i].detach(), before[i]));
    b.count_replayed_step(-1);  // the host counted it: taken back as the graph step does
    step_both(2, torch::zeros({}));  // a zero flag steps
    QVERIFY(!torch::equal(flagged.params[0].detach(), before[0]));
    for (int step = 3; step <= 6; ++step) step_both(step, torch::Tensor());
    const double diff = max_diff(plain.params, flagged.params);
    QVERIFY2(diff <= 1e-6, qPrintable(QString("max |diff| %1").arg(diff)));
    // The foreach kernel cannot read a flag on the device: refused, naming the kernel.
    Problem p(19);
    MultiTensorAdamW foreach_opt(p.groups(0.1), Problem::options(0.1), AdamWKernel::Foreach);
    QVERIFY_EXCEPTION_THROWN(foreach_opt.skip_next_step_if(torch::ones({})), ConfigError);
  }

  void stateSavesAndLoadsAcrossImplementations() {
    // Train 5 steps, save, load into a fresh optimizer (of either class), continue: the same as never stopping.
    Problem straight(3), resumed(3);
    MultiTensorAdamW a(straight.groups(0.1), Problem::options(0.1));
    for (int step = 1; step <= 10; ++step) {
      straight.backward(step);
      a.step();
    }
    MultiTensorAdamW b(resumed.groups(0.1), Problem::options(0.1));
    for (int step = 1; step <= 5; ++step) {
      resumed.backward(step);
      b.step();
    }
    torch::serialize::OutputArchive out;
    b.save(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    // The file format is torch::optim::AdamW's: LibTorch's own class reads it.
    {
      torch::serialize::InputArchive in;
      std::istringstream stream(bytes.str());
      in.load_from(stream);
      torch::optim::AdamW plain(resumed.groups(0.1), Problem::options(0.1));
      plain.load(in);
      std::vector<std::int64_t> steps;  // two parameters stepped 5 times, the one without odd-step gradients twice
      for (const auto& [key, state] : plain.state())
        steps.push_back(static_cast<torch::optim::AdamWParamState&>(*state).step());
      std::sort(steps.begin(), steps.end());
      QCOMPARE(steps, (std::vector<std::int64_t>{2, 5, 5}));
    }
    torch::serialize::InputArchive in;
    std::istringstream stream(bytes.str());
    in.load_from(stream);
    MultiTensorAdamW c(resumed.groups(0.1), Problem::options(0.1));
    c.load(in);
    for (int step = 6; step <= 10; ++step) {
      resumed.backward(step);
      c.step();
    }
    const double diff = max_diff(straight.params, resumed.params);
    QVERIFY2(diff == 0.0, qPrintable(QString("max |diff| %1").arg(diff)));
  }

  void clippingMatchesLibTorch_data() {
    QTest::addColumn<double>("max_norm");
    QTest::newRow("clips") << 0.5;
    QTest::newRow("below the limit") << 1e6;  // the scale is exactly 1: gradients unchanged bit for bit
    QTest::newRow("no clipping") << 0.0;
  }
  void clippingMatchesLibTorch() {
    QFETCH(double, max_norm);
    Problem ref(11), ours(11);
    ref.backward(2);
    ours.backward(2);
    const auto before = ours.params[0].grad().clone();
    double expected = 0;
    if (max_norm > 0) {
      expected = torch::nn::utils::clip_grad_norm_(ref.params, max_norm);
    } else {
      std::vector<torch::Tensor> norms;
      for (const auto& p : ref.params) norms.push_back(p.grad().norm());
      expected = torch::stack(norms).norm().item<double>();
    }
    const auto norm = clip_grad_norm(ours.params, max_norm);
    QCOMPARE(norm.dim(), 0);
    QVERIFY(std::abs(norm.item<double>() - expected) <= 1e-6 * expected);
    for (std::size_t i = 0; i < ref.params.size(); ++i)
      QVERIFY(torch::allclose(ref.params[i].grad(), ours.params[i].grad(), 1e-6, 1e-7));
    if (max_norm == 0 || max_norm > expected) QVERIFY(torch::equal(before, ours.params[0].grad()));
    if (max_norm > 0 && max_norm < expected) {
      std::vector<torch::Tensor> norms;
      for (const auto& p : ours.params) norms.push_back(p.grad().norm());
      QVERIFY(std::abs(torch::stack(norms).norm().item<double>() - max_norm) < 1e-5);
    }
  }

  void clippingSkipsMissingGradients() {
    Problem p(5);
    p.backward(1);  // the third parameter has no gradient
    QVERIFY(!p.params[2].grad().defined());
    const auto norm = clip_grad_norm(p.params, 0.1).item<double>();
    QVERIFY(std::isfinite(norm) && norm > 0.1);
    QVERIFY(!p.params[2].grad().defined());
    QCOMPARE(clip_grad_norm({torch::zeros({2}, torch::requires_grad())}, 1.0).item<double>(), 0.0);
  }
};

}  // namespace test_optimizer

ROUTELAB_TEST_SUITE(test_optimizer, TestOptimizer)
#include "test_optimizer.moc"
