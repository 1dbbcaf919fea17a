// Sentence-pair classification data (issue 5): TSV / JSON-lines readers and their reports, the word and WordPiece
// tokenizers, the `[CLS] a [SEP] b [SEP]` layout, batches, the epoch order, and the synthetic entailment task
// (balanced, deterministic, logically labelled, and out of reach of a bag-of-words model).
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "core/data/classification.h"
#include "core/data/dataset.h"
#include "core/data/synthetic_entailment.h"
#include "core/data/word_tokenizer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/suite.h"

namespace test_classification_data {

using namespace routelab;

namespace {

/// A resolved `data` section with every key at its schema default, for a classification source.
nlohmann::json data_config(const nlohmann::json& overrides = nlohmann::json::object()) {
  nlohmann::json data = {
      {"source", "entailment"},
      {"path", ""},
      {"tokenizer", "word"},
      {"train_fraction", 0.8},
      {"val_fraction", 0.1},
      {"context", 128},
      {"task_length", 10},
      {"task_vocab", 32},
      {"task_train_examples", 300},
      {"task_eval_examples", 90},
      {"task_seed", 1234},
      {"entailment_facts", 4},
      {"entailment_converse", 0.5},
      {"probe_chars", 96},
      {"train_path", ""},
      {"val_path", ""},
      {"test_path", ""},
      {"vocab_path", ""},
      {"pair_format", "auto"},
      {"labels", "entailment,neutral,contradiction"},
      {"lowercase", true},
      {"min_count", 1},
      {"max_vocab", 0},
  };
  data.update(overrides);
  return data;
}

std::string write_file(const QTemporaryDir& dir, const QString& name, const std::string& bytes) {
  const std::string path = dir.filePath(name).toStdString();
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

using test::error_of;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::int64_t> row(const torch::Tensor& t, std::int64_t r) {
  const torch::Tensor x = t[r].to(torch::kLong).contiguous();
  return {x.data_ptr<std::int64_t>(), x.data_ptr<std::int64_t>() + x.numel()};
}

std::vector<std::string> texts(const PairTokenizer& tokenizer, const std::vector<std::int64_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(tokenizer.token_text(id));
  return out;
}

using Strings = std::vector<std::string>;

/// A hand-made BERT-style vocabulary: specials at BERT's positions relative to each other, then pieces.
const char* const kVocab =
    "[PAD]\n[unused0]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nun\n##aff\n##able\nwant\n##ed\n##want\nrun\n##ning\n,\n.\n"
    "!\ncafe\nfoo\n##bar\na\n##a\n";

/// Independent oracle for the synthetic task: parses "the X is R than the Y" facts and decides the label.
std::int64_t logical_label(const std::string& premise, const std::string& hypothesis) {
  static const std::map<std::string, std::string> antonym = {
      {"taller", "shorter"}, {"shorter", "taller"}, {"older", "younger"},   {"younger", "older"},
      {"faster", "slower"},  {"slower", "faster"},  {"richer", "poorer"},   {"poorer", "richer"},
      {"stronger", "weaker"}, {"weaker", "stronger"}, {"heavier", "lighter"}, {"lighter", "heavier"}};
  struct Fact {
    std::string s, r, o;
  };
  auto parse = [](const std::string& text) {
    std::vector<Fact> facts;
    std::istringstream in(text);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    for (std::size_t i = 0; i + 6 < words.size(); ++i) {
      if (words[i] == "the" && words[i + 2] == "is" && words[i + 4] == "than" && words[i + 5] == "the")
        facts.push_back({words[i + 1], words[i + 3], words[i + 6]});
    }
    return facts;
  };
  const auto facts = parse(premise);
  const auto h = parse(hypothesis);
  if (h.size() != 1) return -1;
  for (const auto& f : facts) {
    const bool same = h[0].s == f.s && h[0].o == f.o, swapped = h[0].s == f.o && h[0].o == f.s;
    if (!same && !swapped) continue;
    const bool direct = h[0].r == f.r, converse = h[0].r == antonym.at(f.r);
    if ((same && direct) || (swapped && converse)) return 0;  // entailment
    if ((swapped && direct) || (same && converse)) return 2;  // contradiction
    return -1;                                                 // an unrelated relation: not generated
  }
  return 1;  // the premise says nothing about the pair: neutral
}

/// Bag-of-words features of a batch: counts of each token id in the premise part and in the hypothesis part
/// (specials and padding excluded), so a linear model can weigh a word differently on either side.
torch::Tensor bag_of_words(const ClassBatch& batch, std::int64_t vocab) {
  const auto b = batch.input.size(0);
  auto features = torch::zeros({b, 2 * vocab});                                             // (B, 2V)
  const auto index = batch.input + batch.segment * vocab;                                     // (B, T)
  features.scatter_add_(1, index, batch.mask.to(torch::kFloat));
  return features;
}

/// Trains multinomial logistic regression on (x, y) with Adam, full batch; returns accuracy on (vx, vy).
double logistic_accuracy(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& vx,
                         const torch::Tensor& vy, std::int64_t classes) {
  torch::manual_seed(0);
  torch::nn::Linear model(x.size(1), classes);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.05));
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    const auto loss = torch::nn::functional::cross_entropy(model(x), y);
    loss.backward();
    optimizer.step();
  }
  torch::NoGradGuard no_grad;
  return model(vx).argmax(1).eq(vy).to(torch::kDouble).mean().item<double>();
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace

class TestClassificationData : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { init_logging({.log_dir = "-", .console = false, .level = "error"}); }

