// The benchmarks' profiles: where a GPU's time goes (KernelProfile: kernel names as Kineto reports them, sorted into
// classes; busy time as the union of kernel intervals; the idle rest) and the host-side op classes
// (OpClassProfiler). No GPU here: the kernel names are real ones from H200 profiles of PyTorch 2.x, and the Kineto
// recording itself is exercised on the CPU's ops where the LibTorch has it.
#include <QtTest>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/bench/kernel_profile.h"
#include "core/cost/flop_counter.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_profiles {

using namespace routelab;
using routelab::test::contains;
using routelab::test::error_of;

/// The ms of `cls` in a breakdown, 0 where the class is absent.
double ms_of(const std::map<std::string, double>& classes, const std::string& cls) {
  const auto it = classes.find(cls);
  return it == classes.end() ? 0.0 : it->second;
}

class TestProfiles : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void displayNamesDropParametersAndAnonymousNamespaces() {
    QCOMPARE(kernel_display_name("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, "
                                 "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>, long)"),
             std::string("at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>"));
    QCOMPARE(kernel_display_name("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"),
             std::string("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"));
    QCOMPARE(kernel_display_name("Memcpy DtoD (Device -> Device)"), std::string("Memcpy DtoD"));
    QCOMPARE(kernel_display_name("void routelab::cuda::(anonymous namespace)::rope_kernel<__nv_bfloat16>(const "
                                 "__nv_bfloat16*, long)"),
             std::string("routelab::cuda::rope_kernel<__nv_bfloat16>"));
  }

  void kernelsFallIntoTheirClasses_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("cls");
    const QString mm = "matrix products", attn = "attention", ours = "RouteLab kernels", idx = "routing index ops",
                  copy = "copies, casts, fills", red = "norms, softmax, reductions", ew = "elementwise",
                  opt = "optimizer", other = "other";
    QTest::newRow("nvjet") << "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT" << mm;
    QTest::newRow("xmma") << "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1" << mm;
    QTest::newRow("cutlass") << "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_"
                                "align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"
                             << mm;
    QTest::newRow("flash") << "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
                              "false, cutlass::bfloat16_t>, false, true, false>(pytorch_flash::Flash_fwd_params)"
                           << attn;
    QTest::newRow("cudnn") << "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64" << attn;
    QTest::newRow("efficient") << "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
                                  "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
                               << attn;
    QTest::newRow("ours") << "void routelab::cuda::(anonymous namespace)::forward_kernel<float>(const float*, long)"
                          << ours;
    QTest::newRow("index select") << "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, "
                                     "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>)"
                                  << idx;
    QTest::newRow("index put") << "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
                                  "at::native::index_put_kernel_impl<at::native::OpaqueType<4> >>(int)"
                               << idx;
    QTest::newRow("cat") << "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
                            "namespace)::OpaqueType<4u>, unsigned int, 3, 128, 1>(int)"
                         << idx;
    QTest::newRow("topk") << "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(int)" << idx;
    QTest::newRow("radix sort") << "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<int>(int)" << idx;
    QTest::newRow("memcpy") << "Memcpy DtoD (Device -> Device)" << copy;
    QTest::newRow("memset") << "Memset (Device)" << copy;
    QTest::newRow("cast") << "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                             "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}, "
                             "at::detail::Array<char*, 2> >(int)"
                          << copy;
    QTest::newRow("fill") << "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>)"
                          << copy;
    QTest::newRow("layer norm") << "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
                                   "(int, float, float const*)"
                                << red;
    QTest::newRow("reduce") << "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
                               "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()>, "
                               "unsigned int, float, 4> >(int)"
                            << red;
    QTest::newRow("softmax") << "void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*)" << red;
    QTest::newRow("gelu") << "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
                             "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}, at::detail::Array<char*, 2> >(int)"
                          << ew;
    QTest::newRow("add") << "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>)"
                         << ew;
    QTest::newRow("fused adamw") << "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                                    "(anonymous namespace)::TensorListMetadata<4>, at::native::FusedAdamMathFunctor<float, 4>"
                                    ">(int)"
                                 << opt;
    QTest::newRow("unknown") << "my_kernel" << other;
  }

  void kernelsFallIntoTheirClasses() {
    QFETCH(QString, name);
    QFETCH(QString, cls);
    const std::string got = kernel_class(name.toStdString());
    QVERIFY2(got.rfind(cls.toStdString(), 0) == 0, got.c_str());
  }

  void busyTimeIsTheUnionOfKernelIntervals() {
    const std::string mm = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT";
    const std::string add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>)";
    const std::vector<KernelEvent> events = {
        {mm, 0, 4'000'000},               // 0-4 ms
        {add, 3'000'000, 5'000'000},      // overlaps: busy to 5 ms
        {mm, 8'000'000, 10'000'000},      // a 3 ms gap, then 2 ms
        {add, 8'500'000, 9'000'000},      // inside the previous
        {add, 20'000'000, 19'000'000}};   // ends before it starts: ignored
    const auto p = KernelProfile::from_events(events, 12.0);
    QCOMPARE(p.busy_ms, 7.0);
    QCOMPARE(p.kernels.size(), std::size_t{2});
    QCOMPARE(p.kernels[0].name, mm);  // 6 ms, longest first
    QCOMPARE(p.kernels[0].calls, std::int64_t{2});
    QCOMPARE(p.kernels[0].ms, 6.0);
    QCOMPARE(p.kernels[1].calls, std::int64_t{2});
    QCOMPARE(p.kernels[1].ms, 2.5);
    const auto classes = p.classes_ms();
    QCOMPARE(classes.at(kKernelIdleClass), 5.0);
    QCOMPARE(classes.at(kernel_class(mm)), 6.0);
    QCOMPARE(classes.at(kernel_class(add)), 2.5);
    // Per step of two: halves; the longest kernel named; the list cut at `top`.
    const auto table = p.to_table(1, 2.0, "per step");
    QVERIFY2(contains(table, "device busy 3.50 ms of 6.00 ms per step (58.33%)"), table.c_str());
    QVERIFY2(contains(table, "3.00     1.0  " + mm), table.c_str());
    QVERIFY2(!contains(table, "CUDAFunctor_add<float>, at::detail"), table.c_str());
    QVERIFY(!contains(table, "by part"));  // none recorded
    auto with_parts = p;
    with_parts.parts["mlp"] = {2.0, 4.0, 3, 5};
    const auto parts = with_parts.to_table(1, 2.0, "per step");
    QVERIFY2(contains(parts, "kernel time by part") && contains(parts, "mlp") && contains(parts, "3.00"),
             parts.c_str());
    // A device that ran nothing was idle the whole time.
    QCOMPARE(KernelProfile::from_events({}, 3.0).classes_ms().at(kKernelIdleClass), 3.0);
  }

  void recordsTheOpsTheCpuRuns() {
    if (!kernel_profiling_unavailable().empty()) {
      // LibTorch 1.13: a clear refusal naming what is missing.
      QVERIFY(contains(error_of<ConfigError>([] { KernelProfiler p(false); }), "LibTorch 2.4 or later"));
      return;
    }
    const auto trace = std::filesystem::temp_directory_path() /
                       ("routelab-kernel-trace-" + std::to_string(::getpid()) + ".json");
    KernelProfiler profiler(false);
    QVERIFY(contains(error_of<ConfigError>([] { KernelProfiler second(false); }), "already being recorded"));
    const auto a = torch::randn({64, 64});
    for (int i = 0; i < 5; ++i) {
      ROUTELAB_PART("mlp");
      (void)torch::mm(a, a);
    }
    const auto p = profiler.stop(trace.string());
    const auto mm = std::find_if(p.kernels.begin(), p.kernels.end(), [](const auto& k) { return k.name == "aten::mm"; });
    QVERIFY2(mm != p.kernels.end(), "no aten::mm recorded");
    QCOMPARE(mm->calls, std::int64_t{5});
    // A part's scope is a range drawn over the work (on a GPU's timeline too), not work: no kernel of its own, and
    // its time not counted as busy twice. The ops inside it are the part's.
    for (const auto& k : p.kernels) QVERIFY2(!contains(k.name, ROUTELAB_PART_PREFIX), k.name.c_str());
    QVERIFY(p.parts.count("mlp") == 1 && p.parts.at("mlp").forward_calls == 5);
    QCOMPARE(p.part_pieces.at("mlp").at("aten::mm").forward_calls, 5.0);  // what the part ran, by op
    QVERIFY(p.busy_ms > 0 && p.busy_ms <= p.wall_ms);
    std::ifstream in(trace);
    const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    std::filesystem::remove(trace);
    QVERIFY2(!doc.is_discarded() && doc.contains("traceEvents"), "the trace is not a Chrome trace");
    QVERIFY(contains(doc.dump(), "aten::mm"));
    QVERIFY(contains(error_of<ConfigError>([&] { profiler.stop(); }), "stopped twice"));
    KernelProfiler again(false);  // the first released the profiler
    (void)again.stop();
  }

  void hostOpClassesSplitMatmulsFromIndexOps() {
    const auto a = torch::randn({128, 128});
    const auto index = torch::randint(0, 128, {4096}, torch::kLong);
    OpClassProfiler profiler;
    for (int i = 0; i < 3; ++i) (void)torch::mm(a, a);
    for (int i = 0; i < 3; ++i) (void)a.index_select(0, index);
    profiler.stop();
    const auto classes = profiler.classes_ms();
    double sum = 0;
    for (const auto& [k, v] : classes) sum += v;
    QVERIFY(ms_of(classes, "matmul (projections, MLP, routers, head)") > 0);
    QVERIFY(ms_of(classes, "routing index ops (gather/scatter/index/sort/where/cat)") > 0);
    QVERIFY(std::abs(sum - profiler.wall_ms()) < 1e-6 * std::max(1.0, sum));
  }

  void backwardProductsCountAsProducts() {
    // A training step's backward runs inside the autograd engine's wrappers; its matrix products are still products.
    const auto a = torch::randn({256, 256}, torch::requires_grad());
    const auto b = torch::randn({256, 256}, torch::requires_grad());
    const auto loss = torch::mm(torch::mm(a, b), b).sum();
    OpClassProfiler profiler;
    loss.backward();
    profiler.stop();
    const auto classes = profiler.classes_ms();
    // Wrapped, every op of the backward was one top-level "elementwise" op and products had no time at all.
    QVERIFY(ms_of(classes, "matmul (projections, MLP, routers, head)") > 0);
  }

  void partsTakeTheirWorkAndTheirBackward() {
    // One thread's timeline (ns): "attention" [0, 100] with "routing" [10, 20] and "router" [11, 19] inside; ops
    // made nodes 7 (at 5, in
    // attention), 8 (at 15, routing) and 9 (at 150, outside every part); the backward evaluates node 8 in an
    // engine span [200, 260] whose node span is [210, 250], then node 7 [270, 290], then an accumulation node
    // numbered -1 [300, 310], then a custom function's node 12 (no op peeked 12: the last op before it is 9).
    PartAttribution a;
    a.part(1, 0, 100, "attention");
    a.part(1, 10, 20, "routing");
    a.part(1, 11, 19, "router");  // inside "routing": the innermost
    a.op(1, 5, 7);
    a.op(1, 15, 8);
    a.op(1, 150, 9);
    a.op(1, 16, -1);  // makes no node
    a.evaluation(1, 200, 260);
    a.backward(1, 210, 250, 8, 1);
    a.backward(1, 270, 290, 7, 1);
    a.op(1, 275, 2);  // an op inside the backward numbers no forward node
    a.backward(1, 300, 310, -1, 1);
    a.backward(1, 320, 330, 12, 1);
    a.work(1, 1, 1.0, "gemm");  // attention
    a.work(1, 12, 2.0);     // router (innermost)
    a.work(1, 10, 0.5);     // routing
    a.work(1, 30, 4.0, "flash");  // attention again
    a.work(1, 150, 8.0);    // outside every part
    a.work(1, 220, 16.0);   // node 8: router's backward
    a.work(1, 255, 32.0);   // the engine's own work around node 8: router's backward too
    a.work(1, 280, 64.0, "gemm");  // node 7: attention's backward
    a.work(1, 305, 128.0);  // accumulation: no forward op
    a.work(1, 325, 256.0);  // node 12: op 9's part, outside every part
    a.work(2, 220, 512.0);  // another thread with no spans: outside every part
    a.unlinked(1024.0, "graph kernel");
    const auto parts = a.parts();
    // The same attribution by what the work was.
    const auto pieces = a.pieces();
    const auto& attention = pieces.at("attention");
    QCOMPARE(attention.size(), std::size_t{2});
    QCOMPARE(attention.at("gemm").forward_ms, 1.0);
    QCOMPARE(attention.at("gemm").backward_ms, 64.0);
    QCOMPARE(attention.at("flash").forward_ms, 4.0);
    QCOMPARE(pieces.at("router").at("").backward_calls, 2.0);  // unnamed work: ""
    QCOMPARE(pieces.at(kUnlinkedWork).at("graph kernel").forward_ms, 1024.0);
    for (const auto& [part, by_name] : pieces) {  // every part's pieces add up to it
      double ms = 0, calls = 0;
      for (const auto& [name, t] : by_name) ms += t.total(), calls += t.calls();
      QCOMPARE(ms, parts.at(part).total());
      QCOMPARE(calls, parts.at(part).calls());
    }
    QCOMPARE(parts.at("attention").forward_ms, 5.0);
    QCOMPARE(parts.at("attention").forward_calls, 2.0);
    QCOMPARE(parts.at("attention").backward_ms, 64.0);
    QCOMPARE(parts.at("router").forward_ms, 2.0);
    QCOMPARE(parts.at("router").backward_ms, 48.0);
    QCOMPARE(parts.at("router").backward_calls, 2.0);
    QCOMPARE(parts.at("routing").forward_ms, 0.5);
    QCOMPARE(parts.at(kNoPart).forward_ms, 8.0 + 512.0);
    QCOMPARE(parts.at(kNoPart).backward_ms, 256.0);
    QCOMPARE(parts.at(kUnmatchedBackward).backward_ms, 128.0);
    QCOMPARE(parts.at(kUnlinkedWork).forward_ms, 1024.0);
    const auto table = parts_table(parts, 2.0, &parts, "same");
    QVERIFY2(contains(table, "router") && contains(table, "24.00") && contains(table, "same"), table.c_str());
    // The largest total first.
    QVERIFY2(table.find(kUnlinkedWork) < table.find("attention"), table.c_str());
  }

  /// Two parts' forward, then the backward of both: the work of aProfiledStepSplitsItsTimeByPart.
  static void two_parts_and_their_backward() {
    torch::manual_seed(1);
    const auto x = torch::randn({64, 128});
    const auto w1 = torch::randn({128, 128}, torch::requires_grad());
    const auto w2 = torch::randn({128, 128}, torch::requires_grad());
    torch::Tensor h, y;
    {
      ROUTELAB_PART("first");
      h = torch::relu(torch::mm(x, w1));
    }
    {
      ROUTELAB_PART("second");
      y = torch::mm(h, w2).sum();
    }
    y.backward();
    QVERIFY(w1.grad().defined() && w2.grad().defined());
  }

  void aProfiledStepSplitsItsTimeByPart() {
    // A real forward and backward under the host profiler: the backward's products are the part's whose forward
    // made them, and every top-level op's time is attributed once.
    OpClassProfiler profiler;
    two_parts_and_their_backward();
    profiler.stop();
    const auto parts = profiler.parts_ms();
    QVERIFY(parts.count("first") && parts.count("second"));
    QVERIFY(parts.at("first").forward_calls >= 2 && parts.at("first").backward_calls >= 2);  // mm, relu; their grads
    QVERIFY(parts.at("second").backward_ms > 0);
    double sum = 0, ops = 0;
    for (const auto& [name, t] : parts) sum += t.calls();
    for (const auto& [name, tally] : profiler.ops_by_name()) ops += static_cast<double>(tally.calls);
    QCOMPARE(sum, ops);
  }

  void kinetoFindsTheSameParts() {
    // The GPU's attribution reads Kineto's events (scopes, sequence numbers, forward threads, the engine's
    // evaluations): on the CPU's recording it must find the parts, and the calls, that the host profiler finds.
    if (!kernel_profiling_unavailable().empty()) QSKIP("Kineto needs LibTorch 2.4 or later");
    two_parts_and_their_backward();  // warm: the first call allocates
    OpClassProfiler host;
    two_parts_and_their_backward();
    host.stop();
    KernelProfiler kineto(false);
    two_parts_and_their_backward();
    const auto recorded = kineto.stop();
    const auto expected = host.parts_ms();
    for (const auto* name : {"first", "second"}) {
      QVERIFY2(recorded.parts.count(name), name);
      QCOMPARE(recorded.parts.at(name).forward_calls, expected.at(name).forward_calls);
      QCOMPARE(recorded.parts.at(name).backward_calls, expected.at(name).backward_calls);
    }
  }

  void theCpuAttentionBackwardIsAttention() {
    // The custom CPU kernel's backward calls BLAS directly: without its own event its time was "outside ops".
    const auto q = torch::randn({2, 4, 96, 16}, torch::requires_grad());
    const auto k = torch::randn({2, 4, 96, 16}, torch::requires_grad());
    const auto v = torch::randn({2, 4, 96, 16}, torch::requires_grad());
    const auto loss = causal_attention(q, k, v).sum();
    OpClassProfiler profiler;
    loss.backward();
    profiler.stop();
    QVERIFY(ms_of(profiler.classes_ms(), "attention (the custom CPU kernel, forward and backward)") > 0);
    QVERIFY(q.grad().defined() && k.grad().defined() && v.grad().defined());
  }
};

}  // namespace test_profiles

ROUTELAB_TEST_SUITE(test_profiles, TestProfiles)
#include "test_profiles.moc"
