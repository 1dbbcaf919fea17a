// Zero-shot text as the lm-evaluation-harness reads it: documents scored in its rolling windows after the tokenizer's
// prefix token, an empty context fed that token, words split at Python's whitespace, WikiText pages detokenized and
// HellaSwag's tags cleaned as its Python code does. The expected windows and texts are what lm_eval 0.4.13's own
// functions returned for the same input.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "core/analysis/zero_shot.h"
#include "core/analysis/zero_shot_run.h"
#include "core/data/tokenizer.h"
#include "core/util/errors.h"
#include "tests/suite.h"
#include "tests/zero_shot_test_support.h"

namespace test_zero_shot_text {

using namespace routelab;
using namespace routelab::test::zero_shot;
using routelab::test::contains;
using routelab::test::error_of;

namespace {

/// Characters with a prefix token: the unknown id stands in for a beginning-of-sequence token (it is in the
/// vocabulary, and no text of the alphabet encodes to it).
class PrefixedChars final : public Tokenizer {
 public:
  std::string kind() const override { return "prefixed"; }
  std::int64_t vocab_size() const override { return chars_.vocab_size(); }
  std::vector<std::int64_t> encode(std::string_view text) const override { return chars_.encode(text); }
  std::string decode(const std::vector<std::int64_t>& ids) const override { return chars_.decode(ids); }
  std::int64_t prefix_id() const override { return chars_.unknown_id(); }
  std::string token_text(std::int64_t id) const override { return chars_.token_text(id); }
  nlohmann::json to_json() const override { return chars_.to_json(); }

 private:
  CharTokenizer chars_ = CharTokenizer::build(kAlphabet);
};

std::vector<RollingWindow> windows(std::initializer_list<RollingWindow> list) { return list; }

}  // namespace

class TestZeroShotText : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void rollingWindowsAreTheHarnesss() {
    // map(make_disjoint_window, get_rolling_token_windows(list(range(1, n)), 0, L, 1)), each window's fed and
    // scored ids as (first, end, scored) of ids 0..n-1: a whole window of context before the last, shorter one.
    QVERIFY(rolling_windows(10, 4) == windows({{0, 5, 4}, {4, 9, 4}, {5, 10, 1}}));
    QVERIFY(rolling_windows(9, 4) == windows({{0, 5, 4}, {4, 9, 4}}));
    QVERIFY(rolling_windows(6, 4) == windows({{0, 5, 4}, {1, 6, 1}}));
    QVERIFY(rolling_windows(5, 4) == windows({{0, 5, 4}}));
    QVERIFY(rolling_windows(2, 4) == windows({{0, 2, 1}}));
    QVERIFY(rolling_windows(52, 8) ==
            windows({{0, 9, 8}, {8, 17, 8}, {16, 25, 8}, {24, 33, 8}, {32, 41, 8}, {40, 49, 8}, {43, 52, 3}}));
    const auto ones = rolling_windows(13, 1);
    QCOMPARE(ones.size(), std::size_t{12});
    for (std::int64_t k = 0; k < 12; ++k) QVERIFY(ones[static_cast<std::size_t>(k)] == (RollingWindow{k, k + 2, 1}));
    QVERIFY(rolling_windows(1, 4).empty());
    QVERIFY(rolling_windows(0, 4).empty());
    QVERIFY_THROWS_EXCEPTION(ConfigError, rolling_windows(5, 0));
  }