  void tsvKeepsGoodRowsAndCountsTheRest() {
    QTemporaryDir dir;
    const std::string path = write_file(
        dir, "dev.tsv",
        "\xEF\xBB\xBFindex\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\r\n"
        "0\tfiction\tA man sleeps.\tA person rests.\tentailment\tentailment\r\n"
        "1\tfiction\tA man sleeps.\tA man runs.\tcontradiction\tCONTRADICTION\n"
        "\n"
        "2\tgov\tThe dog barks.\tThe dog is loud.\tneutral\t-\n"           // unlabeled
        "3\tgov\tOnly five fields\there\tneutral\n"                       // malformed: field count
        "4\tgov\tBad \xC3\x28 bytes\tx\tneutral\tneutral\n"               // malformed: invalid UTF-8
        "5\tgov\tA cat.\tAn animal.\tentailment\tmaybe\n"                 // unlabeled: unknown label
        "6\tgov\t  \tAn animal.\tentailment\tentailment\n"                // malformed: empty sentence1
        "7\tslate\tIt rains.\tIt is dry.\tneutral\tneutral\n");
    PairFileReport report;
    const auto pairs = read_pair_file(path, PairFormat::Auto, synthetic_entailment_labels(), report);
    QCOMPARE(report.path, path);
    QCOMPARE(report.rows, std::int64_t{8});
    QCOMPARE(report.kept, std::int64_t{3});
    QCOMPARE(report.malformed, std::int64_t{3});
    QCOMPARE(report.unlabeled, std::int64_t{2});
    QCOMPARE(pairs.size(), std::size_t{3});
    QCOMPARE(pairs[0].premise, std::string("A man sleeps."));
    QCOMPARE(pairs[0].hypothesis, std::string("A person rests."));
    QCOMPARE(pairs[0].label, std::int64_t{0});
    QCOMPARE(pairs[1].label, std::int64_t{2});  // matched case-insensitively
    QCOMPARE(pairs[2].label, std::int64_t{1});
  }

