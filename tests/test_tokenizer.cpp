// Tokenizer tests: byte/char round trips, the training-only char vocabulary and its unknown id, strict UTF-8,
// display texts, and the JSON round trip of every kind.
#include <QtTest/QtTest>

#include <algorithm>
#include <string>
#include <vector>

#include "core/data/synthetic_tasks.h"
#include "core/data/tokenizer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_tokenizer {

using namespace routelab;

namespace {

const std::string kMixed = "naïve café — 日本語 🙂\n";

std::vector<std::int64_t> ids(std::initializer_list<std::int64_t> list) { return list; }

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT

 private slots:
  void byteRoundTrip() {
    ByteTokenizer tok;
    QCOMPARE(tok.vocab_size(), 256);
    const auto encoded = tok.encode(kMixed);
    QCOMPARE(encoded.size(), kMixed.size());
    QVERIFY(std::all_of(encoded.begin(), encoded.end(), [](std::int64_t id) { return id >= 0 && id < 256; }));
    QCOMPARE(tok.decode(encoded), kMixed);
    // Any bytes, including invalid UTF-8 and NUL.
    const std::string raw("\xff\x00\xc0\x80 x", 6);
    QCOMPARE(tok.decode(tok.encode(raw)), raw);
    QCOMPARE(tok.encode(raw)[0], 255);
  }

  void byteTokenText() {
    ByteTokenizer tok;
    QCOMPARE(tok.token_text('a'), std::string("a"));
    QCOMPARE(tok.token_text(' '), std::string(" "));
    QCOMPARE(tok.token_text('\n'), std::string("⏎"));
    QCOMPARE(tok.token_text('\t'), std::string("⇥"));
    QCOMPARE(tok.token_text(0xAB), std::string("<0xAB>"));
    QCOMPARE(tok.token_text(0x00), std::string("<0x00>"));
    QCOMPARE(tok.token_text(0x7F), std::string("<0x7F>"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.token_text(256));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.decode(ids({-1})));
  }

  void charRoundTrip() {
    const CharTokenizer tok = CharTokenizer::build(kMixed);
    const auto encoded = tok.encode(kMixed);
    QCOMPARE(static_cast<std::int64_t>(encoded.size()), static_cast<std::int64_t>(utf8_to_u32(kMixed).size()));
    QCOMPARE(tok.decode(encoded), kMixed);
    QVERIFY(std::find(encoded.begin(), encoded.end(), tok.unknown_id()) == encoded.end());
    QCOMPARE(tok.token_text(tok.encode("日")[0]), std::string("日"));
    QCOMPARE(tok.token_text(tok.encode("🙂")[0]), std::string("🙂"));
    QCOMPARE(tok.token_text(tok.encode("\n")[0]), std::string("⏎"));
    QCOMPARE(tok.token_text(tok.encode(" ")[0]), std::string(" "));
    QCOMPARE(tok.token_text(tok.unknown_id()), std::string("<unk>"));
  }

  void charVocabSortedFromTrainingOnly() {
    const CharTokenizer tok = CharTokenizer::build("banana bread\n");
    const std::vector<char32_t> expected = {U'\n', U' ', U'a', U'b', U'd', U'e', U'n', U'r'};
    QVERIFY(tok.vocab() == expected);
    QCOMPARE(tok.vocab_size(), static_cast<std::int64_t>(expected.size()) + 1);
    QCOMPARE(tok.unknown_id(), tok.vocab_size() - 1);
    QVERIFY(std::is_sorted(tok.vocab().begin(), tok.vocab().end()));
    QCOMPARE(tok.encode("ab"), ids({2, 3}));
  }

  void charUnknown() {
    const CharTokenizer tok = CharTokenizer::build("abc");
    const auto encoded = tok.encode("aZé🙂c");
    QCOMPARE(encoded, ids({0, tok.unknown_id(), tok.unknown_id(), tok.unknown_id(), 2}));
    QCOMPARE(tok.decode(encoded), std::string("a\uFFFD\uFFFD\uFFFDc"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.decode(ids({tok.vocab_size()})));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.token_text(-1));
  }

