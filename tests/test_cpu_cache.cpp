// The caching CPU allocator: large blocks come back for the next request of about their size, small ones and
// oversized ones go to the system, the cap bounds what is held, and tensors stay correct across reuse.
#include <QtTest>

#include <torch/torch.h>

#include "core/util/cpu_allocator.h"
#include "tests/suite.h"

namespace test_cpu_cache {

using namespace routelab;

class TestCpuCache : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    qunsetenv("ROUTELAB_CPU_CACHE_MB");
    install_cpu_cache(std::int64_t{256} << 20);
    release_cpu_cache();
  }

  void largeBlocksAreReused() {
    const auto before = cpu_cache_stats();
    void* first = nullptr;
    {
      auto t = torch::empty({8 << 20}, torch::kFloat);  // 32 MiB
      first = t.data_ptr();
      t.fill_(3.0f);
    }
    QCOMPARE(cpu_cache_stats().cached_bytes, std::int64_t{32} << 20);
    auto again = torch::zeros({(8 << 20) - 1000}, torch::kFloat);  // a little smaller: the same block
    QCOMPARE(again.data_ptr(), first);
    QCOMPARE(again.sum().item<double>(), 0.0);  // zeros() still zero-fills a reused block
    const auto after = cpu_cache_stats();
    QCOMPARE(after.hits, before.hits + 1);
    QCOMPARE(after.misses, before.misses + 1);
    QCOMPARE(after.cached_bytes, std::int64_t{0});
  }

  void muchSmallerRequestsTakeANewBlock() {
    release_cpu_cache();
    { auto big = torch::empty({16 << 20}, torch::kFloat); }  // 64 MiB cached
    const auto misses = cpu_cache_stats().misses;
    auto half = torch::empty({8 << 20}, torch::kFloat);  // 32 MiB: would waste half the block
    QCOMPARE(cpu_cache_stats().misses, misses + 1);
    QCOMPARE(cpu_cache_stats().cached_bytes, std::int64_t{64} << 20);
  }

  void smallTensorsBypassTheCache() {
    release_cpu_cache();
    const auto before = cpu_cache_stats();
    { auto small = torch::ones({1000}, torch::kFloat); }
    const auto after = cpu_cache_stats();
    QCOMPARE(after.hits + after.misses, before.hits + before.misses);
    QCOMPARE(after.cached_bytes, std::int64_t{0});
  }

  void theCapBoundsWhatIsHeld() {
    release_cpu_cache();
    {
      std::vector<torch::Tensor> blocks;
      for (int i = 0; i < 6; ++i) blocks.push_back(torch::empty({16 << 20}, torch::kFloat));  // 6 x 64 MiB live
    }
    QVERIFY2(cpu_cache_stats().cached_bytes <= std::int64_t{256} << 20,
             qPrintable(QString::number(cpu_cache_stats().cached_bytes)));
    QCOMPARE(cpu_cache_stats().cached_bytes, std::int64_t{256} << 20);  // 4 of the 6 blocks kept
    release_cpu_cache();
    QCOMPARE(cpu_cache_stats().cached_bytes, std::int64_t{0});
  }

  void livePeakCountsLargeBlocksHeld() {
    release_cpu_cache();
    const auto base = cpu_cache_stats().live_bytes;
    reset_cpu_peak();
    {
      auto a = torch::empty({8 << 20}, torch::kFloat);  // 32 MiB
      {
        auto b = torch::empty({4 << 20}, torch::kFloat);  // 16 MiB: 48 live at once
        QCOMPARE(cpu_cache_stats().live_bytes, base + (std::int64_t{48} << 20));
      }
      auto c = torch::empty({4 << 20}, torch::kFloat);  // the cached 16 MiB block again: still 48 at most
      { auto small = torch::ones({1000}, torch::kFloat); }  // not counted
    }
    QCOMPARE(cpu_cache_stats().live_bytes, base);
    QCOMPARE(cpu_cache_stats().peak_live_bytes, base + (std::int64_t{48} << 20));
    reset_cpu_peak();
    QCOMPARE(cpu_cache_stats().peak_live_bytes, base);
  }

  void trainingArithmeticIsUnchanged() {
    torch::manual_seed(3);
    const auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
    const auto reference = torch::mm(a, b).sum().item<double>();
    for (int i = 0; i < 3; ++i) QCOMPARE(torch::mm(a, b).sum().item<double>(), reference);  // reused blocks
  }
};

}  // namespace test_cpu_cache

ROUTELAB_TEST_SUITE(test_cpu_cache, TestCpuCache)
#include "test_cpu_cache.moc"