  void tsvErrorsNameTheFile() {
    QTemporaryDir dir;
    const std::string no_label = write_file(dir, "a.tsv", "sentence1\tsentence2\tgenre\nx\ty\tz\n");
    PairFileReport report;
    const auto labels = synthetic_entailment_labels();
    auto message = error_of<DataError>([&] { read_pair_file(no_label, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, no_label + ":1:") && contains(message, "gold_label"), message.c_str());

    const std::string empty = write_file(dir, "empty.tsv", "");
    message = error_of<DataError>([&] { read_pair_file(empty, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, empty) && contains(message, "empty"), message.c_str());

    const std::string blank = write_file(dir, "blank.tsv", "\n  \n\r\n");
    message = error_of<DataError>([&] { read_pair_file(blank, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, blank) && contains(message, "empty"), message.c_str());

    const std::string header_only = write_file(dir, "header.tsv", "sentence1\tsentence2\tgold_label\n");
    message = error_of<DataError>([&] { read_pair_file(header_only, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, header_only) && contains(message, "no data rows"), message.c_str());

    const std::string all_bad =
        write_file(dir, "bad.tsv", "sentence1\tsentence2\tgold_label\n\na\tb\t-\nonly\ttwo\n");
    message = error_of<DataError>([&] { read_pair_file(all_bad, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, all_bad + ":3:") && contains(message, "no usable") &&
                 contains(message, "1 malformed, 1 unlabeled"),
             message.c_str());

    const std::string missing = dir.filePath("missing.tsv").toStdString();
    message = error_of<DataError>([&] { read_pair_file(missing, PairFormat::Auto, labels, report); });
    QVERIFY2(contains(message, missing), message.c_str());
  }

  void jsonlKeepsGoodRowsAndCountsTheRest() {
    QTemporaryDir dir;
    const std::string path = write_file(
        dir, "train.jsonl",
        "{\"gold_label\": \"neutral\", \"sentence1\": \"A b.\", \"sentence2\": \"C d.\", \"genre\": \"x\"}\n"
        "{\"premise\": \"E f.\", \"hypothesis\": \"G h.\", \"label\": 2}\n"       // aliases, integer class id
        "{\"gold_label\": \"-\", \"sentence1\": \"I.\", \"sentence2\": \"J.\"}\n"  // unlabeled
        "{\"premise\": \"K.\", \"hypothesis\": \"L.\", \"label\": -1}\n"          // unlabeled
        "{\"gold_label\": \"entailment\", \"sentence1\": \"M.\"}\n"              // malformed: no sentence2
        "{\"gold_label\": \"entailment\", \"sentence1\": \"N.\", \"sentence2\": 3}\n"  // malformed: not a string
        "not json at all\n"                                                        // malformed
        "[1, 2, 3]\n"                                                              // malformed: not an object
        "{\"gold_label\": \"entailment\", \"sentence1\": \"\xFF\", \"sentence2\": \"O.\"}\n"  // invalid UTF-8
        "\n"
        "{\"gold_label\": \"entailment\", \"sentence1\": \"P.\", \"sentence2\": \"Q.\"}");  // no final newline
    PairFileReport report;
    const auto pairs = read_pair_file(path, PairFormat::Auto, synthetic_entailment_labels(), report);
    QCOMPARE(report.rows, std::int64_t{10});
    QCOMPARE(report.kept, std::int64_t{3});
    QCOMPARE(report.unlabeled, std::int64_t{2});
    QCOMPARE(report.malformed, std::int64_t{5});
    QCOMPARE(pairs[0].label, std::int64_t{1});
    QCOMPARE(pairs[1].premise, std::string("E f."));
    QCOMPARE(pairs[1].label, std::int64_t{2});
    QCOMPARE(pairs[2].hypothesis, std::string("Q."));
    QCOMPARE(pairs[2].label, std::int64_t{0});
  }

  void formatIsChosenByExtensionContentOrOption() {
    QTemporaryDir dir;
    const std::string json_row = "{\"sentence1\": \"a\", \"sentence2\": \"b\", \"gold_label\": \"neutral\"}\n";
    const std::string tsv = "sentence1\tsentence2\tgold_label\na\tb\tneutral\n";
    PairFileReport report;
    const auto labels = synthetic_entailment_labels();
    QCOMPARE(read_pair_file(write_file(dir, "x.data", json_row), PairFormat::Auto, labels, report).size(),
             std::size_t{1});
    QCOMPARE(read_pair_file(write_file(dir, "y.data", tsv), PairFormat::Auto, labels, report).size(), std::size_t{1});
    // A JSON file named .tsv is read as TSV when asked to: its header names no columns.
    const auto forced = write_file(dir, "z.tsv", json_row);
    QVERIFY(contains(error_of<DataError>([&] { read_pair_file(forced, PairFormat::Auto, labels, report); }),
                     "sentence1"));
    QCOMPARE(read_pair_file(forced, PairFormat::Jsonl, labels, report).size(), std::size_t{1});
  }

  void labelNames() {
    QCOMPARE(parse_label_names(" entailment, neutral ,contradiction"),
             (Strings{"entailment", "neutral", "contradiction"}));
    QCOMPARE(parse_label_names("yes,no"), (Strings{"yes", "no"}));
    QVERIFY(contains(error_of<ConfigError>([] { parse_label_names("yes,YES"); }), "data.labels"));
    QVERIFY(contains(error_of<ConfigError>([] { parse_label_names("yes"); }), "data.labels"));
    QVERIFY(contains(error_of<ConfigError>([] { parse_label_names("yes,,no"); }), "data.labels"));
    QVERIFY(contains(error_of<ConfigError>([] { parse_label_names("yes,no,"); }), "data.labels"));

    QTemporaryDir dir;
    const auto path = write_file(dir, "bin.tsv", "gold_label\tsentence2\tsentence1\nno\tb\ta\nYes\td\tc\nneutral\tf\te\n");
    PairFileReport report;
    const auto pairs = read_pair_file(path, PairFormat::Tsv, {"yes", "no"}, report);
    QCOMPARE(pairs.size(), std::size_t{2});
    QCOMPARE(pairs[0].label, std::int64_t{1});
    QCOMPARE(pairs[0].premise, std::string("a"));
    QCOMPARE(pairs[1].label, std::int64_t{0});
    QCOMPARE(report.unlabeled, std::int64_t{1});
  }

  void basicTokenization() {
    QCOMPARE(basic_tokenize("Hello, World!", true), (Strings{"hello", ",", "world", "!"}));
    QCOMPARE(basic_tokenize("Hello, World!", false), (Strings{"Hello", ",", "World", "!"}));
    QCOMPARE(basic_tokenize("  Café\tNAÏVE\u00A0Ærø  ", true), (Strings{"cafe", "naive", "ærø"}));
    QCOMPARE(basic_tokenize("e\xCC\x81t\xC3\xA9", true), (Strings{"ete"}));  // decomposed and composed accents
    QCOMPARE(basic_tokenize("don't 3.5$", true), (Strings{"don", "'", "t", "3", ".", "5", "$"}));
    QCOMPARE(basic_tokenize("日本go", true), (Strings{"日", "本", "go"}));
    QCOMPARE(basic_tokenize("a\x01" "b\xE2\x80\x8B" "c d", true), (Strings{"abc", "d"}));  // control chars dropped
    QCOMPARE(basic_tokenize("ΑΒΓ Жук", true), (Strings{"αβγ", "жук"}));
    QVERIFY(basic_tokenize(" \n\t", true).empty());
    QVERIFY_THROWS_EXCEPTION(DataError, basic_tokenize("bad \xC3", true));
  }

  void wordTokenizerVocabulary() {
    WordTokenizerOptions options;
    const Strings training = {"The cat, the dog.", "THE cat sat", "a rare-word"};
    const auto tokenizer = WordTokenizer::build(training, options);
    QCOMPARE(tokenizer.kind(), std::string("word"));
    QCOMPARE(tokenizer.pad_id(), std::int64_t{0});
    QCOMPARE(tokenizer.unk_id(), std::int64_t{1});
    QCOMPARE(tokenizer.cls_id(), std::int64_t{2});
    QCOMPARE(tokenizer.sep_id(), std::int64_t{3});
    QCOMPARE(tokenizer.mask_id(), std::int64_t{4});
    // By count (the 3, cat 2), then byte order among ties.
    QCOMPARE(Strings(tokenizer.vocab().begin() + 5, tokenizer.vocab().end()),
             (Strings{"the", "cat", ",", "-", ".", "a", "dog", "rare", "sat", "word"}));
    QCOMPARE(texts(tokenizer, tokenizer.encode("The zebra sat.")), (Strings{"the", "[UNK]", "sat", "."}));

    options.min_count = 2;
    QCOMPARE(WordTokenizer::build(training, options).vocab_size(), std::int64_t{7});
    options.min_count = 1;
    options.max_vocab = 8;
    const auto capped = WordTokenizer::build(training, options);
    QCOMPARE(capped.vocab_size(), std::int64_t{8});
    QCOMPARE(capped.vocab().back(), std::string(","));
    options = WordTokenizerOptions{};
    options.lowercase = false;
    const auto cased = WordTokenizer::build(training, options);
    QVERIFY(cased.id_of("THE") >= 0 && cased.id_of("The") >= 0 && cased.id_of("the") >= 0);
    QCOMPARE(cased.encode("the")[0], cased.id_of("the"));
  }

  void wordPieceSplitsGreedily() {
    QTemporaryDir dir;
    const auto path = write_file(dir, "vocab.txt", kVocab);
    const auto tokenizer = WordPieceTokenizer::from_vocab_file(path, true);
    QCOMPARE(tokenizer.kind(), std::string("wordpiece"));
    QCOMPARE(tokenizer.vocab_size(), std::int64_t{23});
    QCOMPARE(tokenizer.pad_id(), std::int64_t{0});
    QCOMPARE(tokenizer.unk_id(), std::int64_t{2});  // ids are line numbers - 1, as in the file
    QCOMPARE(tokenizer.cls_id(), std::int64_t{3});
    QCOMPARE(tokenizer.sep_id(), std::int64_t{4});
    QCOMPARE(tokenizer.mask_id(), std::int64_t{5});
    const auto ids = tokenizer.encode("UnAffable, unwanted running!");
    QCOMPARE(texts(tokenizer, ids),
             (Strings{"un", "##aff", "##able", ",", "un", "##want", "##ed", "run", "##ning", "!"}));
    QCOMPARE(ids[0], std::int64_t{7});
    QCOMPARE(texts(tokenizer, tokenizer.encode("unx wanted Café foobar")),
             (Strings{"[UNK]", "want", "##ed", "cafe", "foo", "##bar"}));
    // Longest match first: "aaa" -> a ##a ##a; a 100-character word still splits, 101 characters is [UNK].
    QCOMPARE(texts(tokenizer, tokenizer.encode("aaa")), (Strings{"a", "##a", "##a"}));
    QCOMPARE(tokenizer.encode(std::string(100, 'a')).size(), std::size_t{100});
    QCOMPARE(texts(tokenizer, tokenizer.encode(std::string(101, 'a'))), (Strings{"[UNK]"}));
    // Without lower-casing, "Cafe" is not in the vocabulary.
    const auto cased = WordPieceTokenizer::from_vocab_file(path, false);
    QCOMPARE(texts(cased, cased.encode("Cafe cafe")), (Strings{"[UNK]", "cafe"}));

    // Missing specials are appended; a missing or invalid file is a DataError naming it.
    const auto bare = WordPieceTokenizer::from_vocab_file(write_file(dir, "bare.txt", "x\n##y\n"), true);
    QCOMPARE(bare.vocab_size(), std::int64_t{7});
    QCOMPARE(bare.pad_id(), std::int64_t{2});
    QCOMPARE(bare.mask_id(), std::int64_t{6});
    QCOMPARE(texts(bare, bare.encode("xy z")), (Strings{"x", "##y", "[UNK]"}));
    const auto missing = dir.filePath("nope.txt").toStdString();
    QVERIFY(contains(error_of<DataError>([&] { WordPieceTokenizer::from_vocab_file(missing, true); }), missing));
    const auto invalid = write_file(dir, "bad.txt", "ok\nb\xC3\n");
    QVERIFY(contains(error_of<DataError>([&] { WordPieceTokenizer::from_vocab_file(invalid, true); }),
                     invalid + ":2:"));
    const auto empty = write_file(dir, "empty.txt", "\n\n");
    QVERIFY(contains(error_of<DataError>([&] { WordPieceTokenizer::from_vocab_file(empty, true); }), empty));
  }

  void pairLayoutAndTruncation() {
    const auto tokenizer = WordTokenizer::build({"a b c d e f g h"}, {});
    const auto ids = [&](const std::string& text) { return tokenizer.encode(text); };
    auto pair = encode_pair(tokenizer, ids("a b"), ids("c"), 16);
    QCOMPARE(texts(tokenizer, pair.ids), (Strings{"[CLS]", "a", "b", "[SEP]", "c", "[SEP]"}));
    QCOMPARE(pair.first_length, std::int64_t{4});
    QVERIFY(!pair.truncated);
    // Longest first: the premise loses tokens until it is no longer longer, then b on ties.
    pair = encode_pair(tokenizer, ids("a b c d e f"), ids("g h"), 8);
    QCOMPARE(texts(tokenizer, pair.ids), (Strings{"[CLS]", "a", "b", "c", "[SEP]", "g", "h", "[SEP]"}));
    QVERIFY(pair.truncated);
    pair = encode_pair(tokenizer, ids("a b c"), ids("d e f"), 7);
    QCOMPARE(texts(tokenizer, pair.ids), (Strings{"[CLS]", "a", "b", "[SEP]", "d", "e", "[SEP]"}));
    pair = encode_pair(tokenizer, ids("a"), ids("b c d e f g"), 6);
    QCOMPARE(texts(tokenizer, pair.ids), (Strings{"[CLS]", "a", "[SEP]", "b", "c", "[SEP]"}));
    pair = encode_pair(tokenizer, ids("a b"), ids("c d"), 3);
    QCOMPARE(texts(tokenizer, pair.ids), (Strings{"[CLS]", "[SEP]", "[SEP]"}));
    QCOMPARE(pair.first_length, std::int64_t{2});
    QVERIFY_THROWS_EXCEPTION(DataError, encode_pair(tokenizer, {}, {}, 2));
  }

  void batchesArePaddedMaskedAndSegmented() {
    QTemporaryDir dir;
    const auto train = write_file(dir, "train.tsv",
                                  "sentence1\tsentence2\tgold_label\n"
                                  "the cat sat\ta cat\tentailment\n"
                                  "one two three four five six seven eight\tnine\tcontradiction\n"
                                  "x\ty\tneutral\n");
    const auto val = write_file(dir, "val.jsonl", "{\"sentence1\": \"the cat\", \"sentence2\": \"zebra\", \"gold_label\": \"neutral\"}\n");
    const auto dataset = make_classification_dataset(
        data_config({{"source", "pairs"}, {"train_path", train}, {"val_path", val}, {"context", 8}}));
    QCOMPARE(dataset->max_length(), std::int64_t{8});
    QCOMPARE(dataset->num_classes(), std::int64_t{3});
    QCOMPARE(dataset->size(Split::Train), std::int64_t{3});
    QCOMPARE(dataset->size(Split::Val), std::int64_t{1});
    QCOMPARE(dataset->size(Split::Test), std::int64_t{0});
    QCOMPARE(dataset->labels(Split::Train), (std::vector<std::int64_t>{0, 2, 1}));
    QVERIFY2(contains(dataset->describe(), "train.tsv / val.jsonl") && contains(dataset->describe(), "3/1/0 pairs"),
             dataset->describe().c_str());

    const auto batch = dataset->batch(Split::Train, {2, 0, 1});
    QCOMPARE(batch.input.sizes(), (torch::IntArrayRef{3, 8}));
    QCOMPARE(batch.input.scalar_type(), torch::kLong);
    QCOMPARE(batch.mask.scalar_type(), torch::kBool);
    QCOMPARE(batch.segment.scalar_type(), torch::kLong);
    QCOMPARE(row(batch.label.unsqueeze(0), 0), (std::vector<std::int64_t>{1, 0, 2}));
    const auto pad = dataset->pad_id();
    const auto x = row(batch.input, 0);  // [CLS] x [SEP] y [SEP] + 3 pads
    QCOMPARE(std::vector<std::int64_t>(x.begin() + 5, x.end()), (std::vector<std::int64_t>(3, pad)));
    QCOMPARE(row(batch.mask, 0), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 0, 0, 0}));
    QCOMPARE(row(batch.segment, 0), (std::vector<std::int64_t>{0, 0, 0, 1, 1, 1, 1, 1}));
    QCOMPARE(row(batch.mask, 1), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1, 1}));
    QCOMPARE(row(batch.segment, 1), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1, 1}));
    QCOMPARE(dataset->tokens_text(Split::Train, 0), (Strings{"[CLS]", "the", "cat", "sat", "[SEP]", "a", "cat", "[SEP]"}));
    // Truncated longest first: 8 premise words and 1 hypothesis word into 5 slots.
    QCOMPARE(dataset->tokens_text(Split::Train, 1),
             (Strings{"[CLS]", "one", "two", "three", "four", "[SEP]", "nine", "[SEP]"}));
    QCOMPARE(dataset->tokens_text(Split::Val, 0), (Strings{"[CLS]", "the", "cat", "[SEP]", "[UNK]", "[SEP]"}));
    const auto reports = dataset->reports();
    QCOMPARE(reports.size(), std::size_t{2});
    QCOMPARE(reports[0].path, train);
    QCOMPARE(reports[0].kept, std::int64_t{3});
    QCOMPARE(reports[0].truncated, std::int64_t{1});
    QCOMPARE(reports[1].truncated, std::int64_t{0});

