// Subword tokenizers (issue 22): SentencePiece BPE and unigram models trained on a corpus streamed from disk, their
// round trips (unseen characters through byte pieces), the JSON form that carries the model, bad model files and
// documents, the corpus reader's layouts and errors, a corpus dataset on subwords, and a run that keeps decoding
// with the tokenizer it trained with after the model file is replaced.
#include <QtTest/QtTest>
#include <QTemporaryDir>

#include <fstream>
#include <string>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/data/corpus_files.h"
#include "core/data/dataset.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/text_corpus.h"
#include "core/data/tokenizer_training.h"
#include "core/report/builders/catalog.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/base64.h"
#include "core/util/errors.h"
#include "tests/data_test_support.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_subword {

using namespace routelab;

namespace {

std::string write_file(const QTemporaryDir& dir, const QString& name, const std::string& bytes) {
  const auto path = dir.filePath(name).toStdString();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

/// Trains a quiet two-thread model on `corpus`.
TokenizerTrainingResult train_model(const std::string& corpus, const std::string& out, std::int64_t vocab,
                                    const std::string& type = "bpe") {
  TokenizerTrainingOptions options;
  options.corpus = {corpus};
  options.out = out;
  options.vocab_size = vocab;
  options.type = type;
  options.threads = 2;
  options.character_coverage = 1.0;
  options.log = false;
  return train_sentencepiece(options, nullptr);
}

using test::contains;
using test::corpus_head;
using test::error_of;

const std::string kUnseen = "naïve café — 日本語 🙂\n\ttabs  and   spaces \n\nIn the beginning";

}  // namespace

class TestSubword : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string corpus_, bpe_path_;

