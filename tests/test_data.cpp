// Dataset tests: the corpus split and its windows, DataError/ConfigError messages, the copy and sort tasks,
// and the default corpus generated from Debian's bible-kjv.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/data/dataset.h"
#include "core/data/synthetic_tasks.h"
#include "core/data/text_corpus.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/suite.h"

namespace test_data {

using namespace routelab;

namespace {

/// A resolved `data` section with every key at its default, as the config schema would hand it over.
nlohmann::json data_config(const nlohmann::json& overrides = nlohmann::json::object()) {
  nlohmann::json data = {
      {"source", "file"},         {"path", ""},           {"tokenizer", "char"},
      {"train_fraction", 0.8},    {"val_fraction", 0.1},  {"context", 128},
      {"task_length", 10},        {"task_vocab", 32},     {"task_train_examples", 10000},
      {"task_eval_examples", 1000}, {"task_seed", 1234},  {"probe_chars", 96},
  };
  data.update(overrides);
  return data;
}

/// About 20K characters of lines with non-ASCII text, deterministic.
std::string sample_text() {
  std::string text;
  for (int i = 0; i < 400; ++i) {
    text += "verse " + std::to_string(i) + ": the naïve café — 日本 " + std::to_string(i * 7919 % 1000) + "\n";
  }
  return text;
}

std::string write_file(const QTemporaryDir& dir, const QString& name, const std::string& bytes) {
  const std::string path = dir.filePath(name).toStdString();
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<std::int64_t> row(const torch::Tensor& t, std::int64_t r) {
  const torch::Tensor x = t[r].contiguous();
  return {x.data_ptr<std::int64_t>(), x.data_ptr<std::int64_t>() + x.numel()};
}

using test::error_of;

/// Code points in the train split and in the val split of n (the defaults 0.8 and 0.1, as the dataset rounds).
std::size_t train_chars(std::size_t n) { return static_cast<std::size_t>(std::floor(static_cast<double>(n) * 0.8)); }
std::size_t val_chars(std::size_t n) { return static_cast<std::size_t>(std::floor(static_cast<double>(n) * 0.1)); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Restores an environment variable when the test ends, however it ends.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name), had_(qEnvironmentVariableIsSet(name)), old_(qgetenv(name)) {}
  ~EnvGuard() {
    if (had_) qputenv(name_, old_);
    else qunsetenv(name_);
  }

 private:
  const char* name_;
  bool had_;
  QByteArray old_;
};

}  // namespace

class TestData : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { init_logging({.log_dir = "-", .console = false, .level = "info"}); }

  void deterministicSplit() {
    QTemporaryDir dir;
    const auto path = write_file(dir, "corpus.txt", sample_text());
    const auto a = make_dataset(data_config({{"path", path}, {"context", 32}}));
    const auto b = make_dataset(data_config({{"path", path}, {"context", 32}}));
    for (Split split : {Split::Train, Split::Val, Split::Test}) {
      QCOMPARE(a->split_tokens(split), b->split_tokens(split));
    }
    QCOMPARE(a->tokenizer().to_json(), b->tokenizer().to_json());
    const Batch x = a->sample(Split::Train, 8, 42);
    const Batch y = b->sample(Split::Train, 8, 42);
    const Batch z = a->sample(Split::Train, 8, 43);
    QVERIFY(torch::equal(x.input, y.input));
    QVERIFY(torch::equal(x.target, y.target));
    QVERIFY(!torch::equal(x.input, z.input));
    QVERIFY(torch::equal(a->sample(Split::Val, 4, 7).input, b->sample(Split::Val, 4, 7).input));
  }

