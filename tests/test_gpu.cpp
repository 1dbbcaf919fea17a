// Checks that need a GPU, for every architecture they apply to: each language model's eval forward on the GPU equals
// its forward on the CPU (fp32, TF32 off: RouteLab's CUDA kernels, the packed and sized paths a GPU takes), and each
// eval forward declared capturable, captured as a real CUDA graph (CudaGraphForward), replays new tokens to the
// logits of an exact forward of them, and each training step declared capturable, replayed as a CUDA graph
// (CudaGraphStep), trains as the eager step does; D-LLM's training attention on each fused GPU kernel equals its
// materialised form. Without a CUDA device (CI, the Debian build) every check is skipped;
// packaging/gpu-check.sh runs this suite on a lent GPU (step core-suite-gpu).
#include <QtTest>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/inference/cuda_graph_forward.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/routing.h"
#include "core/models/dllm_eviction.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "tests/conformance_support.h"
#include "tests/eviction_support.h"
#include "tests/suite.h"

namespace test_gpu {

using namespace routelab;
using namespace routelab::test::conformance;

namespace {

constexpr std::int64_t kBatch = 4, kLength = 64;

/// The architecture's model for these checks: graph_forward_model at a length of kLength.
nlohmann::json gpu_model(const ArchitectureEntry& entry) {
  auto m = graph_forward_model(entry);
  if (m.contains("max_seq_len")) m["max_seq_len"] = kLength;
  return m;
}

QString largest_gap(const torch::Tensor& a, const torch::Tensor& b) {
  const auto gap = a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble);
  return QString::number(gap.abs().max().item<double>());
}

}  // namespace