  void documentsAreScoredInRollingWindows() {
    // Each window's log-likelihood is read off its own forward; the document's is their sum, its perplexities
    // divided by the document's words and bytes. Without a prefix token the first character is fed, not scored.
    QTemporaryDir dir;
    const CharTokenizer chars = CharTokenizer::build(kAlphabet);
    const PrefixedChars prefixed;
    auto model = small_dense(chars.vocab_size());
    const std::string doc = "the cat sat on the mat. the dog sat on the cat.  abc";  // 13 words, 52 bytes
    const auto task = read_task(TaskSpec{"w", write(dir, "w.txt", doc), ""});
    const auto ids = chars.encode(doc);
    ScoringOptions options;
    options.max_length = 8;
    for (const Tokenizer* tokenizer :
         {static_cast<const Tokenizer*>(&chars), static_cast<const Tokenizer*>(&prefixed)}) {
      auto fed = ids;
      if (tokenizer->prefix_id() >= 0) fed.insert(fed.begin(), tokenizer->prefix_id());
      const auto result = evaluate_task(*model, *tokenizer, task, options);
      const auto expected = rolling_windows(static_cast<std::int64_t>(fed.size()), 8);
      QCOMPARE(result.prefix_token, tokenizer->prefix_id());
      QCOMPARE(result.requests, static_cast<std::int64_t>(expected.size()));
      QCOMPARE(result.tokens, static_cast<std::int64_t>(fed.size()) - 1);
      const auto sample = result.sample_json(0, &task);
      QCOMPARE(sample.at("text").get<std::string>(), doc);
      QCOMPARE(sample.at("prefix_token").get<std::int64_t>(), tokenizer->prefix_id());
      double ll = 0;
      for (std::size_t w = 0; w < expected.size(); ++w) {
        const std::vector<std::int64_t> window(fed.begin() + expected[w].first, fed.begin() + expected[w].end);
        const auto direct = direct_ids_score(*model, window, expected[w].scored, 8).first;
        const auto& request = sample.at("requests")[w];
        QVERIFY2(std::abs(request.at("loglikelihood").get<double>() - direct) < 1e-3,
                 qPrintable(
                     QString("window %1: %2 vs %3").arg(w).arg(request.at("loglikelihood").get<double>()).arg(direct)));
        QCOMPARE(request.at("tokens").get<std::int64_t>(), expected[w].scored);
        QCOMPARE(request.at("fed").get<std::int64_t>(), expected[w].end - expected[w].first - 1);
        ll += direct;
      }
      QCOMPARE(sample.at("requests").back().at("fed").get<std::int64_t>(), std::int64_t{8});  // the last window too
      QVERIFY(std::abs(sample.at("loglikelihood").get<double>() - ll) < 1e-3);
      QVERIFY(std::abs(result.word_perplexity - std::exp(-sample.at("loglikelihood").get<double>() / 13)) <
              1e-9 * result.word_perplexity);
      QVERIFY(std::abs(result.byte_perplexity - std::exp(-sample.at("loglikelihood").get<double>() / 52)) <
              1e-9 * result.byte_perplexity);
      // One window: the direct log-likelihood of the document after the prefix token or its first character.
      options.max_length = 64;
      const auto one = evaluate_task(*model, *tokenizer, task, options);
      QCOMPARE(one.requests, std::int64_t{1});
      const auto whole = direct_ids_score(*model, fed, static_cast<std::int64_t>(fed.size()) - 1, 64).first;
      QVERIFY(std::abs(-one.bits_per_byte * std::log(2.0) * 52 - whole) < 1e-3);
      options.max_length = 8;
      // The table says when the first token went unscored, and the stored result keeps the prefix token.
      ZeroShotReport report;
      report.tasks = {result};
      QCOMPARE(contains(report.to_table(), "w: each document's first token fed, not scored"),
               tokenizer->prefix_id() < 0);
      QCOMPARE(TaskResult::from_json(result.to_json(), "stored").prefix_token, tokenizer->prefix_id());
    }
  }

  void emptyContextsFeedThePrefixToken() {
    // The harness's empty context: its continuation's tokens after the prefix token, every one scored. A tokenizer
    // without one has nothing to predict the first token from; a context of whitespace alone is refused as well.
    const CharTokenizer chars = CharTokenizer::build(kAlphabet);
    const PrefixedChars prefixed;
    auto model = small_dense(chars.vocab_size());
    ScoringOptions options;
    options.max_length = 16;
    const auto scores = score_requests(*model, prefixed, {{"", "the cat"}, {"the", " cat"}}, options);
    auto ids = chars.encode("the cat");
    ids.insert(ids.begin(), prefixed.prefix_id());
    QCOMPARE(scores[0].tokens, std::int64_t{7});
    QCOMPARE(scores[0].fed, std::int64_t{7});
    QVERIFY(std::abs(scores[0].loglikelihood - direct_ids_score(*model, ids, 7, 16).first) < 1e-4);
    QCOMPARE(scores[1].tokens, std::int64_t{4});  // a context of its own is fed as it is, without the prefix
    QVERIFY(std::abs(scores[1].loglikelihood - direct_score(*model, chars, "the", " cat", 16).first) < 1e-4);
    const auto none = error_of<DataError>([&] { score_requests(*model, chars, {{"", "the cat"}}, options); });
    QVERIFY2(contains(none, "has an empty context, and the char tokenizer has no beginning- or end-of-sequence token"),
             none.c_str());
    const auto blank = error_of<DataError>([&] { score_requests(*model, prefixed, {{" \n", "cat"}}, options); });
    QVERIFY2(contains(blank, "has a context of whitespace alone"), blank.c_str());
  }

