// Token shards (issue 22): the llm.c shard writer and memory-mapped reader (uint16 and uint32), reads across shard
// ends, the three folder layouts (RouteLab's prepared folder, llm.c's shards, nanoGPT's train.bin/val.bin), damaged
// and out-of-vocabulary shards, `prepare` (the same shards on one thread and two, its manifest's counts), and a run
// on prepared shards whose stopped-and-resumed loss curve equals the uninterrupted one.
#include <QtTest/QtTest>
#include <QTemporaryDir>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/analysis/zero_shot_run.h"
#include "core/bench/shard_bench.h"
#include "core/data/corpus_prepare.h"
#include "core/data/dataset.h"
#include "core/data/shard_dataset.h"
#include "core/data/token_shards.h"
#include "core/data/tokenizer_training.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/data_test_support.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_shards {

using namespace routelab;

namespace {

using test::contains;
using test::corpus_head;
using test::error_of;

/// An llm.c shard as its Python writer makes it: 256 int32 header (magic, version, count), then the tokens.
void write_llmc(const std::string& path, const std::vector<std::uint32_t>& tokens, bool wide = false,
                std::int32_t count_override = -1) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = wide ? kLlmcMagic32 : kLlmcMagic16;
  header[1] = wide ? 7 : 1;
  header[2] = count_override >= 0 ? count_override : static_cast<std::int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  for (auto t : tokens) {
    if (wide) {
      out.write(reinterpret_cast<const char*>(&t), 4);
    } else {
      const auto v = static_cast<std::uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
}

std::vector<std::uint32_t> ramp(std::size_t n, std::uint32_t modulo, std::uint32_t offset = 0) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>((i + offset) % modulo);
  return v;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

class TestShards : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string corpus_, model_;

  std::string path(const QString& name) const { return dir_.filePath(name).toStdString(); }

  PrepareResult prepare(const std::string& out, int threads) {
    PrepareOptions options;
    options.corpus = {corpus_};
    options.tokenizer_model = model_;
    options.out = out;
    options.val_fraction = 0.1;
    options.shard_tokens = 20'000;  // several shards, so windows cross shard ends
    options.threads = threads;
    return prepare_shards(options, nullptr);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    corpus_ = path("kjv-head.txt");
    std::ofstream(corpus_, std::ios::binary) << corpus_head(300'000);
    TokenizerTrainingOptions options;
    options.corpus = {corpus_};
    options.out = model_ = path("tok.model");
    options.vocab_size = 400;
    options.threads = 2;
    options.log = false;
    if (sentencepiece_unavailable().empty()) train_sentencepiece(options, nullptr);  // the prepare tests' tokenizer
  }

  void writerAndReaderRoundTrip() {
    for (int width : {2, 4}) {
      const auto folder = path(QString("written-%1").arg(width));
      ShardWriter writer(folder, "x", width, 1000);
      std::vector<std::int32_t> tokens(2500);
      const std::size_t top = width == 2 ? 65536 : 70000;  // ids above uint16 in the wide shards
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 37 % top);
      writer.append("val", {tokens.begin(), tokens.begin() + 300});
      writer.append("train", {tokens.begin() + 300, tokens.end()});
      const auto written = writer.finish();
      QCOMPARE(written.size(), std::size_t{4});  // val 300; train 1000 + 1000 + 200
      QCOMPARE(written[0].at("file").get<std::string>(), std::string("x_val_000000.bin"));
      QCOMPARE(written[3].at("tokens").get<std::int64_t>(), std::int64_t{200});
      ShardStream train;
      for (int i = 1; i <= 3; ++i)
        train.add(MappedShard(folder + "/" + written[i].at("file").get<std::string>(), MappedShard::Layout::Llmc));
      QCOMPARE(train.tokens(), std::int64_t{2200});
      QCOMPARE(train.shard(0).token_bytes(), width);
      std::vector<std::int64_t> got(50);
      train.copy(980, 50, got.data());  // across the first shard's end
      for (std::size_t i = 0; i < got.size(); ++i) QCOMPARE(got[i], static_cast<std::int64_t>(tokens[300 + 980 + i]));
      QVERIFY(contains(error_of<DataError>([&] { train.copy(2190, 20, got.data()); }), "outside the split's 2200"));
    }
    // A writer stopped before finish() (an error, Ctrl-C) leaves no shard behind, full ones included.
    const auto stopped = path("stopped");
    {
      ShardWriter writer(stopped, "x", 2, 100);
      writer.append("val", std::vector<std::int32_t>(250, 7));
    }
    QVERIFY(QDir(QString::fromStdString(stopped)).isEmpty());
  }

  void llmcAndNanoGptFoldersLoadAsTheyAre() {
    const auto llmc = path("llmc");
    QDir().mkpath(QString::fromStdString(llmc));
    write_llmc(llmc + "/tiny_val_000000.bin", ramp(3000, 500));
    write_llmc(llmc + "/tiny_train_000001.bin", ramp(5000, 500, 7));
    write_llmc(llmc + "/tiny_train_000002.bin", ramp(4000, 500, 11));
    ShardDatasetOptions options;
    options.path = llmc;
    options.context = 64;
    const auto no_vocab = error_of<ConfigError>([&] { ShardDataset{options}; });
    QVERIFY2(contains(no_vocab, "data.shard_vocab") && contains(no_vocab, "llm.c"), no_vocab.c_str());
    options.vocab = 500;
    const ShardDataset data(options);
    QCOMPARE(data.layout(), std::string("llm.c"));
    QCOMPARE(data.split_tokens(Split::Train), std::int64_t{9000});
    QCOMPARE(data.split_tokens(Split::Val), std::int64_t{3000});
    QCOMPARE(data.split_tokens(Split::Test), std::int64_t{0});
    QCOMPARE(data.tokenizer().token_text(42), std::string("⟨42⟩"));
    // Sampling is a function of the seed alone; windows tile the split.
    const auto a = data.sample(Split::Train, 8, 123), b = data.sample(Split::Train, 8, 123);
    QVERIFY(torch::equal(a.input, b.input));
    QVERIFY(!torch::equal(a.input, data.sample(Split::Train, 8, 124).input));
    QVERIFY(torch::equal(a.target.slice(1, 0, 63), a.input.slice(1, 1, 64)));
    const auto w = data.windows(Split::Val, 0, 2);
    QVERIFY(w.has_value());
    QCOMPARE(w->input[1][0].item<std::int64_t>(), std::int64_t{64});  // window 1 starts at token 64 of the ramp
    QVERIFY(!data.windows(Split::Test, 0, 1).has_value());
    QVERIFY(contains(error_of<DataError>([&] { data.sample(Split::Test, 1, 1); }), "no test split"));

    // Ids beyond the vocabulary are refused, naming the shard.
    options.vocab = 400;
    const auto outside = error_of<DataError>([&] { ShardDataset{options}; });
    QVERIFY2(contains(outside, "tiny_val_000000.bin: token id 499 is outside the vocabulary of 400"), outside.c_str());

    // uint32 shards (llm.c's Llama-3 layout).
    const auto wide = path("llmc32");
    QDir().mkpath(QString::fromStdString(wide));
    write_llmc(wide + "/w_val_000000.bin", ramp(2000, 100000), true);
    write_llmc(wide + "/w_train_000001.bin", ramp(2000, 100000, 3), true);
    options.path = wide;
    options.vocab = 100000;
    QCOMPARE(ShardDataset(options).sample(Split::Val, 1, 5).input.size(1), std::int64_t{64});

    // nanoGPT: raw uint16 train.bin and val.bin.
    const auto nano = path("nanogpt");
    QDir().mkpath(QString::fromStdString(nano));
    for (const auto& [name, n] : {std::pair{"train.bin", 6000}, std::pair{"val.bin", 1000}}) {
      std::ofstream out(nano + "/" + name, std::ios::binary);
      for (auto t : ramp(static_cast<std::size_t>(n), 300)) {
        const auto v = static_cast<std::uint16_t>(t);
        out.write(reinterpret_cast<const char*>(&v), 2);
      }
    }
    options.path = nano;
    options.vocab = 300;
    const ShardDataset nanogpt(options);
    QCOMPARE(nanogpt.layout(), std::string("nanogpt"));
    QCOMPARE(nanogpt.split_tokens(Split::Train), std::int64_t{6000});
  }

  void damagedShardsNameTheFile() {
    const auto folder = path("damaged");
    QDir().mkpath(QString::fromStdString(folder));
    const auto shard = folder + "/d_val_000000.bin";
    write_llmc(shard, ramp(100, 50), false, 150);  // the header states more tokens than the file holds
    auto error = error_of<DataError>([&] { MappedShard(shard, MappedShard::Layout::Llmc); });
    QVERIFY2(contains(error, shard + ": the header") && contains(error, "states 150 tokens"), error.c_str());
    std::ofstream(shard, std::ios::binary) << std::string(2048, 'x');
    error = error_of<DataError>([&] { MappedShard(shard, MappedShard::Layout::Llmc); });
    QVERIFY2(contains(error, "is not llm.c's"), error.c_str());
    error = error_of<DataError>([&] { find_shards(folder); });
    QVERIFY2(contains(error, "without a training shard"), error.c_str());
    QVERIFY(contains(error_of<DataError>([&] { find_shards(path("nowhere")); }), "not a folder of token shards"));
    // A run's dataset names the key, and says how to make the folder (the 360M presets name one by default).
    ShardDatasetOptions options;
    options.path = path("fineweb-edu-shards");
    options.context = 64;
    error = error_of<DataError>([&] { ShardDataset{options}; });
    QVERIFY2(contains(error, "data.path: " + options.path + ": no such folder") && contains(error, "prepare"),
             error.c_str());
    options.path = folder;
    error = error_of<DataError>([&] { ShardDataset{options}; });
    QVERIFY2(contains(error, "data.path: ") && contains(error, "without a training shard"), error.c_str());
  }

  /// A manifest's character counts of another type (hand-edited, damaged): estimated on the validation split as for
  /// shards without them, not a JSON type error.
  void manifestCountsOfAnotherTypeAreEstimated() {
    PrepareOptions prep;
    prep.corpus = {corpus_};
    prep.tokenizer = "byte";
    prep.out = path("byte-counts");
    prep.val_fraction = 0.1;
    prep.shard_tokens = 50'000;
    prep.threads = 1;
    const auto result = prepare_shards(prep, nullptr);
    ShardDatasetOptions options;
    options.path = result.folder;
    options.context = 64;
    const auto counted = ShardDataset(options).chars_per_token(Split::Val);
    QVERIFY(counted > 0.5 && counted <= 1.0);  // bytes: a character is one or more of them
    auto manifest = nlohmann::json::parse(read_bytes(result.manifest));
    manifest.erase("chars");
    std::ofstream(result.manifest) << manifest.dump();
    const auto estimated = ShardDataset(options).chars_per_token(Split::Val);
    for (const auto& chars : {nlohmann::json{{"train", "x"}, {"val", 5}}, nlohmann::json(7), nlohmann::json()}) {
      manifest["chars"] = chars;
      std::ofstream(result.manifest) << manifest.dump();
      QCOMPARE(ShardDataset(options).chars_per_token(Split::Val), estimated);
    }
  }

  /// `bench shards` writes the shard set it is told to: a size the file system cannot hold is refused before a byte
  /// is written (it would write until the disk filled), and so are sizes below one and ids that 2 bytes cannot hold,
  /// naming the option.
  void benchShardsRefusesWhatItCannotRun() {
    ShardBenchOptions o;
    o.folder = path("bench-shards");
    o.gigabytes = 1e12;  // a zettabyte
    auto error = error_of<ConfigError>([&] { bench_shards(o); });
    QVERIFY2(contains(error, "--gb 1e+12 does not fit") && contains(error, "GB free"), error.c_str());
    QVERIFY(!std::filesystem::exists(o.folder));
    o.gigabytes = 1e308;
    QVERIFY(contains(error_of<ConfigError>([&] { bench_shards(o); }), "does not fit"));
    o.gigabytes = 0.002;  // a million tokens
    o.batch = 0;
    QVERIFY(contains(error_of<ConfigError>([&] { bench_shards(o); }), "--batch must be at least 1, got 0"));
    o.batch = 2;
    o.vocab = 70'000;
    QVERIFY(contains(error_of<ConfigError>([&] { bench_shards(o); }), "a vocabulary of 70000 ids"));
    o.vocab = 100;
    o.context = 16;
    o.batches = 10;
    const auto r = bench_shards(o);
    QCOMPARE(r.tokens, std::int64_t{1'000'000});
    QVERIFY(r.shards >= 1 && r.batches_per_s > 0);
    QVERIFY(!std::filesystem::exists(o.folder));  // removed without --keep
  }

  void prepareIsDeterministicAndCounted() {
    ROUTELAB_REQUIRE_SENTENCEPIECE();
    const auto one = prepare(path("prepared-1"), 1);
    const auto two = prepare(path("prepared-2"), 2);
    QVERIFY(one.shards >= 3);
    QCOMPARE(one.train_tokens, two.train_tokens);
    QCOMPARE(one.val_tokens, two.val_tokens);
    const auto manifest = nlohmann::json::parse(read_bytes(one.manifest));
    std::int64_t listed = 0;
    for (const auto& s : manifest.at("shards")) {
      listed += s.at("tokens").get<std::int64_t>();
      const auto file = s.at("file").get<std::string>();
      QCOMPARE(read_bytes(path("prepared-1/" + QString::fromStdString(file))),
               read_bytes(path("prepared-2/" + QString::fromStdString(file))));
    }
    QCOMPARE(listed, one.train_tokens + one.val_tokens);
    QCOMPARE(manifest.at("tokenizer").at("kind").get<std::string>(), std::string("sentencepiece"));
    // Each document starts with <s>: here one file, so the validation split's first token only.
    ShardDatasetOptions options;
    options.path = one.folder;
    options.context = 64;
    const ShardDataset data(options);
    QCOMPARE(data.layout(), std::string("routelab"));
    const auto probe = data.probe_tokens();
    QCOMPARE(probe.front(), std::int64_t{1});
    QVERIFY(data.chars_per_token(Split::Val) > 1.5);
    const auto text = data.tokenizer().decode(std::vector<std::int64_t>(probe.begin() + 1, probe.end()));
    QVERIFY2(corpus_head(300'000).rfind(text, 0) == 0, text.c_str());  // the corpus's first words
    const auto again = error_of<ConfigError>([&] { prepare(path("prepared-1"), 1); });
    QVERIFY2(contains(again, "is not empty"), again.c_str());
  }

  /// A validation share too small to hold a token (or a training share left empty) is refused, naming the corpus and
  /// --val-fraction as given, and leaves the folder empty: train would refuse the shards. So is a save interval that
  /// would never save.
  void emptySplitsAreRefused() {
    PrepareOptions o;
    o.corpus = {corpus_};
    o.tokenizer = "byte";
    o.val_fraction = 1e-320;
    o.out = path("no-val");
    const auto tiny = error_of<DataError>([&] { prepare_shards(o, nullptr); });
    QVERIFY2(contains(tiny, corpus_) && contains(tiny, "validation split (--val-fraction 1e-320)"), tiny.c_str());
    QVERIFY(std::filesystem::is_empty(o.out));
    o.val_fraction = 1.0 - 1e-12;
    o.out = path("no-train");
    const auto all = error_of<DataError>([&] { prepare_shards(o, nullptr); });
    QVERIFY2(contains(all, "training split after the validation split"), all.c_str());
    o.val_fraction = 0.1;
    o.save_every_s = std::nan("");
    const auto never = error_of<ConfigError>([&] { prepare_shards(o, nullptr); });
    QVERIFY2(contains(never, "--save-every nan"), never.c_str());
  }

  void stoppedOrFailedPrepareResumesToTheSameShards() {
    ROUTELAB_REQUIRE_SENTENCEPIECE();
    // JSON lines of 300 short documents, small shards (several close within one batch): a preparation stopped
    // (cancel) or failed after some batches (an error after its writes, as a killed process leaves them) continues
    // with `resume` into the same files, byte for byte, as one that never stopped.
    const auto jsonl = path("docs.jsonl");
    {
      const std::string text = corpus_head(300'000);
      std::ofstream out(jsonl, std::ios::binary);
      for (std::size_t at = 0; at < text.size(); at += 1000)
        out << nlohmann::json({{"text", text.substr(at, 1000)}}).dump() << "\n";
    }
    const auto options = [&](const std::string& out, int threads) {
      PrepareOptions o;
      o.corpus = {jsonl};
      o.tokenizer_model = model_;
      o.out = out;
      o.val_fraction = 0.1;
      o.shard_tokens = 3'000;
      o.threads = threads;
      o.save_every_s = 0;  // progress saved after every batch
      return o;
    };
    const auto whole = prepare_shards(options(path("whole"), 1), nullptr);
    QVERIFY(whole.shards >= 8);
    const auto files_of = [](const std::string& folder) {
      std::map<std::string, std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(folder))
        files[entry.path().filename().string()] = read_bytes(entry.path().string());
      return files;
    };
    const auto expected = files_of(whole.folder);

    // Stopped after the third batch.
    std::atomic<bool> stop{false};
    auto stopped = options(path("stopped"), 1);
    stopped.cancel = &stop;
    int batches = 0;
    const auto partial = prepare_shards(stopped, [&](const PrepareProgress&) { stop = ++batches >= 3; });
    QVERIFY(partial.stopped && !partial.resumed);
    QVERIFY(partial.train_tokens + partial.val_tokens > 0 && partial.bytes < whole.bytes);
    QVERIFY(!std::filesystem::exists(path("stopped/routelab-shards.json")));
    auto again = options(path("stopped"), 2);
    const auto fresh = error_of<ConfigError>([&] { prepare_shards(again, nullptr); });
    QVERIFY2(contains(fresh, "unfinished preparation") && contains(fresh, "--resume"), fresh.c_str());
    again.resume = true;
    again.val_fraction = 0.2;
    const auto other = error_of<ConfigError>([&] { prepare_shards(again, nullptr); });
    QVERIFY2(contains(other, kPrepareProgress) && contains(other, "val_fraction was 0.1"), other.c_str());
    again.val_fraction = 0.1;
    // A saved shard gone: named, and the other files left as they were for when it is back.
    const auto before = files_of(path("stopped"));
    const auto first_temp = std::find_if(before.begin(), before.end(), [](const auto& f) {
      return f.first.size() > 8 && f.first.substr(f.first.size() - 8) == ".bin.tmp";
    })->first;
    std::filesystem::rename(path("stopped/" + QString::fromStdString(first_temp)), path("aside.tmp"));
    const auto gone = error_of<DataError>([&] { prepare_shards(again, nullptr); });
    QVERIFY2(contains(gone, first_temp) && contains(gone, "cannot be continued"), gone.c_str());
    QCOMPARE(files_of(path("stopped")).size(), before.size() - 1);
    std::filesystem::rename(path("aside.tmp"), path("stopped/" + QString::fromStdString(first_temp)));
    QVERIFY(files_of(path("stopped")) == before);
    const auto resumed = prepare_shards(again, nullptr);  // two threads now: the same shards
    QVERIFY(resumed.resumed && !resumed.stopped);
    QCOMPARE(resumed.train_tokens, whole.train_tokens);
    QCOMPARE(resumed.documents, whole.documents);
    QVERIFY(files_of(resumed.folder) == expected);  // no progress file, no temporary file left

    // Failed after writing the fifth batch's tokens (kept unsaved): those are cut back and written again.
    batches = 0;
    const auto failed = error_of<DataError>([&] {
      prepare_shards(options(path("failed"), 1), [&](const PrepareProgress&) {
        if (++batches == 5) throw DataError("disk full");
      });
    });
    QVERIFY2(contains(failed, "disk full") && contains(failed, "--resume"), failed.c_str());
    auto rest = options(path("failed"), 1);
    rest.resume = true;
    prepare_shards(rest, nullptr);
    QVERIFY(files_of(path("failed")) == expected);
    // Nothing to continue: said so.
    const auto none = error_of<ConfigError>([&] { prepare_shards(rest, nullptr); });
    QVERIFY2(contains(none, "holds no unfinished preparation"), none.c_str());

    // Killed before its first saved progress: its temporary files alone are begun again; beside a file of the
    // user's, the folder is refused and nothing removed.
    std::filesystem::create_directories(path("killed"));
    std::ofstream(path("killed/shard_val_000000.bin.tmp")) << "partial";
    std::ofstream(path("killed/shard_train_000001.bin.tmp")) << "partial";
    prepare_shards(options(path("killed"), 1), nullptr);
    QVERIFY(files_of(path("killed")) == expected);
    std::filesystem::create_directories(path("mine"));
    std::ofstream(path("mine/shard_val_000000.bin.tmp")) << "partial";
    std::ofstream(path("mine/notes.txt")) << "mine";
    const auto mine = error_of<ConfigError>([&] { prepare_shards(options(path("mine"), 1), nullptr); });
    QVERIFY2(contains(mine, "is not empty"), mine.c_str());
    QCOMPARE(files_of(path("mine")).size(), std::size_t{2});
  }

  void resumedRunOnShardsEqualsUninterrupted() {
    ROUTELAB_REQUIRE_SENTENCEPIECE();  // on the shards prepareIsDeterministicAndCounted made
    const auto prepared = path("prepared-1");
    const auto db = path("runs.sqlite");
    const auto config = resolve_config(
        nlohmann::json::object(),
        {"data.source=shards", "data.path=" + prepared, "data.context=32", "model.n_layer=1", "model.n_embd=32",
         "model.n_head=2", "model.dropout=0", "train.steps=6", "train.batch_size=4", "train.eval_every=3",
         "train.eval_batches=1", "train.checkpoint_every=3", "train.log_every=1", "train.warmup_steps=1",
         "run.threads=2"},
        "test");
    const auto whole = train({config, db, "whole", ""});
    QCOMPARE(whole.status, RunStatus::Finished);
    std::atomic<bool> cancel{false};
    test::StopAfter stop(cancel, 3);
    const auto first = train({config, db, "halves", ""}, &stop, &cancel);
    QCOMPARE(first.status, RunStatus::Stopped);
    const auto resumed = resume(db, first.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    RunStore store(db, false);
    const auto a = store.metric(whole.run_id, "train/loss"), b = store.metric(first.run_id, "train/loss");
    QCOMPARE(a.size(), std::size_t{6});
    QCOMPARE(b.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      QCOMPARE(b[i].step, a[i].step);
      QVERIFY2(a[i].value == b[i].value, (std::to_string(a[i].value) + " vs " + std::to_string(b[i].value)).c_str());
    }
  }

  void runOnShardsOpensForTextWithoutThem() {
    // Analyses of text given to them (generate, score, tasks, the token inspector, a teacher) open a run with its
    // stored tokenizer alone: a run trained on shards that are gone (moved, deleted, on another machine) still
    // scores text, with the same weights and logits, while an evaluation on its data names the missing folder.
    ROUTELAB_REQUIRE_SENTENCEPIECE();
    const auto shards = path("shards-to-move");
    std::filesystem::copy(path("prepared-1"), shards, std::filesystem::copy_options::recursive);
    const auto db = path("moved.sqlite");
    const auto config = resolve_config(
        nlohmann::json::object(),
        {"data.source=shards", "data.path=" + shards, "data.context=32", "model.n_layer=2", "model.n_embd=32",
         "model.n_head=2", "train.steps=4", "train.batch_size=4", "train.eval_every=4", "train.eval_batches=1",
         "train.checkpoint_every=4", "train.warmup_steps=1", "run.threads=2"},
        "test");
    const auto outcome = train({config, db, "on-shards", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const std::string text = "And God said, Let there be light: and there was light.";
    const auto full = load_run(db, outcome.run_id);
    const auto ids = full.tokenizer().encode(text);
    const auto input = torch::tensor(ids, torch::kLong).unsqueeze(0);
    torch::NoGradGuard no_grad;
    const auto expected = full.model->forward(input).logits;

    std::filesystem::rename(shards, path("shards-moved"));
    const auto opened = load_run(db, outcome.run_id, {}, 0, RunData::Tokenizer);
    QVERIFY(!opened.dataset);
    QCOMPARE(QString::fromStdString(opened.tokenizer().kind()), QStringLiteral("sentencepiece"));
    QCOMPARE(opened.tokenizer().vocab_size(), full.tokenizer().vocab_size());
    QCOMPARE(opened.context_length, std::int64_t{32});
    QVERIFY(opened.tokenizer().encode(text) == ids);
    QVERIFY(torch::equal(opened.model->forward(input).logits, expected));
    const auto lambada = path("lambada.jsonl");
    std::ofstream(lambada) << "{\"text\": \"" << text << "\"}\n";
    ZeroShotOptions options;
    options.tasks = {parse_task_spec(lambada)};
    QCOMPARE(evaluate_zero_shot(db, outcome.run_id, options).tasks.at(0).examples, std::int64_t{1});

    const auto error = error_of<DataError>([&] { load_run(db, outcome.run_id); });
    QVERIFY2(contains(error, "run " + std::to_string(outcome.run_id)) && contains(error, shards + ": no such folder"),
             error.c_str());
  }
};

}  // namespace test_shards

ROUTELAB_TEST_SUITE(test_shards, TestShards)
#include "test_shards.moc"