  void splitByCodePoints() {
    QTemporaryDir dir;
    const std::string text = sample_text();
    const auto path = write_file(dir, "corpus.txt", text);
    TextCorpusOptions options;
    options.path = path;
    options.context = 32;
    const TextCorpusDataset ds(options);
    const std::u32string chars = utf8_to_u32(text);
    const auto n = static_cast<std::int64_t>(chars.size());
    QCOMPARE(ds.total_chars(), n);
    QCOMPARE(ds.split_tokens(Split::Train), static_cast<std::int64_t>(train_chars(chars.size())));
    QCOMPARE(ds.split_tokens(Split::Val), static_cast<std::int64_t>(val_chars(chars.size())));
    QCOMPARE(ds.split_tokens(Split::Train) + ds.split_tokens(Split::Val) + ds.split_tokens(Split::Test), n);
    QCOMPARE(ds.chars_per_token(Split::Train), 1.0);
    // The vocabulary comes from the train split, and the three splits decode back to the whole text.
    const CharTokenizer train_vocab = CharTokenizer::build(u32_to_utf8(chars.substr(0, train_chars(chars.size()))));
    QVERIFY(static_cast<const CharTokenizer&>(ds.tokenizer()).vocab() == train_vocab.vocab());
    std::string joined;
    for (Split split : {Split::Train, Split::Val, Split::Test}) joined += ds.tokenizer().decode(ds.tokens(split));
    QCOMPARE(joined, text);
    QVERIFY(contains(ds.describe(), "corpus.txt: " + std::to_string(n / 1000) + ","));
    QVERIFY(contains(ds.describe(), "char tokenizer (" + std::to_string(ds.tokenizer().vocab_size()) + " symbols)"));
  }

