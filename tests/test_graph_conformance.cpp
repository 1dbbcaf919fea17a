// Registry-driven checks of the training steps declared capturable as a CUDA graph (ArchitectureEntry::
// cuda_graph_step), for every such architecture: traced at capture with its readback deferred, the trace's host fields
// follow from the batch's shape alone (the rest, resolved afterwards, equals an eager forward's), and its forward and
// backward run no op that makes the host wait for the device (caught by name on the CPU).
#include <QtTest>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/record_function.h>

#include "core/inference/cuda_graph_forward.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/routing.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "tests/conformance_support.h"
#include "tests/suite.h"

namespace test_graph_conformance {

using namespace routelab;
using namespace routelab::test::conformance;

namespace {

/// While alive, lists the ops run on this thread that wait for a GPU's queue to read a result back (a scalar, a result
/// whose size depends on the data, a model's copy to the host); on the CPU they run without waiting, so they are
/// caught by name.
class HostReadRecorder {
 public:
  HostReadRecorder() {
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&HostReadRecorder::on_start).scopes({at::RecordScope::FUNCTION}));
  }
  ~HostReadRecorder() { at::removeCallback(handle_); }
  HostReadRecorder(const HostReadRecorder&) = delete;
  HostReadRecorder& operator=(const HostReadRecorder&) = delete;
  static std::vector<std::string>& reads() {
    static thread_local std::vector<std::string> names;
    return names;
  }

 private:
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    // A model's own copies to the host go through to_host (kHostReadEvent): on the CPU they copy nothing.
    static const std::set<std::string> waiting{"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
                                               "aten::_unique2", "aten::unique_consecutive", "aten::is_nonzero",
                                               "aten::equal", "aten::repeat_interleave", kHostReadEvent};
    if (const std::string name = fn.name(); waiting.count(name)) reads().push_back(name);
    return nullptr;
  }
  at::CallbackHandle handle_ = 0;
};

/// The ops that wait for the device among those `run` dispatches on this thread, joined ("" when none).
QString host_reads(const std::function<void()>& run) {
  HostReadRecorder::reads().clear();
  {
    const HostReadRecorder recorder;
    run();
  }
  QStringList reads;
  for (const auto& name : HostReadRecorder::reads()) reads << QString::fromStdString(name);
  return reads.join(", ");
}

/// A row's model (graph_forward_model) in eval mode, its routers forced to route 40% of the tokens, and, while alive,
/// the form a GPU takes at the row's precision: routed rows sized from earlier forwards, packed where the attention
/// takes packed rows (bf16), padded otherwise.
struct GpuFormModel {
  GpuFormModel(const QString& arch, const QString& precision, std::uint64_t seed) {
    const auto& entry = architecture(arch.toStdString());
    if (precision == "bf16") packed.emplace();
    torch::manual_seed(seed);
    lm = create_model(graph_forward_model(entry), {kVocab, 32});
    lm->eval();
    if (entry.force_routed_share) entry.force_routed_share(*lm, torch::randint(0, kVocab, {2, 24}, torch::kLong), 0.4);
  }
  const ForcePaddedSized sized;
  std::optional<ForcePackedRows> packed;
  std::shared_ptr<LanguageModel> lm;
};

/// A GraphRecorder that runs the recorded body again at each replay (on the CPU, where no graph records kernels):
/// what a CudaGraphForward does around its recorder, checked without a GPU. `fail` makes the capture throw.
class RerunRecorder : public GraphRecorder {
 public:
  explicit RerunRecorder(bool fail = false) : fail_(fail) {}
  void warm_up(const std::function<void()>& body) override { body(); }
  void capture(const std::function<void()>& body) override {
    if (fail_) throw std::runtime_error("operation not permitted when stream is capturing");
    body_ = body;
    body();
  }
  void replay() override { body_(); }
  void release() override { body_ = nullptr; }

 private:
  bool fail_;
  std::function<void()> body_;
};

}  // namespace

