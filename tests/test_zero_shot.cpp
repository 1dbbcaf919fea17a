// Zero-shot tasks: each published format made into the lm-evaluation-harness's prompts and choices, bad files named
// with their line and key, scores equal to the model's own log-probabilities (cut from the left, in batches or alone,
// for every language model), the measures taken from them, and the results kept with a stored run.
#include <QTemporaryDir>
#include <QtTest>
#include <array>
#include <cmath>
#include <fstream>

#include "core/analysis/zero_shot.h"
#include "core/analysis/zero_shot_compare.h"
#include "core/analysis/zero_shot_run.h"
#include "core/config/experiment_config.h"
#include "core/data/tokenizer.h"
#include "core/models/registry.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "core/util/python_random.h"
#include "tests/conformance_support.h"
#include "tests/suite.h"
#include "tests/zero_shot_test_support.h"

namespace test_zero_shot {

using namespace routelab;
using routelab::test::conformance::add_language_model_rows;
using routelab::test::conformance::small_model;
using namespace routelab::test::zero_shot;

namespace {

/// The error's message, or "" when `fn` throws nothing.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestZeroShot : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void formatsBecomeTheHarnessPrompts() {
    QTemporaryDir dir;
    const auto read = [&](const std::string& name, const std::string& text, const std::string& format = "") {
      return read_task(TaskSpec{"t", write(dir, name, text), format});
    };
    const auto piqa = read("piqa.jsonl", R"({"goal": "Open a jar", "sol1": "twist it", "sol2": "eat it", "label": 0})"
                                         "\n\n"
                                         R"({"goal": "G", "sol1": "a", "sol2": "bb", "label": 1})"
                                         "\n");
    QCOMPARE(piqa.format, std::string("piqa"));
    QCOMPARE(piqa.examples.size(), std::size_t{2});  // the blank line is skipped
    QCOMPARE(piqa.examples[0].requests[0].context, std::string("Question: Open a jar\nAnswer:"));
    QCOMPARE(piqa.examples[0].requests[1].continuation, std::string(" eat it"));
    QCOMPARE(piqa.examples[1].label, std::int64_t{1});
    QCOMPARE(piqa.examples[1].lengths, (std::vector<double>{1, 2}));  // characters of the choice alone
    const auto arc =
        read("arc.jsonl",
             R"({"question": "Q?", "choices": {"text": ["x", "y", "z"], "label": ["1", "2", "3"]}, "answerKey": "3"})");
    QCOMPARE(arc.format, std::string("arc"));
    QCOMPARE(arc.examples[0].label, std::int64_t{2});
    QCOMPARE(arc.examples[0].requests[2].continuation, std::string(" z"));
    const auto hella = read(
        "h.jsonl",
        R"({"activity_label": "Cooking", "ctx_a": "She cuts  onions.", "ctx_b": "tHE pan [header] is", "endings": ["hot [title] Yes", "cold"], "label": "1"})");
    QCOMPARE(hella.examples[0].requests[0].context, std::string("Cooking: She cuts onions. The pan is"));
    QCOMPARE(hella.examples[0].requests[0].continuation, std::string(" hot. Yes"));
    QCOMPARE(hella.examples[0].label, std::int64_t{1});
    const auto wino = read(
        "w.jsonl",
        R"({"sentence": "Ann gave Bo a gift because _ was kind.", "option1": "Ann", "option2": "Bo", "answer": "2"})");
    QCOMPARE(wino.examples[0].requests[1].context, std::string("Ann gave Bo a gift because Bo"));
    QCOMPARE(wino.examples[0].requests[0].continuation, std::string(" was kind."));
    QCOMPARE(wino.examples[0].requests[1].continuation, std::string(" was kind."));
    QCOMPARE(wino.examples[0].label, std::int64_t{1});
    const auto boolq = read("b.jsonl", R"({"question": "is it", "passage": "P.", "answer": true})"
                                       "\n"
                                       R"({"question": "is it", "passage": "P.", "label": 0, "idx": 4})");
    QCOMPARE(boolq.examples[0].requests[1].context, std::string("P.\nQuestion: is it?\nAnswer:"));
    QCOMPARE(boolq.examples[0].requests[1].continuation, std::string(" yes"));
    QCOMPARE(boolq.examples[0].label, std::int64_t{1});
    QCOMPARE(boolq.examples[1].label, std::int64_t{0});
    const auto mmlu = read(
        "m.jsonl",
        R"({"question": " What? ", "subject": "high_school_physics", "choices": ["1", "2", "3", "4"], "answer": "C"})");
    QCOMPARE(mmlu.format, std::string("mmlu"));
    QCOMPARE(mmlu.examples[0].requests[0].context,
             std::string("The following are multiple choice questions (with answers) about high school physics.\n\n"
                         "What?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:"));
    QCOMPARE(mmlu.examples[0].requests[3].continuation, std::string(" D"));
    QCOMPARE(mmlu.examples[0].label, std::int64_t{2});
    const auto lambada = read("l.jsonl", R"({"text": "the cat sat on the mat"})");
    QCOMPARE(lambada.kind, TaskKind::Cloze);
    QCOMPARE(lambada.examples[0].requests[0].context, std::string("the cat sat on the"));
    QCOMPARE(lambada.examples[0].requests[0].continuation, std::string(" mat"));
    const auto pages = read("wiki.jsonl", R"({"page": "A page."})"
                                          "\n"
                                          R"({"page": "Another."})");
    QCOMPARE(pages.kind, TaskKind::Perplexity);
    QCOMPARE(pages.examples.size(), std::size_t{2});
    QCOMPARE(read("doc.txt", "one document\nof two lines").examples[0].requests[0].continuation,
             std::string("one document\nof two lines"));
    const auto named = read("l2.jsonl", R"({"text": "a whole document"})", "text");  // JSON Lines of documents
    QCOMPARE(named.kind, TaskKind::Perplexity);
    QCOMPARE(named.examples[0].requests[0].continuation, std::string("a whole document"));
    const auto generic = read("g.jsonl", R"({"query": "2+2=", "choices": ["4", "5"], "gold": 0})");
    QCOMPARE(generic.format, std::string("generic"));
    QCOMPARE(generic.examples[0].requests[0].continuation, std::string("4"));  // the choices as written
    QCOMPARE(
        read_task(
            TaskSpec{"t", write(dir, "lim.jsonl", std::string(R"({"text": "a b"})") + "\n" + R"({"text": "c d"})"), ""},
            1)
            .examples.size(),
        std::size_t{1});
    const auto spec = parse_task_spec("arc_easy=data/ARC-Easy-Test.jsonl:arc");
    QCOMPARE(spec.name, std::string("arc_easy"));
    QCOMPARE(spec.path, std::string("data/ARC-Easy-Test.jsonl"));
    QCOMPARE(spec.format, std::string("arc"));
    QCOMPARE(parse_task_spec("C:/x/piqa.jsonl").name, std::string("piqa"));  // a colon that names no format stays
    QCOMPARE(parse_task_spec("C:/x/piqa.jsonl").path, std::string("C:/x/piqa.jsonl"));
  }