  void invalidUtf8_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<int>("offset");
    QTest::newRow("overlong slash") << QByteArray("ab\xc0\xaf", 4) << 2;
    QTest::newRow("overlong 3-byte") << QByteArray("\xe0\x80\xaf", 3) << 0;
    QTest::newRow("overlong 4-byte") << QByteArray("x\xf0\x80\x80\xaf", 5) << 1;
    QTest::newRow("lone continuation") << QByteArray("abc\x80", 4) << 3;
    QTest::newRow("truncated 2-byte") << QByteArray("a\xc3", 2) << 1;
    QTest::newRow("truncated 4-byte") << QByteArray("\xf0\x9f\x99", 3) << 0;
    QTest::newRow("interrupted") << QByteArray("\xe6\x97x", 3) << 0;
    QTest::newRow("surrogate") << QByteArray("ok\xed\xa0\x80", 5) << 2;
    QTest::newRow("above U+10FFFF") << QByteArray("\xf4\x90\x80\x80", 4) << 0;
    QTest::newRow("0xFF") << QByteArray("\xff", 1) << 0;
  }

  void invalidUtf8() {
    QFETCH(QByteArray, bytes);
    QFETCH(int, offset);
    const std::string_view text(bytes.constData(), static_cast<std::size_t>(bytes.size()));
    QCOMPARE(find_invalid_utf8(text), static_cast<std::size_t>(offset));
    QVERIFY_THROWS_EXCEPTION(DataError, utf8_to_u32(text));
    QVERIFY_THROWS_EXCEPTION(DataError, CharTokenizer::build(text));
    const CharTokenizer tok = CharTokenizer::build("abc");
    try {
      tok.encode(text);
      QFAIL("no DataError");
    } catch (const DataError& e) {
      QVERIFY2(std::string(e.what()).find("offset " + std::to_string(offset)) != std::string::npos, e.what());
    }
  }

  void validUtf8Edges() {
    // The smallest and largest code point of each length are valid.
    const std::u32string edges = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
    const std::string utf8 = u32_to_utf8(edges);
    QCOMPARE(find_invalid_utf8(utf8), std::string_view::npos);
    QVERIFY(utf8_to_u32(utf8) == edges);
    QVERIFY(utf8_to_u32(kMixed) == std::u32string(U"naïve café — 日本語 🙂\n"));
  }

  void jsonRoundTrip() {
    const CharTokenizer chars = CharTokenizer::build(kMixed);
    const ByteTokenizer bytes;
    const TaskTokenizer task(32);
    for (const Tokenizer* original : std::vector<const Tokenizer*>{&chars, &bytes, &task}) {
      const nlohmann::json doc = original->to_json();
      QCOMPARE(doc.at("kind").get<std::string>(), original->kind());
      const auto restored = Tokenizer::from_json(nlohmann::json::parse(doc.dump()));
      QCOMPARE(restored->kind(), original->kind());
      QCOMPARE(restored->vocab_size(), original->vocab_size());
      QCOMPARE(restored->to_json(), doc);
      for (std::int64_t id = 0; id < original->vocab_size(); ++id) {
        QCOMPARE(restored->token_text(id), original->token_text(id));
      }
    }
    const auto restored = Tokenizer::from_json(chars.to_json());
    QCOMPARE(restored->decode(restored->encode(kMixed)), kMixed);
    QCOMPARE(chars.to_json().at("vocab").size(), chars.vocab().size());
  }

  void jsonGarbage_data() {
    QTest::addColumn<QString>("doc");
    QTest::newRow("null") << "null";
    QTest::newRow("number") << "42";
    QTest::newRow("string") << "\"char\"";
    QTest::newRow("array") << "[1, 2]";
    QTest::newRow("no kind") << R"({"vocab": [97]})";
    QTest::newRow("kind not string") << R"({"kind": 3})";
    QTest::newRow("unknown kind") << R"({"kind": "bpe"})";
    QTest::newRow("char without vocab") << R"({"kind": "char"})";
    QTest::newRow("char vocab not array") << R"({"kind": "char", "vocab": "abc"})";
    QTest::newRow("char vocab strings") << R"({"kind": "char", "vocab": ["a"]})";
    QTest::newRow("char vocab negative") << R"({"kind": "char", "vocab": [-1]})";
    QTest::newRow("char vocab too large") << R"({"kind": "char", "vocab": [1114112]})";
    QTest::newRow("char vocab surrogate") << R"({"kind": "char", "vocab": [55296]})";
    QTest::newRow("char vocab unsorted") << R"({"kind": "char", "vocab": [98, 97]})";
    QTest::newRow("char vocab duplicate") << R"({"kind": "char", "vocab": [97, 97]})";
    QTest::newRow("task without symbols") << R"({"kind": "task"})";
    QTest::newRow("task zero symbols") << R"({"kind": "task", "symbols": 0})";
    QTest::newRow("task symbols float") << R"({"kind": "task", "symbols": 3.5})";
  }

  void jsonGarbage() {
    QFETCH(QString, doc);
    const auto parsed = nlohmann::json::parse(doc.toStdString());
    QVERIFY_THROWS_EXCEPTION(DataError, Tokenizer::from_json(parsed));
  }

  void taskTokenizer() {
    const TaskTokenizer tok(32);
    QCOMPARE(tok.vocab_size(), 35);
    QCOMPARE(tok.token_text(3), std::string("3"));
    QCOMPARE(tok.token_text(32), std::string("<bos>"));
    QCOMPARE(tok.token_text(33), std::string("<sep>"));
    QCOMPARE(tok.token_text(34), std::string("<eos>"));
    const auto encoded = tok.encode(" <bos> 3 31\n0 <sep>\t0 3 31 <eos> ");
    QCOMPARE(encoded, ids({32, 3, 31, 0, 33, 0, 3, 31, 34}));
    QCOMPARE(tok.decode(encoded), std::string("<bos> 3 31 0 <sep> 0 3 31 <eos>"));
    QVERIFY(tok.encode("").empty());
    QVERIFY_THROWS_EXCEPTION(DataError, tok.encode("32"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.encode("-1"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.encode("3x"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.encode("<pad>"));
    QVERIFY_THROWS_EXCEPTION(DataError, tok.token_text(35));
  }
};

}  // namespace test_tokenizer

ROUTELAB_TEST_SUITE(test_tokenizer, TestTokenizer)
#include "test_tokenizer.moc"