class TestGraphConformance : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void graphStepTraceIsShapeOnly_data() {
    add_rows([](const ArchitectureEntry& e) { return e.cuda_graph_step; });
  }
  void graphStepTraceIsShapeOnly() {
    // A step declared capturable as a CUDA graph is traced once, at capture, with the readback deferred: the trace's
    // host fields must follow from the batch's shape alone (what depends on the data stays in tensors the replays
    // rewrite: gate, decision, on_device), and the host-side progress must not reach the computation. Read back
    // afterwards, the deferred values are those of an ordinary traced forward. As in a graph step, eager forwards
    // come first (shapes a model sizes from earlier forwards are sized), with the GPU's packed rows forced on.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    QCOMPARE(entry.task, Task::LanguageModel);
    torch::manual_seed(9);
    auto lm = create_model(small_model(entry), {kVocab, 32});
    lm->train();
    const ForcePackedRows packed;
    const auto a = torch::randint(0, kVocab, {2, 24}, torch::kLong), b = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    const auto traced = [&](const torch::Tensor& tokens, double progress, bool deferred) {
      lm->set_progress(progress);
      torch::manual_seed(3);  // the same dropout masks
      std::optional<DeferredTraceReadback> defer;
      if (deferred) defer.emplace();
      return lm->forward(tokens, true);
    };
    traced(a, 0.05, false);
    const auto first = traced(a, 0.05, true), other = traced(b, 0.95, true), again = traced(a, 0.95, true);
    QVERIFY(torch::equal(first.logits, again.logits));
    QCOMPARE(first.stats, other.stats);
    QCOMPARE(first.stats_on_device.size(), other.stats_on_device.size());
    QCOMPARE(first.trace.size(), other.trace.size());
    for (std::size_t i = 0; i < first.trace.size(); ++i) {
      const auto &x = first.trace[i], &y = other.trace[i];
      QCOMPARE(x.kind, y.kind);
      QCOMPARE(x.routed, y.routed);
      QCOMPARE(x.routed_fraction, y.routed_fraction);
      QCOMPARE(x.aux_loss, y.aux_loss);
      QCOMPARE(x.tokens_processed, y.tokens_processed);
      QCOMPARE(x.flops, y.flops);
      QCOMPARE(x.stats, y.stats);
      QCOMPARE(x.gate.defined(), y.gate.defined());
      QCOMPARE(x.decision.defined(), y.decision.defined());
      QCOMPARE(x.on_device.size(), y.on_device.size());
    }
    auto output = first;
    resolve_on_device(output);
    const auto eager = traced(a, 0.05, false);
    QVERIFY(output.stats_on_device.empty() && eager.stats_on_device.empty());
    QCOMPARE(output.stats, eager.stats);
    const auto& resolved = output.trace;
    QCOMPARE(resolved.size(), eager.trace.size());
    for (std::size_t i = 0; i < resolved.size(); ++i) {
      QVERIFY(resolved[i].on_device.empty() && eager.trace[i].on_device.empty());
      QCOMPARE(resolved[i].aux_loss, eager.trace[i].aux_loss);
      QCOMPARE(resolved[i].stats, eager.trace[i].stats);
      QCOMPARE(resolved[i].routed_fraction, eager.trace[i].routed_fraction);
      QCOMPARE(resolved[i].tokens_processed, eager.trace[i].tokens_processed);
      QCOMPARE(resolved[i].flops, eager.trace[i].flops);
    }
  }

  void graphStepReadsNothingBack_data() {
    add_rows([](const ArchitectureEntry& e) { return e.cuda_graph_step; });
  }
  void graphStepReadsNothingBack() {
    // A step declared capturable as a CUDA graph runs, once eager steps have sized what it sizes and with its trace's
    // readback deferred as at capture, no op that makes the host wait for the device: no scalar read back, nothing
    // whose result size depends on the data (on a GPU the capture would fail, or a replay would keep stale values).
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(11);
    auto lm = create_model(small_model(entry), {kVocab, 32});
    lm->train();
    const ForcePackedRows packed;
    auto opt = make_optimizer(*lm, adamw_options());
    const auto tokens = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    for (int i = 0; i < 2; ++i) train_step(*lm, *opt, {tokens, tokens, {}}, 1.0, false, true);
    // The model's part of the step: its traced forward and the backward of its losses (the optimizer's part is
    // RouteLab's fused AdamW on a GPU, which the CPU builds do not run).
    lm->set_progress(0.5);
    const auto reads = host_reads([&] {
      const DeferredTraceReadback deferred;
      const auto out = lm->forward(tokens, true);
      auto loss = lm_loss(out.logits, tokens, {}) + out.aux_loss;
      for (const auto& exit : out.exit_logits) loss = loss + lm_loss(exit, tokens, {});
      loss.backward();
    });
    QVERIFY2(reads.isEmpty(), qPrintable("ops that wait for the device: " + reads));
  }

  void graphForwardReadsNothingBack_data() { add_graph_forward_rows(); }
  void graphForwardReadsNothingBack() {
    // An untraced eval-mode forward declared capturable as a CUDA graph (ArchitectureEntry::cuda_graph_forward) runs,
    // once eager forwards have sized what it sizes and with its readback deferred as at capture, no op that makes the
    // host wait for the device, in the form a GPU takes at each precision it is declared for (bf16: packed rows, fp32:
    // padded ones; sized forms forced here), with the options a speed benchmark sets (TSA's sparse inference).
    // Deferred, it computes what the eager forward does, and where it sized routed rows it says so afterwards
    // (ModelOutput::check_shapes: one read, no overflow here).
    QFETCH(QString, arch);
    QFETCH(QString, precision);
    const GpuFormModel model(arch, precision, 11);
    const auto& lm = model.lm;
    const torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    for (int i = 0; i < 2; ++i) lm->forward(tokens);
    const auto eager = lm->forward(tokens);
    ModelOutput deferred;
    const auto reads = host_reads([&] {
      const DeferredTraceReadback on_device;
      deferred = lm->forward(tokens);
    });
    QVERIFY2(reads.isEmpty(), qPrintable("ops that wait for the device: " + reads));
    QVERIFY(torch::equal(deferred.logits, eager.logits));
    QCOMPARE(deferred.overflow.defined(), static_cast<bool>(deferred.check_shapes));
    if (deferred.check_shapes) {
      QCOMPARE(deferred.overflow.item<float>(), 0.0f);
      QVERIFY(!deferred.check_shapes().overflowed);
    }
  }

  void graphForwardRunsEagerThenReplays_data() { add_graph_forward_rows(); }
  void graphForwardRunsEagerThenReplays() {
    // CudaGraphForward around a recorder that reruns what it recorded: its first calls run eagerly, the next one
    // captures, later ones copy their tokens into the captured input and replay, each returning the logits an exact
    // forward of its own tokens gives; a batch of another shape is refused; a forward whose capture fails runs eagerly.
    QFETCH(QString, arch);
    QFETCH(QString, precision);
    const GpuFormModel model(arch, precision, 12);
    const auto& lm = model.lm;
    const torch::NoGradGuard no_grad;
    const auto a = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    const auto b = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    torch::Tensor exact_a, exact_b;
    {
      const ExactRoutedCounts counted;
      exact_a = lm->forward(a).logits;
      exact_b = lm->forward(b).logits;
    }
    CudaGraphForward graph(*lm, /*eager_calls=*/2, std::make_unique<RerunRecorder>());
    const std::vector<std::pair<const torch::Tensor*, const torch::Tensor*>> calls = {
        {&a, &exact_a}, {&b, &exact_b}, {&a, &exact_a}, {&b, &exact_b}, {&b, &exact_b}, {&a, &exact_a}};
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto logits = graph.run(*calls[i].first).clone();
      QVERIFY2(torch::allclose(logits, *calls[i].second, 1e-5, 1e-5), qPrintable(QString("call %1").arg(i + 1)));
      QCOMPARE(graph.captured(), i >= 2);
    }
    QCOMPARE(graph.captures(), 1);
    QVERIFY(graph.eager_reason().empty());
    try {
      graph.run(a.narrow(0, 0, 1));
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("the captured forward takes tokens of [2, 24]"), e.what());
    }
    lm->train();
    QVERIFY(test::contains(test::error_of<ConfigError>([&] { graph.run(a); }), "the model is in training mode"));
    lm->eval();
    CudaGraphForward failing(*lm, 1, std::make_unique<RerunRecorder>(/*fail=*/true));
    for (int i = 0; i < 3; ++i) QVERIFY(torch::allclose(failing.run(a), exact_a, 1e-5, 1e-5));
    QVERIFY(!failing.captured());
    QVERIFY2(failing.eager_reason().find("could not be captured") != std::string::npos, failing.eager_reason().c_str());
  }

  void cudaGraphForwardNeedsAGpu() {
    // Where no GPU holds the model (or the build has no CUDA) the graph forward is refused with the reason.
    auto lm = create_model(small_model(architecture(kBaselineArchitecture)), {kVocab, 32});
    try {
      CudaGraphForward graph(*lm);
      QFAIL("no error");
    } catch (const ConfigError& e) {
      const QString what = e.what();
      QVERIFY2(what.startsWith("CUDA graph forward: ") &&
                   (what.contains("the model is on cpu") || what.contains("has no CUDA")),
               e.what());
    }
  }

};

}  // namespace test_graph_conformance

ROUTELAB_TEST_SUITE(test_graph_conformance, TestGraphConformance)
#include "test_graph_conformance.moc"