  void tinyMmluRowsCarryTheirPrompt() {
    QTemporaryDir dir;
    // tinyMMLU's rows carry their prompt formatted.
    const auto tiny =
        read_task(TaskSpec{"t",
                           write(dir, "tiny.jsonl",
                                 nlohmann::json{{"question", "q"},
                                                {"choices", {"1", "2", "3", "4"}},
                                                {"answer", 3},
                                                {"input_formatted", "Intro.\n\nq\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:"}}
                                     .dump()),
                           ""});
    QCOMPARE(tiny.format, std::string("mmlu"));
    QCOMPARE(tiny.examples[0].requests[0].context, std::string("Intro.\n\nq\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:"));
    QCOMPARE(tiny.examples[0].requests[3].continuation, std::string(" D"));
    QCOMPARE(tiny.examples[0].label, std::int64_t{3});
  }

  void badTaskFilesNameTheFileLineAndKey() {
    QTemporaryDir dir;
    const auto fails = [&](const std::string& text, const std::string& expected, const std::string& format = "") {
      const auto path = write(dir, "bad.jsonl", text);
      const auto message = error_of([&] { read_task(TaskSpec{"bad", path, format}); });
      QVERIFY2(message.find(expected) != std::string::npos, message.c_str());
      QVERIFY2(message.find("bad.jsonl") != std::string::npos, message.c_str());
    };
    fails(R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 2})", "bad.jsonl:1: key 'label': 2 is not the index");
    fails(std::string(R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 0})") + "\n{oops", "bad.jsonl:2: not JSON");
    fails(R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 0})"
          "\n"
          R"({"goal": "g", "sol1": "a", "label": 0})",
          "bad.jsonl:2: key 'sol2' is missing");
    fails(R"({"goal": 3, "sol1": "a", "sol2": "b", "label": 0})", "key 'goal' is not a string");
    fails(R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})", "has no blank");
    fails(R"({"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"})", "'B' is not among");
    fails(R"({"x": 1})", "match no task format");
    fails("", "no examples");
    fails("[1, 2]", "not a JSON object");
    fails(R"({"text": "oneword"})", "no last word");
    const auto unknown = error_of([&] { read_task(TaskSpec{"t", write(dir, "u.jsonl", "{}"), "squad"}); });
    QVERIFY2(unknown.find("unknown task format 'squad'") != std::string::npos, unknown.c_str());
    const auto missing = error_of([&] { read_task(TaskSpec{"t", dir.filePath("none.jsonl").toStdString(), ""}); });
    QVERIFY2(missing.find("none.jsonl: cannot read") != std::string::npos, missing.c_str());
    QVERIFY_THROWS_EXCEPTION(ConfigError, parse_task_spec("=x.jsonl"));
    const auto typo = error_of([] { parse_task_spec("piqa.jsonl:piqq"); });
    QVERIFY2(typo.find("--task piqa.jsonl:piqq: unknown task format 'piqq'") != std::string::npos, typo.c_str());
    QVERIFY_THROWS_EXCEPTION(ConfigError, parse_task_spec("name="));
  }

  void scoresAreTheModelsOwnLogProbabilities() {
    // A choice's score is the summed log-probability of its tokens after the context's, read off the same forward
    // a direct computation makes; a context longer than max_length is cut from the left; greedy says whether every
    // token was the most likely one; an empty context is refused.
    const auto tokenizer = CharTokenizer::build(kAlphabet);
    auto model = small_dense(tokenizer.vocab_size());
    const std::vector<TaskRequest> requests = {{"the cat sat on the", " mat"},
                                               {"a ", "b"},  // the context's space moves to the continuation
                                               {"abcdefghij klmnopqrst abcdefghij klmnopqrst", " abc."},
                                               {"q", "rst"}};
    ScoringOptions options;
    options.max_length = 24;
    options.batch_size = 3;
    auto expected = requests;
    expected[1] = {"a", " b"};
    const auto scores = score_requests(*model, tokenizer, requests, options);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const auto [ll, greedy] = direct_score(*model, tokenizer, expected[i].context, expected[i].continuation, 24);
      QVERIFY2(std::abs(scores[i].loglikelihood - ll) < 1e-4,
               qPrintable(QString("%1: %2 vs %3").arg(i).arg(scores[i].loglikelihood).arg(ll)));
      QCOMPARE(scores[i].greedy, greedy);
      QCOMPARE(scores[i].tokens, static_cast<std::int64_t>(expected[i].continuation.size()));  // a token a character
      QCOMPARE(scores[i].truncated, i == 2);
    }
    QVERIFY_THROWS_EXCEPTION(DataError, score_requests(*model, tokenizer, {{" ", "abc"}}, options));
    options.max_length = 0;
    QVERIFY_THROWS_EXCEPTION(ConfigError, score_requests(*model, tokenizer, requests, options));
  }

  void batchedScoresEqualScoresAlone_data() { add_language_model_rows(); }
  void batchedScoresEqualScoresAlone() {
    // Requests of different lengths padded into one batch score as they do alone: a causal model's real positions
    // read nothing of the padding after them or of the other rows (routing included, half the tokens routed where
    // the architecture can be made to).
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const auto tokenizer = CharTokenizer::build(kAlphabet);
    torch::manual_seed(9);
    auto lm = create_model(small_model(entry), {tokenizer.vocab_size(), 32});
    lm->eval();
    if (entry.force_routed_share)
      entry.force_routed_share(*lm, torch::randint(0, tokenizer.vocab_size(), {2, 24}, torch::kLong), 0.5);
    const std::vector<TaskRequest> requests = {{"the cat sat on the", " mat."},
                                               {"a b", " c"},
                                               {"pqrst lmno abcdefghij", " klm"},
                                               {"the dog", " sat on the mat"},
                                               {"rst", " abc defg"}};
    ScoringOptions options;
    options.max_length = 24;
    options.batch_size = 8;
    const auto batched = score_requests(*lm, tokenizer, requests, options);
    options.batch_size = 1;
    const auto alone = score_requests(*lm, tokenizer, requests, options);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      QVERIFY2(std::abs(batched[i].loglikelihood - alone[i].loglikelihood) < 1e-3,
               qPrintable(QString("request %1: %2 batched, %3 alone")
                              .arg(i)
                              .arg(batched[i].loglikelihood)
                              .arg(alone[i].loglikelihood)));
      QVERIFY(std::isfinite(alone[i].loglikelihood) && alone[i].loglikelihood < 0);
    }
  }

  void measuresFollowFromTheScores() {
    // acc: the right choice scores highest; acc_norm: highest per character of the choice; stderr sqrt(p(1-p)/(n-1));
    // cloze: greedy answers and exp(-mean log-likelihood). (Perplexity: test_zero_shot_text.)
    QTemporaryDir dir;
    const auto tokenizer = CharTokenizer::build(kAlphabet);
    auto model = small_dense(tokenizer.vocab_size());
    std::string lines;
    // One short and one long choice each: the long one's summed log-likelihood is far lower, its mean per
    // character often higher, so acc and acc_norm pick differently.
    const std::vector<std::vector<std::string>> rows = {
        {"the cat", "s", "sat on the mat."}, {"the dog", "ran after the cat.", "r"}, {"a b c", "d", "e f g h i j k l"},
        {"pq", "rst abc def ghi", "r"},      {"lmno", "p", "pqrst lmno pqrst"},      {"the", "end of the dog.", "c"}};
    for (std::size_t i = 0; i < rows.size(); ++i)
      lines +=
          nlohmann::json{{"goal", rows[i][0]}, {"sol1", rows[i][1]}, {"sol2", rows[i][2]}, {"label", i % 2}}.dump() +
          "\n";
    const auto task = read_task(TaskSpec{"p", write(dir, "p.jsonl", lines), ""});
    ScoringOptions options;
    options.max_length = 32;
    const auto result = evaluate_task(*model, tokenizer, task, options);
    double right = 0, right_norm = 0;
    QCOMPARE(result.samples.size(), task.examples.size());
    for (std::size_t e = 0; e < task.examples.size(); ++e) {
      const auto& example = task.examples[e];
      const auto s = score_requests(*model, tokenizer, example.requests, options);
      const int pred = s[1].loglikelihood > s[0].loglikelihood ? 1 : 0;
      const int pred_norm = s[1].loglikelihood / example.lengths[1] > s[0].loglikelihood / example.lengths[0] ? 1 : 0;
      right += pred == example.label;
      right_norm += pred_norm == example.label;
      // Each example as scored (tasks --samples): its choices' scores, prediction and label.
      const auto sample = result.sample_json(e, &task);
      QCOMPARE(sample.at("pred").get<int>(), pred);
      for (std::size_t c = 0; c < 2; ++c) {  // the harness's arguments: each request's text
        QCOMPARE(sample.at("requests")[c].at("context").get<std::string>(), example.requests[c].context);
        QCOMPARE(sample.at("requests")[c].at("continuation").get<std::string>(), example.requests[c].continuation);
      }
      QVERIFY(!result.sample_json(e).at("requests")[0].contains("context"));
      QCOMPARE(sample.at("pred_norm").get<int>(), pred_norm);
      QCOMPARE(sample.at("label").get<std::int64_t>(), example.label);
      QCOMPARE(sample.at("acc").get<int>(), pred == example.label ? 1 : 0);
      QCOMPARE(sample.at("requests").size(), std::size_t{2});
      for (std::size_t c = 0; c < 2; ++c)
        QVERIFY(std::abs(sample.at("requests")[c].at("loglikelihood").get<double>() - s[c].loglikelihood) < 1e-4);
    }
    QCOMPARE(result.examples, std::int64_t{6});
    QCOMPARE(result.requests, std::int64_t{12});
    QVERIFY(std::abs(result.acc - right / 6) < 1e-12);
    QVERIFY(std::abs(result.acc_norm - right_norm / 6) < 1e-12);
    QVERIFY(result.acc != result.acc_norm);  // the data tells the two apart
    QVERIFY(std::abs(result.acc_stderr - std::sqrt(result.acc * (1 - result.acc) / 5)) < 1e-12);
    QCOMPARE(result.flops_ratio, 1.0);

    // A choice of no tokens would score a certainty: refused, naming the file and the example.
    const auto empty = read_task(TaskSpec{
        "g", write(dir, "g.jsonl", nlohmann::json{{"context", "abc"}, {"choices", {"d", ""}}, {"label", 0}}.dump()),
        ""});
    const auto message = error_of([&] { evaluate_task(*model, tokenizer, empty, options); });
    QVERIFY2(message.find("g.jsonl: example 1 has a choice or answer of no tokens") != std::string::npos,
             message.c_str());

    const auto cloze =
        read_task(TaskSpec{"l", write(dir, "l.jsonl", "{\"text\": \"the cat sat\"}\n{\"text\": \"a b cd\"}"), ""});
    const auto cloze_result = evaluate_task(*model, tokenizer, cloze, options);
    const auto c0 = direct_score(*model, tokenizer, "the cat", " sat", 32),
               c1 = direct_score(*model, tokenizer, "a b", " cd", 32);
    QVERIFY(std::abs(cloze_result.perplexity - std::exp(-(c0.first + c1.first) / 2)) < 1e-3 * cloze_result.perplexity);
    QCOMPARE(cloze_result.acc, (c0.second + c1.second) / 2.0);
    QCOMPARE(cloze_result.sample_json(1).at("acc").get<int>(), c1.second ? 1 : 0);
    QVERIFY(std::abs(cloze_result.sample_json(1).at("loglikelihood").get<double>() - c1.first) < 1e-3);
    QVERIFY(std::isnan(cloze_result.acc_norm));
  }

  void pairedComparisonReadsTheDisagreements() {
    // 17 examples: 10 alike, 6 right for b only, 1 for a only. McNemar: 2 P(X <= 1), X ~ binomial(7, 1/2) = 16/128;
    // the interval: mean 5/17 of the differences, sd from their squares (7).
    std::vector<int> a(17, 0), b(17, 0);
    for (int i = 0; i < 5; ++i) a[i] = b[i] = 1;  // 0..4 right for both, 12..16 wrong for both
    for (int i = 5; i < 11; ++i) b[i] = 1;
    a[11] = 1;
    auto c = compare_paired(a, b);
    QCOMPARE(c.examples, std::int64_t{17});
    QCOMPARE(c.only_a, std::int64_t{1});
    QCOMPARE(c.only_b, std::int64_t{6});
    QVERIFY(std::abs(c.a - 6.0 / 17) < 1e-12 && std::abs(c.b - 11.0 / 17) < 1e-12);
    QVERIFY(std::abs(c.difference - 5.0 / 17) < 1e-12);
    QVERIFY(std::abs(c.p_value - 16.0 / 128) < 1e-12);
    const double half = 1.96 * std::sqrt((7 - 17 * (25.0 / 289)) / 16 / 17);
    QVERIFY(std::abs(c.ci_low - (5.0 / 17 - half)) < 1e-12 && std::abs(c.ci_high - (5.0 / 17 + half)) < 1e-12);
    QCOMPARE(compare_paired(a, a).p_value, 1.0);  // no disagreement
    QCOMPARE(compare_paired(a, a).ci_high, 0.0);
    // Large counts in logarithms: 30 against none is 2^-29; an even split is 1.
    std::vector<int> none(40, 0), thirty(40, 0), split(20000, 0), other(20000, 0);
    for (int i = 0; i < 30; ++i) thirty[i] = 1;
    QVERIFY(std::abs(compare_paired(none, thirty).p_value / std::ldexp(1.0, -29) - 1) < 1e-9);
    for (int i = 0; i < 10000; ++i) split[i] = 1, other[10000 + i] = 1;
    QVERIFY(std::abs(compare_paired(split, other).p_value - 1) < 1e-9);
    QVERIFY_THROWS_EXCEPTION(ConfigError, compare_paired(a, none));

    // Two reports: acc and acc_norm of the multiple-choice task, acc of the cloze one, by task name.
    const auto report = [](std::int64_t run, std::vector<std::array<std::int64_t, 3>> mc, std::vector<bool> greedy) {
      ZeroShotReport r;
      r.run_id = run;
      TaskResult choice;
      choice.name = "piqa";
      for (const auto& [label, pred, pred_norm] : mc) {
        ExampleScore s;
        s.label = label;
        s.pred = pred;
        s.pred_norm = pred_norm;
        choice.samples.push_back(s);
      }
      TaskResult cloze;
      cloze.name = "lambada";
      cloze.kind = TaskKind::Cloze;
      for (const bool g : greedy) {
        ExampleScore s;
        s.requests.push_back(RequestScore{-1.0, g, 2, false});
        cloze.samples.push_back(s);
      }
      r.tasks = {choice, cloze};
      return r;
    };
    const auto first = report(1, {{0, 0, 1}, {1, 0, 1}, {1, 1, 1}}, {true, false});
    const auto second = report(2, {{0, 0, 0}, {1, 1, 0}, {1, 1, 1}}, {true, true});
    const auto rows = compare_reports(first, second);
    QCOMPARE(rows.size(), std::size_t{3});
    QCOMPARE(rows[0].measure, std::string("acc"));
    QCOMPARE(rows[0].only_b, std::int64_t{1});  // example 1
    QCOMPARE(rows[1].measure, std::string("acc_norm"));
    QCOMPARE(rows[1].only_a, std::int64_t{1});  // example 1 again, the other way
    QCOMPARE(rows[1].only_b, std::int64_t{1});  // example 0
    QCOMPARE(rows[2].task, std::string("lambada"));
    QCOMPARE(rows[2].only_b, std::int64_t{1});
    QCOMPARE(rows[2].run_b, std::int64_t{2});
    QVERIFY(comparisons_table(rows).find("| piqa | acc | 1 0.6667 | 2 1.0000 | +0.3333") != std::string::npos);
    const auto shorter = report(3, {{0, 0, 0}}, {});
    QVERIFY_THROWS_EXCEPTION(ConfigError, compare_reports(first, shorter));

    // Three runs: the later ones against the first, or every pair in the order given.
    const auto third = report(4, {{0, 1, 1}, {1, 1, 1}, {1, 0, 0}}, {false, false});
    const auto firsts = compare_runs({first, second, third});
    QCOMPARE(firsts.size(), std::size_t{6});
    QCOMPARE(firsts[3].run_b, std::int64_t{4});
    QCOMPARE(firsts[3].run_a, std::int64_t{1});
    const auto every = compare_runs({first, second, third}, /*every_pair=*/true);
    QCOMPARE(every.size(), std::size_t{9});
    QCOMPARE(every[6].run_a, std::int64_t{2});
    QCOMPARE(every[6].run_b, std::int64_t{4});
    QCOMPARE(every[6].only_a, std::int64_t{2});  // examples 0 and 2 right for run 2 only
    QCOMPARE(every[6].only_b, std::int64_t{0});
    QVERIFY(compare_runs({first}, true).empty());

    // The examples behind the discordant counts: each right for one run only, with both runs' choices.
    const auto norm = disagreements(first, second, "piqa", "acc_norm");
    QCOMPARE(norm.size(), static_cast<std::size_t>(rows[1].only_a + rows[1].only_b));
    QCOMPARE(norm[0].example, std::int64_t{0});  // label 0: a chose 1, b chose 0
    QVERIFY(!norm[0].right_a);
    QCOMPARE(norm[0].pred_a, std::int64_t{1});
    QCOMPARE(norm[0].pred_b, std::int64_t{0});
    QCOMPARE(norm[1].example, std::int64_t{1});  // label 1: a chose 1, b chose 0
    QVERIFY(norm[1].right_a);
    QCOMPARE(norm[1].label, std::int64_t{1});
    const auto acc = disagreements(first, second, "piqa", "acc");
    QCOMPARE(acc.size(), std::size_t{1});
    QCOMPARE(acc[0].example, std::int64_t{1});
    const auto last_word = disagreements(first, second, "lambada", "acc");
    QCOMPARE(last_word.size(), std::size_t{1});
    QCOMPARE(last_word[0].example, std::int64_t{1});
    QCOMPARE(last_word[0].pred_a, std::int64_t{-1});  // cloze: right or wrong, no choice
    QVERIFY(!last_word[0].right_a);
    QVERIFY(disagreements(first, second, "lambada", "acc_norm").empty());
    QVERIFY(disagreements(first, second, "hellaswag", "acc").empty());
    QVERIFY(disagreements(first, first, "piqa", "acc").empty());
    QVERIFY_THROWS_EXCEPTION(ConfigError, disagreements(first, shorter, "piqa", "acc"));

    // An example's text: a shared prompt and its choices, or (Winogrande) whole sentences.
    TaskExample mc;
    mc.requests = {{"Q: which?", " one"}, {"Q: which?", " two"}};
    const auto shown = example_text(mc);
    QCOMPARE(shown.prompt, std::string("Q: which?"));
    QCOMPARE(shown.choices, (std::vector<std::string>{" one", " two"}));
    TaskExample wino;
    wino.requests = {{"The cup fell because the cup", " was slippery."},
                     {"The cup fell because the hand", " was slippery."}};
    const auto sentences = example_text(wino);
    QVERIFY(sentences.prompt.empty());
    QCOMPARE(sentences.choices[1], std::string("The cup fell because the hand was slippery."));
  }

  void fewShotPromptsAreTheHarnesss() {
    // Python's random.Random(seed): the values CPython 3.11 gives (getrandbits, and sample's pool and set ways).
    PythonRandom bits(1234);
    QCOMPARE(bits.getrandbits(32), 4150886329u);
    QCOMPARE(bits.getrandbits(32), 3342196574u);
    QCOMPARE(bits.getrandbits(32), 1892932127u);
    QCOMPARE(PythonRandom(1234).sample(100, 5), (std::vector<std::uint64_t>{99, 56, 14, 0, 11}));  // a set
    QCOMPARE(PythonRandom(1234).sample(10, 6), (std::vector<std::uint64_t>{7, 1, 0, 9, 4, 6}));    // a pool
    QCOMPARE(PythonRandom(1234).sample(10000, 25),
             (std::vector<std::uint64_t>{7220, 1914, 122,  1485, 9539, 572,  1375, 1612, 5810,
                                         3879, 285,  504,  259,  5670, 7933, 7594, 2433, 1495,
                                         2999, 1874, 239,  8242, 7974, 4093, 1057}));
    PythonRandom again(1234);  // consecutive draws share the generator
    QCOMPARE(again.sample(7, 3), (std::vector<std::uint64_t>{6, 3, 0}));
    QCOMPARE(again.sample(7, 3), (std::vector<std::uint64_t>{0, 6, 4}));
    QCOMPARE(PythonRandom((std::uint64_t{1} << 40) + 5).sample(1000, 3), (std::vector<std::uint64_t>{516, 529, 275}));

    QTemporaryDir dir;
    const auto read = [&](const std::string& name, const std::string& text) {
      return read_task(TaskSpec{name, write(dir, name + ".jsonl", text), ""});
    };
    std::string lines;
    for (int i = 0; i < 4; ++i)
      lines += nlohmann::json{{"goal", "P" + std::to_string(i)}, {"sol1", "a" + std::to_string(i)},
                              {"sol2", "b" + std::to_string(i)}, {"label", i % 2}}
                   .dump() +
               "\n";
    const auto pool = read("pool", lines);
    const auto piqa_line = [](const std::string& goal, int label) {
      return nlohmann::json{{"goal", goal}, {"sol1", "x"}, {"sol2", "y"}, {"label", label}}.dump() + "\n";
    };
    const auto task = read("piqa", piqa_line("G", 0) + piqa_line("H", 1));
    // Random(1234) draws [3, 0] for the first example and [0, 3] for the second: prompt, answer, a blank line.
    const auto two = with_few_shot(task, pool, /*same_file=*/false, 2);
    QCOMPARE(two.name, std::string("piqa_2shot"));
    QCOMPARE(two.shots, std::int64_t{2});
    const std::string shot3 = "Question: P3\nAnswer: b3\n\n", shot0 = "Question: P0\nAnswer: a0\n\n";
    QCOMPARE(two.examples[0].requests[1].context, shot3 + shot0 + "Question: G\nAnswer:");
    QCOMPARE(two.examples[0].requests[1].continuation, std::string(" y"));
    QCOMPARE(two.examples[1].requests[0].context, shot0 + shot3 + "Question: H\nAnswer:");
    // From its own file an example never sees its own answer: 2 drawn, itself dropped, the first other kept.
    const auto own = with_few_shot(pool, pool, /*same_file=*/true, 1);
    const std::vector<int> expected = {3, 0, 0, 0};
    for (int e = 0; e < 4; ++e) {
      const int k = expected[static_cast<std::size_t>(e)];
      QCOMPARE(own.examples[static_cast<std::size_t>(e)].requests[0].context,
               "Question: P" + std::to_string(k) + "\nAnswer: " + (k % 2 ? "b" : "a") + std::to_string(k) +
                   "\n\nQuestion: P" + std::to_string(e) + "\nAnswer:");
    }
    QCOMPARE(with_few_shot(task, pool, false, 0).examples[0].requests[0].context, std::string("Question: G\nAnswer:"));

    // LAMBADA's answer is its target alone: the target delimiter doubles its space, as in the harness's prompts.
    const auto words = read("lambada", "{\"text\": \"a b c\"}\n{\"text\": \"d e f\"}\n");
    const auto cloze = with_few_shot(words, words, true, 1);
    QCOMPARE(cloze.examples[0].requests[0].context, std::string("d e  f\n\na b"));
    QCOMPARE(cloze.examples[0].requests[0].continuation, std::string(" c"));
    // MMLU: the subject line once, then the dev split's first examples in order (the harness's first_n sampler).
    const auto question = [](const std::string& q, int answer) {
      return nlohmann::json{{"question", q}, {"subject", "astronomy"}, {"choices", {"p", "q"}}, {"answer", answer}}
                 .dump() +
             "\n";
    };
    const auto dev = read("dev", question("D1", 1) + question("D2", 0) + question("D3", 1));
    const auto mmlu = with_few_shot(read("mmlu", question("T", 0)), dev, false, 2);
    QCOMPARE(mmlu.examples[0].requests[0].context,
             std::string("The following are multiple choice questions (with answers) about astronomy.\n\n"
                         "D1\nA. p\nB. q\nAnswer: B\n\nD2\nA. p\nB. q\nAnswer: A\n\nT\nA. p\nB. q\nAnswer:"));

    // What cannot be drawn or prompted is named.
    const auto message = error_of([&] { with_few_shot(task, pool, false, 5); });
    QVERIFY2(message.find("pool.jsonl: 5 few-shot examples asked for task piqa, the file holds 4") != std::string::npos,
             message.c_str());
    QVERIFY(error_of([&] { with_few_shot(pool, pool, true, 4); }).find("holds 3 other than the example") !=
            std::string::npos);
    QVERIFY(error_of([&] { with_few_shot(task, words, false, 1); }).find("format lambada") != std::string::npos);
    const auto text = read_task(TaskSpec{"w", write(dir, "w.txt", "some words"), ""});
    QVERIFY(error_of([&] { with_few_shot(text, text, true, 1); }).find("for multiple-choice and cloze") !=
            std::string::npos);
    ZeroShotOptions options;
    options.tasks = {TaskSpec{"piqa", dir.filePath("piqa.jsonl").toStdString(), ""}};
    options.fewshot = 1;
    options.fewshot_from = {TaskSpec{"arc", dir.filePath("pool.jsonl").toStdString(), ""}};
    QVERIFY(error_of([&] { read_tasks(options); }).find("--fewshot-from: no task named 'arc'") != std::string::npos);
    options.fewshot_from[0].name = "piqa";  // read from the named file, --limit not applied to it
    options.limit = 1;
    const auto read_back = read_tasks(options);
    QCOMPARE(read_back.at(0).examples.size(), std::size_t{1});
    QCOMPARE(read_back.at(0).examples[0].requests[0].context, shot3 + "Question: G\nAnswer:");
  }

  void resultsAreKeptWithTheRun() {
    // Stored: a metric per task and measure at the checkpoint's step (a second call at that step replaces them), the
    // result document as the run's analysis, and the paper layout and a table of the keys read them.
    QTemporaryDir dir;
    const auto db = dir.filePath("runs.sqlite").toStdString();
    const auto config =
        resolve_config(nlohmann::json::object(),
                       {"model.n_layer=2", "model.n_embd=32", "model.n_head=4", "data.context=32", "train.batch_size=8",
                        "train.steps=20", "train.eval_every=20", "train.checkpoint_every=20", "train.eval_batches=1",
                        "train.log_every=10", "train.warmup_steps=5", "run.threads=1"},
                       "test");
    const auto outcome = train(TrainRequest{config, db, "tiny", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto piqa = write(dir, "piqa.jsonl",
                            "{\"goal\": \"And God said\", \"sol1\": \"let there be light\", \"sol2\": \"zzzz qqq\", "
                            "\"label\": 0}\n{\"goal\": \"In the\", \"sol1\": \"xq\", \"sol2\": \"beginning\", "
                            "\"label\": 1}\n");
    ZeroShotOptions options;
    options.tasks = {parse_task_spec(piqa),
                     parse_task_spec("lambada=" + write(dir, "l.jsonl", "{\"text\": \"And God said\"}"))};
    std::vector<std::array<std::int64_t, 3>> progress;  // task, scored, total after each batch
    options.progress = [&](std::size_t task, std::int64_t scored, std::int64_t total) {
      progress.push_back({static_cast<std::int64_t>(task), scored, total});
    };
    options.batch_size = 3;
    const auto report = evaluate_zero_shot(db, outcome.run_id, options);
    // piqa's 4 requests in batches of 3, then lambada's one.
    QVERIFY(progress == (std::vector<std::array<std::int64_t, 3>>{{0, 3, 4}, {0, 4, 4}, {1, 1, 1}}));
    {  // a panel's stop: at the next batch, nothing returned
      bool stop = false;
      options.progress = [&](std::size_t, std::int64_t, std::int64_t) { stop = true; };
      const InterruptScope unwanted([&] { return stop; });
      QVERIFY_THROWS_EXCEPTION(Interrupted, evaluate_zero_shot(db, outcome.run_id, options));
    }
    options.progress = nullptr;
    options.batch_size = 0;
    const auto again = evaluate_zero_shot(db, outcome.run_id, options);
    QCOMPARE(again.tasks.at(0).acc, report.tasks.at(0).acc);
    QCOMPARE(report.step, std::int64_t{20});
    QCOMPARE(report.max_length, std::int64_t{32});
    QCOMPARE(again.batch_size, std::int64_t{8});
    QCOMPARE(report.tasks.size(), std::size_t{2});
    store_zero_shot(db, report);
    store_zero_shot(db, report);
    RunStore store(db);
    const auto acc = store.metric(outcome.run_id, "task/piqa/acc");
    QCOMPARE(acc.size(), std::size_t{1});
    QCOMPARE(acc[0].step, std::int64_t{20});
    QCOMPARE(acc[0].value, report.tasks[0].acc);
    QCOMPARE(store.metric(outcome.run_id, "task/lambada/ppl").size(), std::size_t{1});
    QVERIFY(store.metric(outcome.run_id, "task/lambada/acc_norm").empty());  // no measure without a value
    const auto doc = nlohmann::json::parse(*store.analysis(outcome.run_id, "zero-shot", "piqa"));
    QCOMPARE(doc.at("examples").get<std::int64_t>(), std::int64_t{2});
    QCOMPARE(doc.at("step").get<std::int64_t>(), std::int64_t{20});
    // Read back without scoring: the same measures and each example's answers, so the same pairs.
    const auto kept = stored_zero_shot(db, outcome.run_id);
    QCOMPARE(kept.tasks.size(), std::size_t{2});  // by name: lambada, piqa
    QCOMPARE(kept.tasks[1].name, std::string("piqa"));
    QCOMPARE(kept.tasks[1].acc, report.tasks[0].acc);
    QCOMPARE(kept.tasks[1].acc_norm, report.tasks[0].acc_norm);
    QCOMPARE(kept.tasks[0].perplexity, report.tasks[1].perplexity);
    QCOMPARE(kept.task_steps, (std::vector<std::int64_t>{20, 20}));
    QCOMPARE(kept.step, std::int64_t{20});
    for (std::size_t e = 0; e < 2; ++e) {
      QCOMPARE(kept.tasks[1].samples.at(e).pred, report.tasks[0].samples.at(e).pred);
      QCOMPARE(kept.tasks[1].samples.at(e).pred_norm, report.tasks[0].samples.at(e).pred_norm);
      QCOMPARE(kept.tasks[1].samples.at(e).label, report.tasks[0].samples.at(e).label);
    }
    QCOMPARE(kept.tasks[0].samples.at(0).requests.at(0).greedy, report.tasks[1].samples.at(0).requests.at(0).greedy);
    const auto pairs_scored = compare_reports(report, again), pairs_kept = compare_reports(kept, kept);
    QCOMPARE(pairs_kept.size(), pairs_scored.size());  // piqa's acc and acc_norm, lambada's acc
    QCOMPARE(stored_zero_shot(db, outcome.run_id, {"piqa"}).tasks.size(), std::size_t{1});
    QVERIFY(error_of([&] { stored_zero_shot(db, outcome.run_id, {"boolq"}); }).find("no stored task results") !=
            std::string::npos);
    auto old_doc = doc;  // stored before the answers were kept: its measures read, nothing paired
    old_doc.erase("answers");
    store.put_analysis(outcome.run_id, "zero-shot", "piqa", 20, old_doc.dump());
    const auto older = stored_zero_shot(db, outcome.run_id, {"piqa"});
    QCOMPARE(older.tasks.at(0).acc, report.tasks[0].acc);
    QVERIFY(older.tasks.at(0).samples.empty());
    QVERIFY(compare_reports(older, kept).empty() && compare_reports(kept, older).empty());
    auto bad = doc;
    bad["answers"]["pred"] = {0};
    store.put_analysis(outcome.run_id, "zero-shot", "piqa", 20, bad.dump());
    const auto damaged = error_of([&] { stored_zero_shot(db, outcome.run_id); });
    QVERIFY2(damaged.find("stored task piqa: answers.pred holds 1 examples, not 2") != std::string::npos,
             damaged.c_str());
    store.put_analysis(outcome.run_id, "zero-shot", "piqa", 20, doc.dump());
    const auto table = build_run_table(store, table_spec("dtrnet-table1-tasks"), {outcome.run_id}, false);
    const auto& columns = table_spec("dtrnet-table1-tasks").columns;
    const auto at =
        std::find_if(columns.begin(), columns.end(), [](const auto& c) { return c.key == "task/piqa/acc"; });
    QVERIFY(at != columns.end());
    QCOMPARE(table.rows.at(0).cells.at(static_cast<std::size_t>(at - columns.begin()))->mean, report.tasks[0].acc);
    QVERIFY(!table.rows.at(0).cells.back());  // AVG: six of its eight tasks are missing
    std::vector<MetricRow> rows;
    double sum = 0;
    for (const auto* task :
         {"arc_challenge", "arc_easy", "boolq", "hellaswag", "lambada", "piqa", "mmlu", "winogrande"}) {
      rows.push_back({std::string("task/") + task + "/acc", 20, 0.0, 0.25 + 0.01 * static_cast<double>(rows.size())});
      sum += rows.back().value;
    }
    store.replace_metrics(outcome.run_id, rows);
    const auto full = build_run_table(store, table_spec("dtrnet-table1-tasks"), {outcome.run_id}, false);
    QCOMPARE(columns.back().column.header, std::string("AVG"));
    QVERIFY(std::abs(full.rows.at(0).cells.back()->mean - sum / 8) < 1e-12);
    QVERIFY(custom_table_spec({"task/piqa/acc"}).columns[0].column.better == Better::Higher);
    QVERIFY(custom_table_spec({"task/lambada/ppl"}).columns[0].column.better == Better::Lower);
    // Two tasks of one name, or none, are refused before the run opens.
    options.tasks = {parse_task_spec(piqa), parse_task_spec(piqa)};
    QVERIFY_THROWS_EXCEPTION(ConfigError, evaluate_zero_shot(db, outcome.run_id, options));
    options.tasks.clear();
    QVERIFY_THROWS_EXCEPTION(ConfigError, evaluate_zero_shot(db, outcome.run_id, options));
  }
};

}  // namespace test_zero_shot

ROUTELAB_TEST_SUITE(test_zero_shot, TestZeroShot)
#include "test_zero_shot.moc"