    QVERIFY(contains(error_of<DataError>([&] { dataset->batch(Split::Val, {1}); }), "val"));
    QVERIFY_THROWS_EXCEPTION(DataError, dataset->batch(Split::Test, {0}));
    QVERIFY_THROWS_EXCEPTION(DataError, dataset->tokens_text(Split::Train, -1));
    QCOMPARE(dataset->batch(Split::Test, {}).input.sizes(), (torch::IntArrayRef{0, 8}));
  }

  void tokenizerJsonRoundTrip() {
    QTemporaryDir dir;
    const auto vocab = write_file(dir, "vocab.txt", kVocab);
    const std::vector<std::unique_ptr<PairTokenizer>> originals = [&] {
      std::vector<std::unique_ptr<PairTokenizer>> v;
      v.push_back(std::make_unique<WordTokenizer>(WordTokenizer::build({"The cat sat, unaffable."}, {})));
      v.push_back(std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_vocab_file(vocab, true)));
      v.push_back(std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_vocab_file(vocab, false)));
      return v;
    }();
    for (const auto& original : originals) {
      const auto doc = nlohmann::json::parse(original->to_json().dump());
      const auto copy = PairTokenizer::from_json(doc);
      QCOMPARE(copy->kind(), original->kind());
      QCOMPARE(copy->lowercase(), original->lowercase());
      QCOMPARE(copy->vocab(), original->vocab());
      QCOMPARE(copy->unk_id(), original->unk_id());
      QCOMPARE(copy->encode("The Cat sat, unaffable running."), original->encode("The Cat sat, unaffable running."));
    }
    // The dataset persists the same document.
    const auto dataset = make_classification_dataset(data_config());
    const auto copy = PairTokenizer::from_json(dataset->tokenizer_json());
    QCOMPARE(copy->vocab_size(), dataset->vocab_size());
    QCOMPARE(copy->pad_id(), dataset->pad_id());
    QVERIFY(contains(error_of<DataError>([] { PairTokenizer::from_json({{"kind", "bpe"}}); }), "bpe"));
    QVERIFY_THROWS_EXCEPTION(DataError, PairTokenizer::from_json({{"kind", "word"}, {"lowercase", true}}));
    QVERIFY_THROWS_EXCEPTION(DataError,
                             PairTokenizer::from_json({{"kind", "word"}, {"lowercase", true}, {"vocab", {1, 2}}}));
  }

  void epochOrderIsADeterministicPermutation() {
    const auto order = epoch_order(1000, 42);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    QCOMPARE(sorted, iota(1000));
    QCOMPARE(epoch_order(1000, 42), order);
    QVERIFY(epoch_order(1000, 43) != order);
    QVERIFY(order != iota(1000));
    QVERIFY(epoch_order(0, 1).empty());
    QCOMPARE(epoch_order(1, 1), (std::vector<std::int64_t>{0}));
    QVERIFY_THROWS_EXCEPTION(DataError, epoch_order(-1, 1));
  }

  void syntheticTaskIsBalancedDeterministicAndLogical() {
    SyntheticEntailmentOptions options;
    options.train_examples = 3001;
    options.eval_examples = 600;
    options.seed = 7;
    for (const auto split : {Split::Train, Split::Val, Split::Test}) {
      const auto examples = generate_synthetic_entailment(options, split);
      QCOMPARE(static_cast<std::int64_t>(examples.size()),
               split == Split::Train ? options.train_examples : options.eval_examples);
      std::array<std::int64_t, 3> counts{};
      std::int64_t converse = 0;
      for (const auto& e : examples) {
        ++counts[static_cast<std::size_t>(e.label)];
        QCOMPARE(logical_label(e.premise, e.hypothesis), e.label);
        std::istringstream in(e.hypothesis);
        std::string w;
        for (int i = 0; i < 4; ++i) in >> w;  // the relation word
        converse += e.premise.find(" " + w + " ") == std::string::npos;
      }
      const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
      QVERIFY(*hi - *lo <= 1);
      // Roughly half of the hypotheses use a relation word the premise may not contain (converse forms).
      QVERIFY(converse > 0 && converse < static_cast<std::int64_t>(examples.size()));
      QCOMPARE(generate_synthetic_entailment(options, split)[5].hypothesis, examples[5].hypothesis);
    }
    const auto a = generate_synthetic_entailment(options, Split::Val);
    QVERIFY(a[0].premise != generate_synthetic_entailment(options, Split::Test)[0].premise);
    options.seed = 8;
    const auto b = generate_synthetic_entailment(options, Split::Val);
    int same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i].premise == b[i].premise;
    QVERIFY(same < 5);
    options.min_facts = 1;
    QVERIFY_THROWS_EXCEPTION(ConfigError, generate_synthetic_entailment(options, Split::Train));
  }

  void syntheticDatasetFromConfig() {
    const auto dataset = make_classification_dataset(data_config({{"task_seed", 3}}));
    QCOMPARE(dataset->label_names(), (Strings{"entailment", "neutral", "contradiction"}));
    QCOMPARE(dataset->size(Split::Train), std::int64_t{300});
    QCOMPARE(dataset->size(Split::Val), std::int64_t{90});
    QCOMPARE(dataset->size(Split::Test), std::int64_t{90});
    QCOMPARE(dataset->vocab_size(), std::int64_t{5 + 6 + 24 + 12});
    QVERIFY2(contains(dataset->describe(), "synthetic-entailment (seed 3): 300/90/90 pairs, word tokenizer (47)"),
             dataset->describe().c_str());
    QVERIFY(dataset->reports().empty());
    const auto again = make_classification_dataset(data_config({{"task_seed", 3}}));
    const auto indices = iota(90);
    QVERIFY(torch::equal(dataset->batch(Split::Val, indices).input, again->batch(Split::Val, indices).input));
    const auto other = make_classification_dataset(data_config({{"task_seed", 4}}));
    QVERIFY(!torch::equal(dataset->batch(Split::Val, indices).input, other->batch(Split::Val, indices).input));
    const auto labels = dataset->labels(Split::Train);
    for (std::int64_t c = 0; c < 3; ++c) QCOMPARE(std::count(labels.begin(), labels.end(), c), std::ptrdiff_t{100});
    const auto tokens = dataset->tokens_text(Split::Val, dataset->probe_index());
    QCOMPARE(tokens.front(), std::string("[CLS]"));
    QCOMPARE(tokens.back(), std::string("[SEP]"));
    // The longest pair is 43 tokens: a shorter context is refused rather than truncating facts away.
    QCOMPARE(make_classification_dataset(data_config({{"context", 43}}))->max_length(), std::int64_t{43});
    QVERIFY(contains(error_of<ConfigError>([] { make_classification_dataset(data_config({{"context", 42}})); }),
                     "data.context"));
  }

  void configErrorsNameTheKey() {
    auto message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"source", "kjv"}})); });
    QVERIFY2(contains(message, "data.source"), message.c_str());
    message = error_of<ConfigError>([] { make_dataset(data_config({{"source", "entailment"}})); });
    QVERIFY2(contains(message, "data.source") && contains(message, "classification"), message.c_str());
    message = error_of<ConfigError>([] { make_dataset(data_config({{"source", "pairs"}})); });
    QVERIFY2(contains(message, "data.source"), message.c_str());
    message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"tokenizer", "char"}})); });
    QVERIFY2(contains(message, "data.tokenizer"), message.c_str());
    message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"tokenizer", "wordpiece"}})); });
    QVERIFY2(contains(message, "data.vocab_path"), message.c_str());
    message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"source", "pairs"}})); });
    QVERIFY2(contains(message, "data.train_path"), message.c_str());
    message = error_of<ConfigError>([] {
      make_classification_dataset(data_config({{"source", "pairs"}, {"train_path", "x.tsv"}, {"val_path", ""}}));
    });
    QVERIFY2(contains(message, "data.val_path"), message.c_str());
    message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"max_vocab", 3}})); });
    QVERIFY2(contains(message, "data.max_vocab"), message.c_str());
    message = error_of<ConfigError>([] { make_classification_dataset(data_config({{"labels", "a"}})); });
    QVERIFY2(message == "<no exception>", message.c_str());  // the synthetic task has its own labels
    message = error_of<DataError>([] {
      make_classification_dataset(
          data_config({{"source", "pairs"}, {"train_path", "/nonexistent/t.tsv"}, {"val_path", "/nonexistent/v.tsv"}}));
    });
    QVERIFY2(contains(message, "/nonexistent/t.tsv"), message.c_str());
  }

  void wordPieceDataset() {
    QTemporaryDir dir;
    const auto vocab = write_file(dir, "vocab.txt", kVocab);
    const auto train = write_file(dir, "t.jsonl",
                                  "{\"sentence1\": \"Unaffable cafe\", \"sentence2\": \"unwanted\", \"gold_label\": \"yes\"}\n"
                                  "{\"sentence1\": \"foobar\", \"sentence2\": \"run\", \"gold_label\": \"no\"}\n");
    const auto dataset = make_classification_dataset(data_config({{"source", "pairs"},
                                                                 {"tokenizer", "wordpiece"},
                                                                 {"vocab_path", vocab},
                                                                 {"labels", "no,yes"},
                                                                 {"train_path", train},
                                                                 {"val_path", train},
                                                                 {"test_path", train},
                                                                 {"context", 12}}));
    QCOMPARE(dataset->vocab_size(), std::int64_t{23});
    QCOMPARE(dataset->pad_id(), std::int64_t{0});
    QCOMPARE(dataset->size(Split::Test), std::int64_t{2});
    QCOMPARE(dataset->labels(Split::Val), (std::vector<std::int64_t>{1, 0}));
    QCOMPARE(dataset->tokens_text(Split::Train, 0),
             (Strings{"[CLS]", "un", "##aff", "##able", "cafe", "[SEP]", "un", "##want", "##ed", "[SEP]"}));
    QCOMPARE(row(dataset->batch(Split::Train, {0}).input, 0),
             (std::vector<std::int64_t>{3, 7, 8, 9, 18, 4, 7, 12, 11, 4, 0, 0}));
  }

  /// The point of the synthetic task: its words say nothing about the class. A linear model on premise and
  /// hypothesis word counts stays at chance, while the same model on the same inputs learns a labelling that
  /// the words do determine (the control that lets this test fail).
  void bagOfWordsStaysAtChance_data() {
    QTest::addColumn<int>("facts");
    QTest::addColumn<double>("converse");
    QTest::newRow("2-4 facts, half antonym phrasing") << 4 << 0.5;
    QTest::newRow("2 facts, direct phrasing (the seed002 sweeps)") << 2 << 0.0;
  }

  void bagOfWordsStaysAtChance() {
    QFETCH(int, facts);
    QFETCH(double, converse);
    const auto dataset = make_classification_dataset(
        data_config({{"task_train_examples", 3000}, {"task_eval_examples", 900}, {"context", 43}, {"task_seed", 11},
                     {"entailment_facts", facts}, {"entailment_converse", converse}}));
    const auto v = dataset->vocab_size();
    const auto train = dataset->batch(Split::Train, iota(dataset->size(Split::Train)));
    const auto val = dataset->batch(Split::Val, iota(dataset->size(Split::Val)));
    const auto x = bag_of_words(train, v), vx = bag_of_words(val, v);  // (N, 2V)

    const double accuracy = logistic_accuracy(x, train.label, vx, val.label, 3);
    qInfo("bag-of-words validation accuracy on the synthetic task: %.3f (chance 0.333)", accuracy);
    QVERIFY2(accuracy < 0.42, std::to_string(accuracy).c_str());

    // Control: the class of the hypothesis's relation word (its id mod 3), the 4th token after the first [SEP].
    auto word_label = [](const ClassBatch& batch) {
      const auto first_b = batch.segment.argmax(1);                                   // (N) first segment-1 slot
      return batch.input.gather(1, (first_b + 3).unsqueeze(1)).squeeze(1).remainder(3);  // (N)
    };
    const double control = logistic_accuracy(x, word_label(train), vx, word_label(val), 3);
    qInfo("bag-of-words validation accuracy on a word-determined labelling: %.3f", control);
    QVERIFY2(control > 0.9, std::to_string(control).c_str());
  }
};

}  // namespace test_classification_data

ROUTELAB_TEST_SUITE(test_classification_data, TestClassificationData)
#include "test_classification_data.moc"