class TestGpu : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() {
    if (!cuda_graphs_available() || !torch::cuda::is_available())
      QSKIP("no CUDA device (or a LibTorch without CUDA): a check for a lent GPU (packaging/gpu-check.sh)");
    configure_cuda_math(/*tf32=*/false);
  }

  void gpuForwardEqualsCpuForward_data() { add_language_model_rows(); }
  void gpuForwardEqualsCpuForward() {
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(21);
    auto cpu = create_model(gpu_model(entry), {kVocab, kLength});
    auto gpu = create_model(gpu_model(entry), {kVocab, kLength});
    cpu->eval();
    gpu->eval();
    const torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {kBatch, kLength}, torch::kLong);
    if (entry.force_routed_share) entry.force_routed_share(*cpu, tokens, 0.3);  // forced once: the same routers
    const auto from = cpu->named_parameters(), from_buffers = cpu->named_buffers();
    for (auto& p : gpu->named_parameters()) p.value().copy_(from[p.key()]);
    for (auto& b : gpu->named_buffers()) b.value().copy_(from_buffers[b.key()]);
    gpu->to(torch::kCUDA);
    const auto expected = cpu->forward(tokens).logits;
    for (int call = 0; call < 3; ++call) {  // the later calls on rows sized from the earlier ones
      const auto got = gpu->forward(tokens.to(torch::kCUDA)).logits.to(torch::kCPU);
      QVERIFY2(torch::allclose(got, expected, 1e-4, 1e-4),
               qPrintable(QString("call %1: largest gap %2").arg(call + 1).arg(largest_gap(got, expected))));
    }
  }

  void graphForwardReplaysEqualExactForwards_data() { add_graph_forward_rows(); }
  void graphForwardReplaysEqualExactForwards() {
    QFETCH(QString, arch);
    QFETCH(QString, precision);
    const auto& entry = architecture(arch.toStdString());
    const bool bf16 = precision == "bf16";
    const torch::Device device(torch::kCUDA);
    torch::manual_seed(22);
    auto lm = create_model(gpu_model(entry), {kVocab, kLength});
    lm->to(device);
    lm->eval();
    const torch::NoGradGuard no_grad;
    const AutocastGuard autocast(bf16, device);
    const auto a = torch::randint(0, kVocab, {kBatch, kLength}, torch::kLong).to(device);
    const auto b = torch::randint(0, kVocab, {kBatch, kLength}, torch::kLong).to(device);
    if (entry.force_routed_share) entry.force_routed_share(*lm, a, 0.3);
    torch::Tensor exact_a, exact_b;
    {
      const ExactRoutedCounts counted;
      exact_a = lm->forward(a).logits.to(torch::kFloat);
      exact_b = lm->forward(b).logits.to(torch::kFloat);
    }
    const double tolerance = bf16 ? 5e-2 : 1e-4;
    QVERIFY(!torch::allclose(exact_a, exact_b, tolerance, tolerance));  // the replays below can tell them apart
    CudaGraphForward graph(*lm);
    const std::vector<std::pair<torch::Tensor, torch::Tensor>> calls = {
        {a, exact_a}, {b, exact_b}, {a, exact_a}, {b, exact_b}, {a, exact_a}, {b, exact_b}, {b, exact_b}, {a, exact_a}};
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto got = graph.run(calls[i].first).to(torch::kFloat);
      QVERIFY2(torch::allclose(got, calls[i].second, tolerance, tolerance),
               qPrintable(QString("call %1 (%2): largest gap %3")
                              .arg(i + 1)
                              .arg(graph.captured() ? "replayed" : "eager")
                              .arg(largest_gap(got, calls[i].second))));
    }
    QVERIFY2(graph.eager_reason().empty(), graph.eager_reason().c_str());
    QVERIFY(graph.captured());
    QVERIFY2(graph.captures() <= 2, qPrintable(QString("captured %1 times").arg(graph.captures())));
  }

  void graphStepTrainsAsEagerSteps_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QString>("precision");
    for (const auto& entry : architectures())
      if (entry.task == Task::LanguageModel && entry.cuda_graph_step)
        for (const std::string precision : {"bf16", "fp32"})
          if (why_no_cuda_graph(entry, gpu_model(entry), {{"precision", precision}, {"deterministic", false}})
                  .empty())
            QTest::newRow((entry.id + " " + precision).c_str())
                << QString::fromStdString(entry.id) << QString::fromStdString(precision);
  }
  void graphStepTrainsAsEagerSteps() {
    // The same model trained eight steps from one seed eagerly and as a CUDA graph (its eager steps, the capture,
    // replays): the same losses and weights, up to the GPU's run-to-run rounding (atomics in some backward kernels).
    QFETCH(QString, arch);
    QFETCH(QString, precision);
    const auto& entry = architecture(arch.toStdString());
    const bool bf16 = precision == "bf16";
    const torch::Device device(torch::kCUDA);
    auto model = gpu_model(entry);
    if (model.contains("dropout")) model["dropout"] = 0.0;
    std::vector<Batch> batches;
    torch::manual_seed(23);
    for (int i = 0; i < 8; ++i) {
      const auto rows = torch::randint(0, kVocab, {kBatch, kLength + 1}, torch::kLong).to(device);
      batches.push_back({rows.narrow(1, 0, kLength), rows.narrow(1, 1, kLength), {}});
    }
    struct Trained {
      std::vector<double> losses;
      std::shared_ptr<LanguageModel> lm;
      bool captured = false;
    };
    const auto trained = [&](bool graphed) {
      torch::manual_seed(24);
      torch::cuda::manual_seed_all(24);
      auto lm = create_model(model, {kVocab, kLength});
      lm->to(device);
      lm->train();
      auto optimizer = make_optimizer(*lm, adamw_options());
      std::unique_ptr<CudaGraphStep> graph;
      if (graphed) graph = std::make_unique<CudaGraphStep>(*lm, *optimizer, 1.0, bf16);
      std::vector<double> losses;
      for (const auto& batch : batches) {
        const auto r = graph ? graph->run(batch, false) : train_step(*lm, *optimizer, batch, 1.0, bf16, false);
        losses.push_back(r.loss.item<double>());
      }
      return Trained{losses, lm, graph && graph->captured()};
    };
    const auto eager_run = trained(false), graph_run = trained(true);
    QVERIFY2(graph_run.captured, "the step was never captured");
    const auto& eager_losses = eager_run.losses;
    const auto& graph_losses = graph_run.losses;
    const auto& eager = eager_run.lm;
    const auto& graphed = graph_run.lm;
    const double tolerance = bf16 ? 2e-2 : 1e-4;
    for (std::size_t i = 0; i < eager_losses.size(); ++i) {
      const double e = eager_losses[i], g = graph_losses[i];
      QVERIFY2(std::abs(e - g) <= tolerance * std::max(1.0, std::abs(e)),
               qPrintable(QString("step %1: eager %2, graphed %3").arg(i + 1).arg(e).arg(g)));
    }
    const auto graphed_params = graphed->named_parameters();
    for (const auto& p : eager->named_parameters()) {
      const auto& other = graphed_params[p.key()];
      QVERIFY2(torch::allclose(p.value(), other, tolerance, tolerance),
               qPrintable(QString::fromStdString(p.key()) + ": largest gap " + largest_gap(p.value(), other)));
    }
  }

  void fusedEvictionKernelsEqualMaterialised_data() {
    QTest::addColumn<int>("kernel");
    QTest::addColumn<bool>("bf16");
    QTest::newRow("flash bf16") << int(EvictionKernel::Flash) << true;
    QTest::newRow("cudnn bf16") << int(EvictionKernel::Cudnn) << true;
    QTest::newRow("efficient bf16") << int(EvictionKernel::Efficient) << true;
    QTest::newRow("efficient fp32") << int(EvictionKernel::Efficient) << false;
  }
  void fusedEvictionKernelsEqualMaterialised() {
    // D-LLM's training attention (official multiplicative eviction) on each fused GPU kernel, with grouped heads of
    // the 360M presets' size, against the materialised form in double on the GPU: the output and the gradients of q,
    // k, v and the flags. fp32 as the flash form's CPU rows are held (test_dllm); bf16 to three times the
    // materialised form's own distance in bf16, or 1% of the largest value.
    QFETCH(int, kernel);
    QFETCH(bool, bf16);
    if (!flash_eviction_available()) QSKIP("LibTorch before 2.3 has no flash attention");
    if (EvictionKernel(kernel) == EvictionKernel::Cudnn && !cudnn_eviction_available())
      QSKIP("LibTorch before 2.6 has no cuDNN attention ops");
    const std::int64_t B = 2, H = 6, Hkv = 2, T = 200, hd = 64;
    torch::manual_seed(25);
    const auto on = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kDouble);
    auto flags = torch::rand({B, T}, on).lt(0.5).to(torch::kDouble);
    flags.narrow(1, 0, 2).fill_(1.0);  // D-LLM's reserved first tokens
    const std::vector<torch::Tensor> inputs = {torch::randn({B, H, T, hd}, on), torch::randn({B, Hkv, T, hd}, on),
                                               torch::randn({B, Hkv, T, hd}, on), flags};
    const auto upstream = torch::randn({B, H, T, hd}, on);
    const auto type = bf16 ? torch::kBFloat16 : torch::kFloat;
    const auto materialised = [&](const std::vector<torch::Tensor>& x) {
      return evicting_attention_materialised(x[0], repeat_kv(x[1], H / Hkv), repeat_kv(x[2], H / Hkv), x[3],
                                             Eviction::Multiplicative);
    };
    const auto tested = test::output_and_gradients(inputs, type, upstream, [&](const std::vector<torch::Tensor>& x) {
      return evicting_attention_flash(x[0], x[1], x[2], x[3], Eviction::Multiplicative, EvictionKernel(kernel));
    });
    const auto reference = test::output_and_gradients(inputs, torch::kDouble, upstream, materialised);
    const auto rounded = bf16 ? test::output_and_gradients(inputs, type, upstream, materialised) : reference;
    const auto error = [](const torch::Tensor& a, const torch::Tensor& b) {
      return (a - b).abs().max().item<double>();
    };
    const char* names[] = {"output", "dq", "dk", "dv", "dw"};
    for (std::size_t i = 0; i < tested.size(); ++i) {
      const double scale = std::max(reference[i].abs().max().item<double>(), 1.0);
      const double allowed = bf16 ? std::max(3.0 * error(rounded[i], reference[i]), 1e-2 * scale) : 2e-4 * scale;
      const double diff = error(tested[i], reference[i]);
      QVERIFY2(diff <= allowed,
               qPrintable(QString("%1: max difference %2 (allowed %3)").arg(names[i]).arg(diff).arg(allowed)));
    }
    QVERIFY(tested[4].abs().max().item<double>() > 1e-3);  // the flags' gradient is there
  }
};

}  // namespace test_gpu

ROUTELAB_TEST_SUITE(test_gpu, TestGpu)
#include "test_gpu.moc"