 private slots:
  void initTestCase() {
    ROUTELAB_REQUIRE_SENTENCEPIECE();
    QVERIFY(dir_.isValid());
    corpus_ = write_file(dir_, "kjv-head.txt", corpus_head(400'000));
    bpe_path_ = dir_.filePath("bpe.model").toStdString();
    std::vector<TokenizerTrainingProgress> seen;
    TokenizerTrainingOptions options;
    options.corpus = {corpus_};
    options.out = bpe_path_;
    options.vocab_size = 600;
    options.threads = 2;
    options.log = false;
    const auto result = train_sentencepiece(options, [&](const TokenizerTrainingProgress& p) { seen.push_back(p); });
    QCOMPARE(result.vocab_size, std::int64_t{600});
    QVERIFY(result.lines > 1000);
    QVERIFY(!seen.empty());
    QCOMPARE(seen.back().bytes_read, seen.back().bytes_total);  // the last report is at the end of the corpus
    QCOMPARE(seen.back().lines, result.lines);
  }

  void bpeAndUnigramRoundTripAnyText() {
    const auto unigram = train_model(corpus_, dir_.filePath("unigram.model").toStdString(), 600, "unigram");
    for (const auto& path : {bpe_path_, unigram.path}) {
      const auto tok = SentencePieceTokenizer::from_file(path);
      QCOMPARE(tok->kind(), std::string("sentencepiece"));
      QCOMPARE(tok->vocab_size(), std::int64_t{600});
      // Characters never seen in training come back through byte pieces; white space is kept as it is.
      QCOMPARE(tok->decode(tok->encode(kUnseen)), kUnseen);
      // Subwords compress the text they were trained on: under half a token per byte.
      const auto text = corpus_head(20'000);
      const auto ids = tok->encode(text);
      QVERIFY2(ids.size() * 2 < text.size(), std::to_string(ids.size()).c_str());
      QCOMPARE(tok->decode(ids), text);
    }
  }

  void tokenTextShowsSubwordBoundaries() {
    const auto tok = SentencePieceTokenizer::from_file(bpe_path_);
    const auto ids = tok->encode("the LORD\n");
    std::string shown;
    for (auto id : ids) shown += tok->token_text(id);
    QCOMPARE(shown, std::string(" the LORD⏎"));  // the word-start mark as a space, the newline's byte as ⏎
    // Generated tokens read after their prompt: the word-start space SentencePiece drops at a sequence's start stays.
    const auto sentence = tok->encode("In the beginning God created"), prompt = tok->encode("In the beginning");
    QVERIFY(std::equal(prompt.begin(), prompt.end(), sentence.begin()));  // words are split one by one
    const std::vector<std::int64_t> rest(sentence.begin() + static_cast<std::ptrdiff_t>(prompt.size()), sentence.end());
    QCOMPARE(tok->decode(rest), std::string("God created"));  // decoded alone, the word-start space is gone
    QCOMPARE(tok->decode_after(prompt, rest), std::string(" God created"));
    QCOMPARE(ByteTokenizer().decode_after({65}, {32, 66}), std::string(" B"));
    QVERIFY(contains(error_of<DataError>([&] { tok->token_text(600); }), "outside 0..599"));
    QVERIFY(contains(error_of<DataError>([&] { tok->decode({-1}); }), "outside 0..599"));
  }

  void jsonCarriesTheModel() {
    const auto tok = SentencePieceTokenizer::from_file(bpe_path_);
    const auto doc = nlohmann::json::parse(tok->to_json().dump());
    const auto copy = Tokenizer::from_json(doc);
    QCOMPARE(copy->kind(), std::string("sentencepiece"));
    QCOMPARE(copy->encode(kUnseen), tok->encode(kUnseen));
    QCOMPARE(static_cast<const SentencePieceTokenizer&>(*copy).hash(), tok->hash());
    QCOMPARE(doc.at("source").get<std::string>(), bpe_path_);

    auto damaged = doc;
    auto bytes = *base64_decode(doc.at("model").get<std::string>());
    bytes[bytes.size() / 2] ^= 0x20;
    damaged["model"] = base64_encode(bytes);
    QVERIFY(contains(error_of<DataError>([&] { Tokenizer::from_json(damaged); }), "does not match its hash"));
    damaged["source"] = 5;  // a source of another type: the error names the stored tokenizer instead
    QVERIFY(contains(error_of<DataError>([&] { Tokenizer::from_json(damaged); }), "stored tokenizer does not match"));
    damaged["model"] = "not base64!";
    QVERIFY(contains(error_of<DataError>([&] { Tokenizer::from_json(damaged); }), "not Base64"));
    damaged.erase("model");
    QVERIFY(contains(error_of<DataError>([&] { Tokenizer::from_json(damaged); }), "\"model\""));
  }

  void badModelFilesNameTheFile() {
    const auto missing = dir_.filePath("missing.model").toStdString();
    QVERIFY(contains(error_of<DataError>([&] { SentencePieceTokenizer::from_file(missing); }), missing));
    const auto text = write_file(dir_, "text.model", "this is not a model\n");
    const auto error = error_of<DataError>([&] { SentencePieceTokenizer::from_file(text); });
    QVERIFY2(contains(error, text + ": not a SentencePiece model"), error.c_str());
    const auto empty = write_file(dir_, "empty.model", "");
    QVERIFY(contains(error_of<DataError>([&] { SentencePieceTokenizer::from_file(empty); }), "empty"));
  }

  void trainingRefusesBadOptions() {
    TokenizerTrainingOptions options;
    options.corpus = {corpus_};
    options.out = dir_.filePath("x.model").toStdString();
    options.type = "wordpiece";
    QVERIFY(contains(error_of<ConfigError>([&] { train_sentencepiece(options, nullptr); }), "--type 'wordpiece'"));
    options.type = "bpe";
    options.corpus = {dir_.filePath("nowhere.txt").toStdString()};
    QVERIFY(contains(error_of<DataError>([&] { train_sentencepiece(options, nullptr); }), "nowhere.txt"));
    // A vocabulary the corpus cannot fill: SentencePiece's reason, and no file written.
    options.corpus = {write_file(dir_, "tiny.txt", "ab ab ab\n")};
    options.vocab_size = 5000;
    options.log = false;
    const auto error = error_of<DataError>([&] { train_sentencepiece(options, nullptr); });
    QVERIFY2(contains(error, "tiny.txt: SentencePiece could not train"), error.c_str());
    QVERIFY(!QFile::exists(QString::fromStdString(options.out)));
  }

  void corpusReaderReadsFoldersAndJsonLines() {
    QTemporaryDir folder;
    write_file(folder, "b.jsonl", "{\"text\": \"second\\nfile\"}\n\n{\"text\": \"third\", \"id\": 3}\n");
    write_file(folder, "a.txt", "first line\nno newline at the end");
    write_file(folder, ".hidden.txt", "never read\n");
    const auto files = corpus_files(folder.path().toStdString());
    QCOMPARE(files.size(), std::size_t{2});
    CorpusReader reader({folder.path().toStdString()});
    std::vector<std::string> texts;
    std::vector<bool> ends;
    CorpusReader::Piece piece;
    while (reader.next(piece)) {
      texts.push_back(piece.text);
      ends.push_back(piece.ends_document);
    }
    QCOMPARE(texts, (std::vector<std::string>{"first line\n", "no newline at the end", "second\nfile", "third"}));
    QCOMPARE(ends, (std::vector<bool>{false, true, true, true}));
    QCOMPARE(reader.documents(), std::int64_t{3});
    QCOMPARE(reader.bytes_read(), reader.total_bytes());

    const auto bad = write_file(folder, "bad.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
    CorpusReader bad_reader({bad});
    QVERIFY(bad_reader.next(piece));
    QVERIFY(contains(error_of<DataError>([&] { bad_reader.next(piece); }), bad + ":2: no string field \"text\""));
    const auto latin1 = write_file(folder, "latin1.txt", "caf\xe9\n");
    CorpusReader latin1_reader({latin1});
    QVERIFY(contains(error_of<DataError>([&] { latin1_reader.next(piece); }), latin1 + ":1: not valid UTF-8"));
    QTemporaryDir empty;
    QVERIFY(contains(error_of<DataError>([&] { corpus_files(empty.path().toStdString()); }), "holds no file"));
  }

  void corpusDatasetOnSubwords() {
    auto data = resolve_config(nlohmann::json::object(),
                               {"data.source=file", "data.path=" + corpus_, "data.tokenizer=sentencepiece",
                                "data.tokenizer_model=" + bpe_path_, "data.context=64"},
                               "test")
                    .data();
    const auto dataset = make_dataset(data);
    QCOMPARE(dataset->tokenizer().vocab_size(), std::int64_t{600});
    QVERIFY(dataset->chars_per_token(Split::Val) > 2.0);  // bits per character stay comparable with char runs
    const auto batch = dataset->sample(Split::Train, 4, 7);
    QCOMPARE(batch.input.sizes(), (c10::IntArrayRef{4, 64}));
    QVERIFY(batch.input.max().item<std::int64_t>() < 600);
    // The key is required, and a missing model names the key and the file.
    const auto no_model = error_of<ConfigError>([&] {
      resolve_config(nlohmann::json::object(), {"data.tokenizer=sentencepiece"}, "test");
    });
    QVERIFY2(contains(no_model, "data.tokenizer_model: required"), no_model.c_str());
    data["tokenizer_model"] = dir_.filePath("gone.model").toStdString();
    const auto gone = error_of<DataError>([&] { make_dataset(data); });
    QVERIFY2(contains(gone, "data.tokenizer_model: ") && contains(gone, "gone.model"), gone.c_str());
  }

  void runKeepsTheTokenizerItTrainedWith() {
    QTemporaryDir run_dir;
    const auto model = run_dir.filePath("tok.model").toStdString();
    QVERIFY(QFile::copy(QString::fromStdString(bpe_path_), QString::fromStdString(model)));
    const auto trained_with = SentencePieceTokenizer::from_file(model)->hash();
    const auto db = run_dir.filePath("runs.sqlite").toStdString();
    const auto config = resolve_config(
        nlohmann::json::object(),
        {"data.source=file", "data.path=" + corpus_, "data.tokenizer=sentencepiece", "data.tokenizer_model=" + model,
         "data.context=32", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "train.steps=6",
         "train.batch_size=4", "train.eval_every=3", "train.eval_batches=1", "train.checkpoint_every=3",
         "train.warmup_steps=1", "run.threads=2"},
        "test");
    std::atomic<bool> cancel{false};
    test::StopAfter stop(cancel, 3);
    const auto outcome = train({config, db, "subword", ""}, &stop, &cancel);
    QCOMPARE(outcome.status, RunStatus::Stopped);

    // The file is replaced by another model (a different vocabulary): the run still reads with its own.
    train_model(corpus_, model, 360);
    QVERIFY(SentencePieceTokenizer::from_file(model)->hash() != trained_with);
    const auto stored = nlohmann::json::parse(RunStore(db, false).run_tokenizer(outcome.run_id));
    QCOMPARE(stored.at("hash").get<std::string>(), trained_with);
    {
      const auto run = load_run(db, outcome.run_id);
      QCOMPARE(run.dataset->tokenizer().vocab_size(), std::int64_t{600});
      QCOMPARE(run.dataset->tokenizer().decode(run.dataset->tokenizer().encode(kUnseen)), kUnseen);
    }
    // A damaged stored tokenizer: opening the run and resuming it name the store and the run, and change nothing.
    const auto run_text = db + ": run " + std::to_string(outcome.run_id);
    auto damaged = stored;
    damaged["model"] = "not Base64!";
    test::RawDb(db).exec("UPDATE tokenizers SET document = '" + damaged.dump() + "'");
    FigureRequest figure;  // a paper figure that prices the run's head by its vocabulary
    figure.name = "dtrnet-fig4";
    figure.run_ids = {outcome.run_id};
    for (const auto& error : {error_of<DataError>([&] { load_run(db, outcome.run_id); }),
                              error_of<DataError>([&] { resume(db, outcome.run_id); }),
                              error_of<DataError>([&] { build_figure(RunStore(db, false), figure); })})
      QVERIFY2(contains(error, run_text) && contains(error, "not Base64"), error.c_str());
    test::RawDb(db).exec("UPDATE tokenizers SET document = '" + stored.dump() + "'");
    QCOMPARE(RunStore(db, false).run(outcome.run_id)->status, RunStatus::Stopped);
    // Resume continues on the stored tokenizer too (the new file's 360 pieces would not fit the embedding).
    const auto resumed = resume(db, outcome.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    QCOMPARE(resumed.last_step, std::int64_t{6});
  }
};

}  // namespace test_subword

ROUTELAB_TEST_SUITE(test_subword, TestSubword)
#include "test_subword.moc"