  void trainIsPrefix() {
    QTemporaryDir dir;
    const std::string text = sample_text();
    const auto path = write_file(dir, "corpus.txt", text);
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 64}}));
    const std::u32string chars = utf8_to_u32(text);
    const std::string train_text = u32_to_utf8(chars.substr(0, train_chars(chars.size())));
    const std::string rest = u32_to_utf8(chars.substr(train_chars(chars.size())));
    const Batch batch = ds->sample(Split::Train, 16, 3);
    for (std::int64_t r = 0; r < 16; ++r) {
      std::vector<std::int64_t> window = row(batch.input, r);
      window.push_back(row(batch.target, r).back());
      const std::string decoded = ds->tokenizer().decode(window);
      QVERIFY2(contains(train_text, decoded), decoded.c_str());
    }
    const Batch val = ds->sample(Split::Val, 16, 3);
    for (std::int64_t r = 0; r < 16; ++r) {
      const std::string decoded = ds->tokenizer().decode(row(val.input, r));
      QVERIFY2(contains(rest, decoded), decoded.c_str());
    }
  }

  void batchShapes() {
    QTemporaryDir dir;
    const auto path = write_file(dir, "corpus.txt", sample_text());
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 48}}));
    QCOMPARE(ds->context(), 48);
    const Batch batch = ds->sample(Split::Train, 5, 11);
    QCOMPARE(batch.input.sizes().vec(), (std::vector<std::int64_t>{5, 48}));
    QCOMPARE(batch.target.sizes().vec(), (std::vector<std::int64_t>{5, 48}));
    QCOMPARE(batch.input.scalar_type(), torch::kLong);
    QCOMPARE(batch.target.scalar_type(), torch::kLong);
    QVERIFY(batch.input.is_contiguous() && batch.target.is_contiguous());
    QVERIFY(!batch.loss_mask.defined());
    QVERIFY(torch::equal(batch.input.slice(1, 1), batch.target.slice(1, 0, 47)));
    QVERIFY(batch.input.min().item<std::int64_t>() >= 0);
    QVERIFY(batch.target.max().item<std::int64_t>() < ds->tokenizer().vocab_size());
  }

  void stridedWindowsTileTheSplit() {
    QTemporaryDir dir;
    const auto path = write_file(dir, "corpus.txt", sample_text());
    TextCorpusOptions options;
    options.path = path;
    options.context = 16;
    const TextCorpusDataset ds(options);
    const auto& val = ds.tokens(Split::Val);
    const auto n = static_cast<std::int64_t>(val.size());
    const std::int64_t available = (n - 1) / 16;  // window w holds tokens 16w .. 16w + 16
    QVERIFY(available >= 3);
    const auto first = ds.windows(Split::Val, 1, 2);
    QVERIFY(first.has_value());
    QCOMPARE(first->input.size(0), std::int64_t{2});
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t t = 0; t < 16; ++t) {
        QCOMPARE(first->input[b][t].item<std::int64_t>(), val[static_cast<std::size_t>((1 + b) * 16 + t)]);
        QCOMPARE(first->target[b][t].item<std::int64_t>(), val[static_cast<std::size_t>((1 + b) * 16 + t + 1)]);
      }
    const auto tail = ds.windows(Split::Val, available - 1, 5);  // fewer at the end...
    QVERIFY(tail.has_value());
    QCOMPARE(tail->input.size(0), std::int64_t{1});
    QVERIFY(!ds.windows(Split::Val, available, 1).has_value());  // ...none past it
    // A synthetic task has no windows.
    const auto task = make_dataset(
        data_config({{"source", "copy"}, {"task_train_examples", 500}, {"task_eval_examples", 100}}));
    QVERIFY(!task->windows(Split::Val, 0, 1).has_value());
  }

  void byteCorpus() {
    QTemporaryDir dir;
    const std::string text = sample_text();
    const auto path = write_file(dir, "corpus.txt", text);
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 32}, {"tokenizer", "byte"}}));
    QCOMPARE(ds->tokenizer().kind(), std::string("byte"));
    const std::int64_t bytes = ds->split_tokens(Split::Train) + ds->split_tokens(Split::Val) +
                               ds->split_tokens(Split::Test);
    QCOMPARE(bytes, static_cast<std::int64_t>(text.size()));
    const double cpt = ds->chars_per_token(Split::Train);
    QVERIFY(cpt > 0.8 && cpt < 1.0);  // the non-ASCII characters take 2-3 bytes
    const auto train_count = static_cast<double>(train_chars(utf8_to_u32(text).size()));
    QVERIFY(std::abs(cpt - train_count / static_cast<double>(ds->split_tokens(Split::Train))) < 1e-12);
    const Batch batch = ds->sample(Split::Train, 4, 5);
    for (std::int64_t r = 0; r < 4; ++r) QVERIFY(contains(text, ds->tokenizer().decode(row(batch.input, r))));
  }

  void unseenCharactersInVal() {
    QTemporaryDir dir;
    std::string text(800, 'a');
    text += std::string(100, 'b') + "ééé" + std::string(97, 'c');  // 'b', 'é', 'c' occur after the train split
    const auto path = write_file(dir, "corpus.txt", text);
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 16}, {"probe_chars", 10}}));
    QCOMPARE(ds->tokenizer().vocab_size(), 2);  // 'a' and the unknown id
    const Batch batch = ds->sample(Split::Val, 4, 1);
    QVERIFY(torch::all(batch.input == 1).item<bool>());
    QCOMPARE(ds->tokenizer().decode({1}), std::string("\uFFFD"));
  }

  void probeTokens() {
    QTemporaryDir dir;
    const std::string text = sample_text();
    const auto path = write_file(dir, "corpus.txt", text);
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 32}, {"probe_chars", 40}}));
    const std::u32string chars = utf8_to_u32(text);
    const std::u32string val = chars.substr(train_chars(chars.size()), val_chars(chars.size()));
    const std::u32string expected = val.substr(val.find(U'\n') + 1, 40);
    const auto probe = ds->probe_tokens();
    QCOMPARE(probe.size(), std::size_t{40});
    QCOMPARE(ds->tokenizer().decode(probe), u32_to_utf8(expected));
    QVERIFY(expected.substr(0, 6) == U"verse ");
  }

  void fileErrors_data() {
    QTest::addColumn<QByteArray>("bytes");   // null: the file is not created
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing") << QByteArray() << ": cannot open (No such file or directory)";
    QTest::newRow("empty") << QByteArray("") << ": the file is empty";
    QTest::newRow("not utf-8") << QByteArray("hello\nw\xf6rld\n", 12)
                               << ": not valid UTF-8 (first invalid byte at offset 7)";
    QTest::newRow("too short") << QByteArray(std::string(500, 'x').c_str())
                               << ": the val split has 50 tokens, fewer than one context window "
                                  "(data.context + 1 = 129); use a longer file or a smaller data.context";
  }

  void fileErrors() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    std::string path = dir.filePath("corpus.txt").toStdString();
    if (!bytes.isNull()) path = write_file(dir, "corpus.txt", bytes.toStdString());
    const auto message = error_of<DataError>([&] { make_dataset(data_config({{"path", path}})); });
    QCOMPARE(QString::fromStdString(message), QString::fromStdString(path) + expected);
  }

  void directoryIsNotAFile() {
    QTemporaryDir dir;
    const auto message = error_of<DataError>([&] { make_dataset(data_config({{"path", dir.path().toStdString()}})); });
    QVERIFY2(contains(message, dir.path().toStdString() + ": cannot open"), message.c_str());
  }

  void shortTestSplitIsOnlyUnusable() {
    QTemporaryDir dir;
    const auto path = write_file(dir, "corpus.txt", std::string(1000, 'x'));
    const auto ds = make_dataset(data_config({{"path", path}, {"context", 99}, {"val_fraction", 0.15}}));
    QCOMPARE(ds->split_tokens(Split::Test), 50);
    QVERIFY(ds->sample(Split::Val, 2, 1).input.defined());
    const auto message = error_of<DataError>([&] { ds->sample(Split::Test, 2, 1); });
    QVERIFY2(contains(message, path + ": the test split has 50 tokens"), message.c_str());
  }

  void configErrors_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("expected");
    QTest::newRow("file without path") << R"({"path": ""})" << "data.path: required when data.source is 'file'";
    QTest::newRow("fractions sum to 1") << R"({"path": "x.txt", "train_fraction": 0.7, "val_fraction": 0.4})"
                                        << "data.val_fraction: ";
    QTest::newRow("unknown source") << R"({"source": "wiki"})" << "data.source: ";
    QTest::newRow("unknown tokenizer") << R"({"path": "x.txt", "tokenizer": "bpe"})" << "data.tokenizer: ";
    QTest::newRow("zero context") << R"({"path": "x.txt", "context": 0})" << "data.context: ";
  }

  void configErrors() {
    QFETCH(QString, overrides);
    QFETCH(QString, expected);
    const auto data = data_config(nlohmann::json::parse(overrides.toStdString()));
    const auto message = error_of<ConfigError>([&] { make_dataset(data); });
    QVERIFY2(message.rfind(expected.toStdString(), 0) == 0, message.c_str());
  }

  void taskExamples_data() {
    QTest::addColumn<QString>("source");
    QTest::newRow("copy") << "copy";
    QTest::newRow("sort") << "sort";
  }

  void taskExamples() {
    QFETCH(QString, source);
    const bool sort = source == "sort";
    const std::int64_t L = 10, V = 32, B = 64;
    const auto ds = make_dataset(data_config({{"source", source.toStdString()}, {"task_train_examples", 500},
                                              {"task_eval_examples", 100}}));
    const auto& tok = dynamic_cast<const TaskTokenizer&>(ds->tokenizer());
    QCOMPARE(tok.vocab_size(), V + 3);
    QCOMPARE(ds->context(), 2 * L + 2);
    QCOMPARE(ds->split_tokens(Split::Train), 500 * (2 * L + 2));
    QCOMPARE(ds->split_tokens(Split::Test), 100 * (2 * L + 2));
    QCOMPARE(ds->chars_per_token(Split::Val), 1.0);

    const Batch batch = ds->sample(Split::Train, B, 9);
    QCOMPARE(batch.input.sizes().vec(), (std::vector<std::int64_t>{B, 2 * L + 2}));
    QCOMPARE(batch.loss_mask.sizes().vec(), (std::vector<std::int64_t>{B, 2 * L + 2}));
    QCOMPARE(batch.loss_mask.scalar_type(), torch::kFloat);
    QVERIFY(torch::equal(batch.input.slice(1, 1), batch.target.slice(1, 0, 2 * L + 1)));
    for (std::int64_t r = 0; r < B; ++r) {
      std::vector<std::int64_t> seq = row(batch.input, r);
      seq.push_back(row(batch.target, r).back());  // [BOS] src [SEP] tgt [EOS]
      QCOMPARE(seq.size(), std::size_t(2 * L + 3));
      QCOMPARE(seq[0], tok.bos_id());
      QCOMPARE(seq[L + 1], tok.sep_id());
      QCOMPARE(seq[2 * L + 2], tok.eos_id());
      std::vector<std::int64_t> src(seq.begin() + 1, seq.begin() + L + 1);
      const std::vector<std::int64_t> tgt(seq.begin() + L + 2, seq.begin() + 2 * L + 2);
      QVERIFY(std::all_of(src.begin(), src.end(), [&](std::int64_t s) { return s >= 0 && s < V; }));
      if (sort) std::sort(src.begin(), src.end());
      QVERIFY(tgt == src);
      // The loss counts exactly the targets that are tgt tokens or EOS: target positions L+1 .. 2L+1.
      const torch::Tensor mask = batch.loss_mask[r];
      QCOMPARE(mask.sum().item<float>(), float(L + 1));
      for (std::int64_t t = 0; t < 2 * L + 2; ++t) QCOMPARE(mask[t].item<float>(), t >= L + 1 ? 1.0f : 0.0f);
    }
    // Over many examples sort's targets differ from copy's (a random source is rarely already sorted).
    const auto& task = dynamic_cast<const SyntheticTaskDataset&>(*ds);
    int unsorted_sources = 0;
    for (std::int64_t e = 0; e < 100; ++e) {
      const auto seq = task.example(Split::Val, e);
      unsorted_sources += !std::is_sorted(seq.begin() + 1, seq.begin() + L + 1);
    }
    QVERIFY(unsorted_sources > 90);
    auto probe = task.example(Split::Val, 0);
    probe.pop_back();
    QCOMPARE(ds->probe_tokens(), probe);
  }

  void taskDeterministicPerSeed() {
    const auto config = data_config({{"source", "sort"}, {"task_train_examples", 200}, {"task_eval_examples", 50}});
    const auto a = make_dataset(config);
    const auto b = make_dataset(config);
    auto other_config = config;
    other_config["task_seed"] = 1235;
    const auto c = make_dataset(other_config);
    const auto& ta = dynamic_cast<const SyntheticTaskDataset&>(*a);
    const auto& tb = dynamic_cast<const SyntheticTaskDataset&>(*b);
    const auto& tc = dynamic_cast<const SyntheticTaskDataset&>(*c);
    for (Split split : {Split::Train, Split::Val, Split::Test}) {
      for (std::int64_t e = 0; e < ta.examples(split); ++e) QCOMPARE(ta.example(split, e), tb.example(split, e));
    }
    QVERIFY(ta.example(Split::Train, 0) != tc.example(Split::Train, 0));
    // val is generated from seed + 1: the other dataset's train split (seed 1235) starts with it.
    QCOMPARE(ta.example(Split::Val, 0), tc.example(Split::Train, 0));
    QVERIFY(ta.example(Split::Val, 0) != ta.example(Split::Test, 0));
    QVERIFY(torch::equal(a->sample(Split::Train, 16, 5).input, b->sample(Split::Train, 16, 5).input));
    QVERIFY(!torch::equal(a->sample(Split::Train, 16, 5).input, a->sample(Split::Train, 16, 6).input));
  }

  void defaultCorpus() {
    if (QStandardPaths::findExecutable("bible").isEmpty()) QSKIP("`bible` (Debian's bible-kjv) is not on PATH");
    QTemporaryDir home;
    EnvGuard guard("ROUTELAB_HOME");
    qputenv("ROUTELAB_HOME", home.path().toUtf8());
    const std::string path = default_corpus_path();
    QCOMPARE(QString::fromStdString(path), home.filePath("corpora/kjv.txt"));
    QVERIFY(std::filesystem::file_size(path) > 4'000'000);
    std::ifstream in(path, std::ios::binary);
    std::string head(200, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    QVERIFY2(head.rfind("\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n", 0) == 0,
             head.c_str());
    const auto written = std::filesystem::last_write_time(path);
    QCOMPARE(default_corpus_path(), path);  // cached: not generated again
    QVERIFY(std::filesystem::last_write_time(path) == written);
    QCOMPARE(QDir(home.filePath("corpora")).entryList(QDir::Files).size(), 1);  // no temporary left over

    const auto start = std::chrono::steady_clock::now();
    const auto ds = make_dataset(data_config({{"source", "kjv"}}));
    const Batch batch = ds->sample(Split::Train, 64, 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    qInfo("kjv: %s (loaded and sampled in %.2f s)", ds->describe().c_str(), seconds);
    QVERIFY(ds->describe().rfind("kjv.txt: ", 0) == 0);
    QCOMPARE(batch.input.sizes().vec(), (std::vector<std::int64_t>{64, 128}));
    QVERIFY(ds->split_tokens(Split::Test) > 129);
  }

  void defaultCorpusWithoutBible() {
    QTemporaryDir home;
    QTemporaryDir empty_bin;
    EnvGuard home_guard("ROUTELAB_HOME");
    EnvGuard path_guard("PATH");
    qputenv("ROUTELAB_HOME", home.path().toUtf8());
    qputenv("PATH", empty_bin.path().toUtf8());
    const auto message = error_of<DataError>([] { default_corpus_path(); });
    QVERIFY2(message.rfind("the default corpus needs Debian's bible-kjv package", 0) == 0, message.c_str());
  }
};

}  // namespace test_data

ROUTELAB_TEST_SUITE(test_data, TestData)
#include "test_data.moc"
