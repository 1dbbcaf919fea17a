// Shared routing machinery: layer patterns, compaction (gather/scatter), expert-choice top-k and the
// variable-length causal attention that makes routed attention cost sum_b k_b^2.
#include <QtTest>

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/routing.h"
#include "core/models/blocks/varlen_packing.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_routing {

using namespace routelab;

namespace {

/// Causal attention of one sequence's first n positions, written out naively: (H, n, hd) each.
torch::Tensor naive_prefix_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto n = q.size(1), hd = q.size(2);
  auto s = torch::matmul(q, k.transpose(1, 2)) / std::sqrt(double(hd));
  s = s.masked_fill(torch::ones({n, n}, torch::kBool).triu(1), -INFINITY);
  return torch::matmul(torch::softmax(s, -1), v);
}

}  // namespace

class TestRouting : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(3); }

  void namedPatterns_data() {
    QTest::addColumn<QString>("spec");
    QTest::addColumn<int>("layers");
    QTest::addColumn<QString>("expected");
    QTest::newRow("bilayer-8") << "bilayer" << 8 << "T-D-T-D-T-D-T-T";
    QTest::newRow("bilayer-7") << "Bilayer" << 7 << "T-D-T-D-T-D-T";
    QTest::newRow("trilayer-8") << "trilayer" << 8 << "T-D-D-T-D-D-T-T";
    QTest::newRow("laterhalf-8") << "laterhalf" << 8 << "T-T-T-T-D-D-D-T";
    QTest::newRow("6-transformer-12") << "6-transformer" << 12 << "T-T-D-D-D-T-T-D-D-D-T-T";
    QTest::newRow("alternate-6") << "alternate" << 6 << "T-D-T-D-T-D";
    QTest::newRow("after-2-5") << "after-2" << 5 << "T-T-D-D-D";
    QTest::newRow("dtrnet-code-8") << "dtrnet-code" << 8 << "D-D-T-D-T-D-T-D";
    QTest::newRow("letters") << "tddt" << 4 << "T-D-D-T";
    QTest::newRow("letters-dashed") << "T-M-T-R" << 4 << "T-D-T-D";
    QTest::newRow("indices") << "[1, 3]" << 5 << "T-D-T-D-T";
    QTest::newRow("indices-bare") << "0,4" << 5 << "D-T-T-T-D";
  }
  void namedPatterns() {
    QFETCH(QString, spec);
    QFETCH(int, layers);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(pattern_string(parse_layer_pattern(spec.toStdString(), layers, "model.routed_layers"))),
             expected);
  }

  void referenceCodeListIsInverted() {
    // architectures.md 1.5: the 360M config lists [2, 4, ..., 30] and those become the DENSE layers.
    const auto routed = parse_layer_pattern("dtrnet-code", 32, "k");
    QCOMPARE(std::count(routed.begin(), routed.end(), true), 17L);
    QVERIFY(routed[0] && routed[1] && routed[31] && !routed[2] && !routed[30]);
  }

  void badPatterns_data() {
    QTest::addColumn<QString>("spec");
    QTest::addColumn<QString>("fragment");
    QTest::newRow("length") << "T-D-T" << "names 3 layers but model.n_layer is 4";
    QTest::newRow("range") << "1,7" << "names layer 7 of a 4-layer model";
    QTest::newRow("garbage") << "every-other" << "is not a layer pattern";
    QTest::newRow("empty") << "" << "is not a layer pattern";
  }
  void badPatterns() {
    QFETCH(QString, spec);
    QFETCH(QString, fragment);
    try {
      parse_layer_pattern(spec.toStdString(), 4, "model.routed_layers");
      QFAIL("no error");
    } catch (const ConfigError& e) {
      const QString message = e.what();
      QVERIFY2(message.startsWith("model.routed_layers: "), qPrintable(message));
      QVERIFY2(message.contains(fragment), qPrintable(message));
    }
  }

  void compactionKeepsOrder() {
    const auto decision = torch::tensor({0, 1, 1, 0, 1, 0, 0, 0, 1, 0}, torch::kBool).view({2, 5});
    const auto c = compact(decision);
    QCOMPARE(c.lengths, (std::vector<std::int64_t>{3, 1}));
    QCOMPARE(c.max_len, std::int64_t(3));
    QCOMPARE(c.total, std::int64_t(4));
    QCOMPARE(c.sum_sq, 10.0);
    QVERIFY(torch::equal(c.index[0], torch::tensor({1, 2, 4}, torch::kLong)));
    QCOMPARE(c.index[1][0].item<std::int64_t>(), std::int64_t(3));
    QVERIFY(torch::equal(c.valid, torch::tensor({1, 1, 1, 1, 0, 0}, torch::kBool).view({2, 3})));
    // The real rows among the B K padded ones, and their places among the B T: sequence 1's token 3 is row 5 + 3.
    QVERIFY(torch::equal(c.real, torch::tensor({0, 1, 2, 3}, torch::kLong)));
    QVERIFY(torch::equal(c.real_flat, torch::tensor({1, 2, 4, 8}, torch::kLong)));

    const auto x = torch::randn({2, 5, 4});
    const auto rows = gather_rows(x, c);
    QVERIFY(torch::equal(rows[0][2], x[0][4]));
    // Scatter replaces exactly the routed rows; padding rows are dropped.
    const auto replaced = scatter_rows(x, c, torch::full({2, 3, 4}, 7.0));
    QCOMPARE(replaced.eq(7.0).all(-1).sum().item<std::int64_t>(), std::int64_t(4));
    QVERIFY(torch::equal(replaced[0][0], x[0][0]));
    QVERIFY(torch::equal(replaced[1][4], x[1][4]));
    QVERIFY(replaced[0][4].eq(7.0).all().item<bool>());
  }

  void packedCompactionEqualsCompact() {
    // compact_packed's rows, lengths and positions are compact()'s, for any share routed (none and all included).
    torch::manual_seed(5);
    for (const double share : {0.0, 0.1, 0.5, 1.0}) {
      const auto decision = torch::rand({3, 37}).lt(share);
      const auto exact = compact(decision, 1);
      const auto c = compact_packed(decision);
      QCOMPARE(c.lengths, exact.lengths);
      QCOMPARE(c.max_len, exact.max_len);
      QCOMPARE(c.total, exact.total);
      QCOMPARE(c.sum_sq, exact.sum_sq);
      QCOMPARE(c.seq_len, exact.seq_len);
      QVERIFY(torch::equal(c.real_flat, exact.real_flat));
      // compact()'s (B, K) rows without its padding rows
      const auto real = [&](const torch::Tensor& rows) {
        return exact.real.defined() ? rows.index_select(0, exact.real) : rows;
      };
      const auto x = torch::randn({3, 37, 4});
      QVERIFY(torch::equal(gather_packed(x, c), real(gather_rows(x, exact).reshape({-1, 4}))));
      QVERIFY(torch::equal(scatter_packed(x, c, gather_packed(x, c) * 2),
                           scatter_rows(x, exact, gather_rows(x, exact) * 2)));
      const auto shared = torch::arange(37) + 3;  // positions shared (T), and per sequence (B, T)
      const auto per_sequence = torch::randint(0, 100, {3, 37});
      for (const auto& p : {shared, per_sequence})
        QVERIFY(torch::equal(packed_positions(p, c), real(compacted_positions(p, exact).reshape({-1}))));
    }
  }

  void sizedCompactionIsThePackedOneWithPadding() {
    // compact_sized(d, capacity): compact_packed's rows first, then unrouted rows up to the capacity, the runs that
    // attend them covering every row, the counts on the device; scatter_packed writes the routed rows only (a NaN
    // in a padding row reaches neither the output nor a gradient). Too small a capacity keeps the first rows and
    // says it overflowed.
    torch::manual_seed(6);
    const std::int64_t B = 3, T = 37;
    for (const double share : {0.0, 0.1, 0.5, 1.0}) {
      const auto decision = torch::rand({B, T}).lt(share);
      const auto exact = compact_packed(decision);
      for (const std::int64_t capacity : {exact.total / 2, exact.total, exact.total + 1, exact.total + 40, B * T}) {
        const auto label = QString("share %1, capacity %2 for %3 routed").arg(share).arg(capacity).arg(exact.total);
        const auto c = compact_sized(decision, sized_rows(capacity, B * T, decision.device()));
        const auto fits = std::clamp<std::int64_t>(capacity, 1, B * T);
        QCOMPARE(c.capacity, fits);
        QCOMPARE(c.real_flat.size(0), fits);
        QVERIFY(c.lengths.empty() && c.total == 0);  // nothing read back
        const auto counts = c.counts.to(torch::kLong);
        QCOMPARE(std::vector<std::int64_t>(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + B),
                 exact.lengths);
        QCOMPARE(sized_overflow(exact.lengths, fits), exact.total > fits);
        const auto used = std::min(exact.total, fits);
        QCOMPARE(c.row_valid.sum().item<std::int64_t>(), used);
        QVERIFY2(torch::equal(c.real_flat.narrow(0, 0, used), exact.real_flat.narrow(0, 0, used)), qPrintable(label));
        QVERIFY2(std::get<0>(c.real_flat.sort()).diff().gt(0).all().item<bool>(), qPrintable(label));  // rows once
        const auto starts = c.starts.to(torch::kLong);
        QCOMPARE(starts.size(0), B + 1 + kPaddingRuns);
        QCOMPARE(starts[-1].item<std::int64_t>(), fits);
        QVERIFY(starts.diff().ge(0).all().item<bool>());
        QVERIFY(starts.diff().max().item<std::int64_t>() <= c.longest);
        if (exact.total <= fits) {
          const auto runs = sized_runs(exact.lengths, fits);
          const auto diffs = starts.diff().contiguous();
          const auto* d = diffs.data_ptr<std::int64_t>();
          QCOMPARE(std::vector<std::int64_t>(d, d + diffs.numel()), runs);
        }
        // Written back: the routed rows that fit take the new rows; every other row keeps x (padding rows hold NaN).
        const auto x = torch::randn({B, T, 4}, torch::requires_grad());
        const auto rows = torch::where(c.row_valid, gather_packed(x, c) * 2,
                                       torch::full({fits, 4}, std::numeric_limits<float>::quiet_NaN()));
        const auto y = scatter_packed(x, c, rows);
        QVERIFY(!y.isnan().any().item<bool>());
        const auto doubled = torch::zeros({B * T}, torch::kBool).index_fill(0, c.real_flat.narrow(0, 0, used), true);
        const auto expected = torch::where(doubled.view({B, T, 1}), x * 2, x);
        QVERIFY2(torch::equal(y, expected), qPrintable(label));
        y.sum().backward();
        QVERIFY(torch::equal(x.grad(), torch::where(doubled.view({B, T, 1}), 2.0, 1.0).expand({B, T, 4})));
      }
    }
  }

  void paddedSizedCompactionIsCompactsWithPadding() {
    // compact_sized_padded(d, len): compact()'s (B, len) index (the routed positions, then unrouted ones), valid on the
    // routed rows, counts on the device; scatter_rows and add_rows change the routed rows that fit and nothing else (a
    // NaN in a padding row reaches neither). A sequence with more routed tokens than len overflows.
    torch::manual_seed(8);
    const std::int64_t B = 3, T = 29;
    const auto decision = torch::rand({B, T}).lt(0.4);
    const auto exact = compact(decision, 1);
    for (const std::int64_t len : {exact.max_len, exact.max_len + 5, exact.max_len - 2}) {
      const auto c = compact_sized_padded(decision, len);
      QCOMPARE(c.max_len, len);
      QVERIFY(c.padded_sized && c.lengths.empty());
      QCOMPARE(sized_overflow_per_sequence(exact.lengths, len), len < exact.max_len);
      const auto fits = std::min(len, exact.max_len);
      QVERIFY(torch::equal(c.index.narrow(1, 0, fits), exact.index.narrow(1, 0, fits)));
      QVERIFY(torch::equal(c.valid, torch::arange(len).unsqueeze(0) < c.counts.unsqueeze(1)));
      const auto x = torch::randn({B, T, 4}, torch::requires_grad());
      const auto rows = torch::where(c.valid.unsqueeze(-1), torch::ones({B, len, 4}),
                                     torch::full({B, len, 4}, std::numeric_limits<float>::quiet_NaN()));
      const auto hit = torch::zeros({B * T}, torch::kBool)
                           .index_fill(0, c.flat.masked_select(c.valid.reshape({-1})), true)
                           .view({B, T, 1});
      QVERIFY(torch::equal(scatter_rows(x, c, rows), torch::where(hit, torch::ones_like(x), x)));
      const auto added = add_rows(x, c, rows);
      QVERIFY(torch::equal(added, torch::where(hit, x + 1, x)));
      added.sum().backward();
      QVERIFY(torch::equal(x.grad(), torch::ones_like(x)));
    }
  }

  void nextCapacityKeepsShapesRecurring() {
    // From nothing: the routed rows plus 1/16 and 32, to a multiple of 64, at most the tokens.
    QCOMPARE(next_capacity(1000, 0, 16384), std::int64_t(1152));  // 1000 + 62 + 32 = 1094 -> 1152
    QCOMPARE(next_capacity(0, 0, 16384), std::int64_t(64));
    QCOMPARE(next_capacity(16000, 0, 16384), std::int64_t(16384));
    // Kept while the rows stay between 3/4 of it and its margin; sized afresh outside.
    QCOMPARE(next_capacity(1050, 1152, 16384), std::int64_t(1152));
    QCOMPARE(next_capacity(800, 1152, 16384), std::int64_t(1152));  // wants 896 >= 3/4 of 1152
    QCOMPARE(next_capacity(700, 1152, 16384), std::int64_t(832));   // wants 832 < 864
    QCOMPARE(next_capacity(1100, 1152, 16384), std::int64_t(1216));  // wants 1216 > 1152
    QCOMPARE(next_capacity(100, 20000, 16384), std::int64_t(192));  // another batch size's
  }

  void addRowsIsTheScatteredResidualSum() {
    // add_rows(x, c, u) = scatter_rows(x, c, gather_rows(x, c) + u) bit for bit, padded compactions (ragged lengths,
    // a bucket) and top-k ones alike; x's gradient passes through unchanged and u's real rows receive theirs, its
    // padding rows nothing.
    torch::manual_seed(9);
    const auto x = torch::randn({3, 37, 4}, torch::requires_grad());
    const auto scores = torch::randn({3, 37});
    for (const auto& c : {compact(torch::rand({3, 37}).lt(0.3), 8), topk_routing(scores, 5).compaction}) {
      const auto u = torch::randn({3, c.max_len, 4}, torch::requires_grad());
      const auto out = add_rows(x, c, u);
      QVERIFY(torch::equal(out, scatter_rows(x, c, gather_rows(x, c) + u)));
      const auto g = torch::randn_like(out);
      const auto [gx, gu] = [&] {
        const auto grads = torch::autograd::grad({out}, {x, u}, {g});
        return std::make_pair(grads[0], grads[1]);
      }();
      QVERIFY(torch::equal(gx, g));
      const auto valid = c.valid.unsqueeze(-1).to(torch::kFloat);
      QVERIFY(torch::equal(gu, gather_rows(g, c) * valid));
    }
  }

  void compactionBucketsPadOnly_data() {
    QTest::addColumn<int>("bucket");
    QTest::addColumn<int>("K");
    QTest::newRow("rounded up") << 4 << 4;  // the longest sequence has 3 routed tokens
    QTest::newRow("capped at T") << 64 << 5;
    QTest::newRow("already a multiple") << 3 << 3;
  }
  void compactionBucketsPadOnly() {
    QFETCH(int, bucket);
    QFETCH(int, K);
    const auto decision = torch::tensor({0, 1, 1, 0, 1, 0, 0, 0, 1, 0}, torch::kBool).view({2, 5});
    const auto exact = compact(decision, 1);
    const auto c = compact(decision, bucket);
    QCOMPARE(c.max_len, std::int64_t(K));
    QCOMPARE(c.index.size(1), std::int64_t(K));
    QCOMPARE(c.lengths, exact.lengths);  // the pricing inputs do not change
    QCOMPARE(c.sum_sq, exact.sum_sq);
    QVERIFY(torch::equal(c.valid.sum(1), exact.valid.sum(1)));
    QVERIFY(torch::equal(c.index.narrow(1, 0, 3).masked_select(exact.valid), exact.index.masked_select(exact.valid)));
    const auto x = torch::randn({2, 5, 4});
    const auto rows = gather_rows(x, c) * 2 + 1;  // any function of the rows, padding rows included
    QVERIFY(torch::equal(scatter_rows(x, c, rows), scatter_rows(x, exact, gather_rows(x, exact) * 2 + 1)));
  }

  void compactionGradients() {
    // Through gather and scatter: a routed row's gradient comes from the rows only, an unrouted one's from the base
    // only, and padding rows (their results dropped) receive none.
    const auto decision = torch::tensor({0, 1, 1, 0, 1, 0, 0, 0, 1, 0}, torch::kBool).view({2, 5});
    const auto c = compact(decision, 4);  // K 4: five padding rows
    const auto x = torch::randn({2, 5, 3}, torch::requires_grad());
    const auto rows = gather_rows(x, c);
    rows.retain_grad();
    scatter_rows(x * 3, c, rows * 2).sum().backward();
    const auto expected =
        torch::where(decision.unsqueeze(-1), torch::full({2, 5, 3}, 2.0), torch::full({2, 5, 3}, 3.0));
    QVERIFY(torch::equal(x.grad(), expected));
    QVERIFY(torch::equal(rows.grad(), c.valid.unsqueeze(-1).expand({2, 4, 3}).to(torch::kFloat) * 2));
  }

  void compactionOfNothing() {
    const auto c = compact(torch::zeros({3, 6}, torch::kBool));
    QCOMPARE(c.max_len, std::int64_t(0));
    QCOMPARE(c.total, std::int64_t(0));
    const auto x = torch::randn({3, 6, 2});
    QVERIFY(torch::equal(scatter_rows(x, c, gather_rows(x, c)), x));
  }

  void topkPerSequence() {
    const auto scores = torch::rand({4, 17});
    for (std::int64_t k : {0, 1, 5, 17, 30}) {
      const auto d = topk_decision(scores, k);
      QVERIFY(d.sum(1).eq(std::min<std::int64_t>(k, 17)).all().item<bool>());
      if (k > 0 && k < 17) {  // every selected score beats every unselected one
        const auto lowest_in = scores.masked_fill(d.logical_not(), 2.0).amin(1);
        const auto highest_out = scores.masked_fill(d, -1.0).amax(1);
        QVERIFY(lowest_in.gt(highest_out).all().item<bool>());
      }
    }
  }

  void topkRoutingCompactsLikeItsDecision() {
    // The sync-free compaction of expert-choice routing: the decision topk_decision takes and the index, validity
    // and lengths compact() builds from it without rounding, k tokens in every sequence.
    const auto scores = torch::rand({3, 11});
    for (std::int64_t k : {0, 1, 4, 11, 20}) {
      const auto r = topk_routing(scores, k);
      const auto decision = topk_decision(scores, k);
      const auto c = compact(decision, 1);
      QVERIFY(torch::equal(r.decision, decision));
      QCOMPARE(r.compaction.lengths, c.lengths);
      QCOMPARE(r.compaction.max_len, c.max_len);
      QCOMPARE(r.compaction.total, c.total);
      QCOMPARE(r.compaction.sum_sq, c.sum_sq);
      QCOMPARE(r.compaction.seq_len, c.seq_len);
      QVERIFY(torch::equal(r.compaction.index, c.index));
      QVERIFY(torch::equal(r.compaction.valid, c.valid));
      const auto x = torch::randn({3, 11, 2});
      QVERIFY(torch::equal(scatter_rows(x, r.compaction, gather_rows(x, r.compaction) * 3),
                           scatter_rows(x, c, gather_rows(x, c) * 3)));
    }
  }

  void varlenAttentionMatchesPerSequence_data() {
    QTest::addColumn<bool>("fp64");  // fp32 takes the CPU kernel, fp64 the padded fallback
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<int>("T");
    QTest::newRow("fp32") << false << 4 << 9;
    QTest::newRow("fp32-gqa") << false << 2 << 9;
    QTest::newRow("fp64-fallback") << true << 4 << 9;
    // Padded past one block: the CPU kernel's query blocks, with sequences of one, two and three blocks.
    QTest::newRow("fp32-blocks") << false << 2 << 600;
  }
  void varlenAttentionMatchesPerSequence() {
    QFETCH(bool, fp64);
    QFETCH(int, kvHeads);
    QFETCH(int, T);
    const auto dtype = fp64 ? torch::kDouble : torch::kFloat;
    const std::int64_t B = 3, H = 4, hd = 8;
    const std::vector<std::int64_t> lengths = T == 9 ? std::vector<std::int64_t>{9, 4, 0} : std::vector<std::int64_t>{600, 300, 129};
    const auto q = torch::randn({B, H, T, hd}, dtype).requires_grad_();
    const auto k = torch::randn({B, kvHeads, T, hd}, dtype).requires_grad_();
    const auto v = torch::randn({B, kvHeads, T, hd}, dtype).requires_grad_();
    const auto grad = torch::randn({B, H, T, hd}, dtype);
    const auto out = causal_attention(q, k, v, 0.0, false, lengths);
    (out * grad).sum().backward();
    const auto dq = q.grad().clone(), dk = k.grad().clone(), dv = v.grad().clone();
    const double tol = fp64 ? 1e-10 : 1e-5;
    for (std::int64_t b = 0; b < B; ++b) {
      const auto n = lengths[b];
      QVERIFY(out[b].narrow(1, n, T - n).abs().sum().item<double>() == 0.0);  // padding rows are zero
      QVERIFY(dk[b].narrow(1, n, T - n).abs().sum().item<double>() == 0.0);   // padding keys are never read
      if (n == 0) continue;
      const auto qb = q[b].detach().narrow(1, 0, n).requires_grad_();
      const auto kb = k[b].detach().narrow(1, 0, n).requires_grad_();
      const auto vb = v[b].detach().narrow(1, 0, n).requires_grad_();
      const auto rep = H / kvHeads;
      const auto ref = naive_prefix_attention(qb, kb.repeat_interleave(rep, 0), vb.repeat_interleave(rep, 0));
      (ref * grad[b].narrow(1, 0, n)).sum().backward();
      QVERIFY(torch::allclose(out[b].narrow(1, 0, n), ref, tol, tol));
      QVERIFY(torch::allclose(dq[b].narrow(1, 0, n), qb.grad(), tol, tol));
      QVERIFY(torch::allclose(dk[b].narrow(1, 0, n), kb.grad(), tol, tol));
      QVERIFY(torch::allclose(dv[b].narrow(1, 0, n), vb.grad(), tol, tol));
    }
  }

  void varlenPackingFollowsCumulativeLengths() {
    // What a GPU's varlen flash attention receives and returns (it runs on CUDA only): the real rows packed one
    // sequence after another, cumulative lengths over the non-empty sequences, and the result put back. Attention run
    // segment by segment over the packed rows, then unpacked, equals the padded causal attention of the sequences.
    const std::int64_t B = 4, H = 4, Hkv = 2, K = 9, hd = 8;
    const std::vector<std::int64_t> lengths{9, 0, 4, 1};
    const auto packing = varlen_packing(lengths, K, torch::kCPU);
    QCOMPARE(packing.longest, std::int64_t{9});
    QVERIFY(torch::equal(packing.starts, torch::tensor({0, 9, 13, 14}, torch::kInt)));
    QCOMPARE(packing.rows.size(0), std::int64_t{14});
    const auto q = torch::randn({B, H, K, hd}), k = torch::randn({B, Hkv, K, hd}), v = torch::randn({B, Hkv, K, hd});
    const auto pq = pack_rows(q, packing), pk = pack_rows(k, packing), pv = pack_rows(v, packing);  // (14, heads, hd)
    QVERIFY(torch::equal(pq.narrow(0, 9, 4), q[2].narrow(1, 0, 4).transpose(0, 1)));  // sequence 2's rows, in order
    std::vector<torch::Tensor> segments;
    for (std::int64_t s = 0; s + 1 < packing.starts.size(0); ++s) {
      const auto from = packing.starts[s].item<std::int64_t>(), n = packing.starts[s + 1].item<std::int64_t>() - from;
      const auto part = [&](const torch::Tensor& x) { return x.narrow(0, from, n).transpose(0, 1).unsqueeze(0); };
      segments.push_back(causal_attention(part(pq), part(pk), part(pv)).squeeze(0).transpose(0, 1));  // (n, H, hd)
    }
    const auto out = unpack_rows(torch::cat(segments), packing);  // (B, H, K, hd)
    QVERIFY(torch::allclose(out, causal_attention(q, k, v, 0.0, false, lengths), 1e-5, 1e-5));
    QCOMPARE(out[1].abs().sum().item<double>(), 0.0);  // the empty sequence
    QVERIFY(!varlen_attention_active(torch::kCPU, torch::kBFloat16, hd));  // the CPU never takes the GPU kernel
  }
};

}  // namespace test_routing

ROUTELAB_TEST_SUITE(test_routing, TestRouting)
#include "test_routing.moc"
