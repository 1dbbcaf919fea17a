// Probe, not part of the build: LibTorch 2.x's exported AMX product (at::native::cpublas::brgemm, bf16 in, fp32 out)
// against the MKL sgemm the CPU attention kernel calls, at the kernel's score-product shape (128 query rows, head size
// 32, N keys; one thread), alone and with the key block transposed and VNNI-packed for each product as a kernel
// without per-head packing would. README "Not done yet" quotes it. Build and run against the pip LibTorch:
//   T=.venv-torch/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++20 packaging/probes/amx_brgemm.cpp -I$T/include -I$T/include/torch/csrc/api/include -L$T/lib \
//       -ltorch -ltorch_cpu -lc10 -Wl,-rpath,$T/lib -o /tmp/amx_brgemm && /tmp/amx_brgemm
#include <ATen/native/CPUBlas.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);

namespace {

template <typename Fn>
double seconds_per_call(int reps, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

}  // namespace

int main() {
  namespace blas = at::native::cpublas;
  at::set_num_threads(1);
  if (!blas::could_pack(at::kBFloat16)) {
    std::printf("this CPU or LibTorch packs no bf16 for brgemm\n");
    return 1;
  }
  constexpr std::int64_t M = 128, K = 32, kBlock = 64;  // brgemm's packed B is taken 64 columns at a time
  for (const std::int64_t N : {128, 256, 512, 1024}) {
    const auto q = torch::randn({M, K}), k = torch::randn({N, K});
    const auto qb = q.to(torch::kBFloat16), kb = k.to(torch::kBFloat16);
    auto scores = torch::empty({M, N}), amx = torch::empty({M, N});
    auto packed = torch::empty({K * N}, torch::kBFloat16);
    const auto sgemm = [&] {  // scores = q k^T, row-major through the Fortran interface
      const int m = static_cast<int>(N), n = static_cast<int>(M), kk = static_cast<int>(K), ldc = static_cast<int>(N);
      const float one = 1, zero = 0;
      sgemm_("T", "N", &m, &n, &kk, &one, k.data_ptr<float>(), &kk, q.data_ptr<float>(), &kk, &zero,
             scores.data_ptr<float>(), &ldc);
    };
    const auto pack = [&] {
      const auto kt = kb.t().contiguous();  // (K, N)
      for (std::int64_t j = 0; j < N; j += kBlock)
        blas::pack(K, kBlock, N, kBlock, at::kBFloat16, at::kBFloat16, kt.data_ptr<at::BFloat16>() + j,
                   packed.data_ptr<at::BFloat16>() + j * K);
    };
    const auto product = [&] {
      for (std::int64_t j = 0; j < N; j += kBlock)
        blas::brgemm(M, kBlock, K, K, kBlock, N, false, qb.data_ptr<at::BFloat16>(),
                     packed.data_ptr<at::BFloat16>() + j * K, amx.data_ptr<float>() + j, true);
    };
    const int reps = 2000;
    const double t_sgemm = seconds_per_call(reps, sgemm);
    const double t_packed = seconds_per_call(reps, [&] { pack(); product(); });
    const double t_product = seconds_per_call(reps, product);
    blas::brgemm_release();
    const auto reference = torch::mm(qb.to(torch::kFloat), kb.to(torch::kFloat).t());
    std::printf("N %4ld: sgemm %6.2f us | brgemm with packing %6.2f us (%.2fx) | brgemm alone %6.2f us (%.2fx) | "
                "max |diff| %.1e\n",
                static_cast<long>(N), 1e6 * t_sgemm, 1e6 * t_packed, t_sgemm / t_packed, 1e6 * t_product,
                t_sgemm / t_product, (amx - reference).abs().max().item<float>());
  }
  return 0;
}
