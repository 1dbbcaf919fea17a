// Checks that need a GPU, for every architecture they apply to: each language model's eval forward on the GPU equals
// its forward on the CPU (fp32, TF32 off: RouteLab's CUDA kernels, the packed and sized paths a GPU takes), and each
// eval forward declared capturable, captured as a real CUDA graph (CudaGraphForward), replays new tokens to the
// logits of an exact forward of them. Without a CUDA device (CI, the Debian build) every check is skipped;
// packaging/gpu-check.sh runs this suite on a lent GPU (step core-suite-gpu).
#include <QtTest>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/inference/cuda_graph_forward.h"
#include "core/models/blocks/routing.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "tests/conformance_support.h"
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
};

}  // namespace test_gpu

ROUTELAB_TEST_SUITE(test_gpu, TestGpu)
#include "test_gpu.moc"