  void wikiTextIsDetokenizedAsTheHarnessDoes() {
    // A WikiText page (wikitext_document_level's "page") is scored detokenized, and its perplexities divide by the
    // words and bytes of the page as published.
    QTemporaryDir dir;
    const auto read_page = [&](const std::string& page) {
      return read_task(TaskSpec{"wikitext", write(dir, "wiki.jsonl", nlohmann::json{{"page", page}}.dump()), ""});
    };
    const std::string page =
        " = Valkyria Chronicles III = \n Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場の ) , is a 2011 "
        "game . It sold 1 @,@ 000 @.@ 5 units ; the 7 @-@ 8 \" best \" of N players ' s ' thing [ 1 ] at 40 ° C ! "
        "Why ? = = Plot = = \n";
    const std::string detokenized =
        " = Valkyria Chronicles III =\nSenjō no Valkyria 3: Unrecorded Chronicles (Japanese: 戦場の), is a 2011 game. "
        "It sold 1,000.5 units; the 7-8 \"best\" of 1 players's' thing [1] at 40°C! Why? == Plot ==\n";
    const auto task = read_page(page);
    QCOMPARE(task.format, std::string("text"));
    QCOMPARE(task.examples[0].requests[0].continuation, detokenized);
    QCOMPARE(task.examples[0].words, 63.0);  // len(re.split(r"\s+", page))
    QCOMPARE(task.examples[0].bytes, 237.0);
    // Python's whitespace is Unicode's: no-break and thin spaces, U+3000, U+2028, \x1c split words and are stripped
    // inside brackets and quotes.
    const auto unicode = read_page(
        " = Ti\u00a0tle = \n A ( \u3000 x\u00a0) b\u2009\u2009c \" q\u00a0\" \x1c"
        "d [ \n y ] e\u2028f { z }\u202f");
    QCOMPARE(unicode.examples[0].requests[0].continuation,
             std::string(" = Ti\u00a0tle =\nA (x) b\u2009\u2009c \"q\" \x1c"
                         "d [y] e\u2028f {z}\u202f"));
    QCOMPARE(unicode.examples[0].words, 24.0);
    // re.sub(r"/' [0-9]/", r"/'[0-9]/", s) writes its pattern's text itself.
    QCOMPARE(read_page("a /' 5/ b /' x/ /' 7//' 8/").examples[0].requests[0].continuation,
             std::string("a /'[0-9]/ b /' x/ /'[0-9]//'[0-9]/"));
    QCOMPARE(unicode.examples[0].bytes, 69.0);
    // 240,000 characters between two quotes: Python's re strips them; std::regex's recursive matcher overflowed the
    // stack on such a span.
    std::string span, unclosed;
    for (int i = 0; i < 60000; ++i) span += "a b ";
    for (int i = 0; i < 1000; ++i) unclosed += " y";
    const auto long_page = read_page("It ' s " + span + "' end ( x" + unclosed);
    const auto& text = long_page.examples[0].requests[0].continuation;
    QCOMPARE(text.size(), std::size_t{242013});
    QCOMPARE(text.substr(0, 12), std::string("It's a b a b"));
    QCOMPARE(text.substr(text.size() - 2000 - 15, 15), std::string(" b a b' end ( x"));  // no ')' after the last '('
  }

  void hellaSwagTagsAreCleanedAsTheHarnessDoes() {
    // preprocess(): the text stripped (of Unicode whitespace too), " [title]" made a sentence end, each "[...]" tag
    // without a newline in it dropped, double spaces made one.
    QTemporaryDir dir;
    const nlohmann::json row = {{"activity_label", "Home [step]"},
                                {"ctx_a", "\u3000How to [step] cut [a\nb] x"},
                                {"ctx_b", "[y] done\u00a0"},
                                {"endings", {"[header] one [title] two.\u00a0", " three [x"}},
                                {"label", 0}};
    const auto task = read_task(TaskSpec{"h", write(dir, "h.jsonl", row.dump()), "hellaswag"});
    QCOMPARE(task.examples[0].requests[0].context, std::string("Home : \u3000How to cut [a\nb] x done"));
    QCOMPARE(task.examples[0].requests[0].continuation, std::string("  one. two."));
    QCOMPARE(task.examples[0].requests[1].continuation, std::string(" three [x"));
  }
};

}  // namespace test_zero_shot_text

ROUTELAB_TEST_SUITE(test_zero_shot_text, TestZeroShotText)
#include "test_zero_shot_text.moc"
