// routelab-cli as a user runs it: invalid arguments end with a non-zero exit and a message naming the option,
// before anything is trained or stored.
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <tuple>

#include <torch/version.h>

#include "core/models/dllm_eviction.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/util/process.h"

#include "tests/data_test_support.h"
#include "tests/suite.h"

namespace test_cli {

class TestCli : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  /// Runs the CLI with `args` (ROUTELAB_HOME in a scratch folder); returns exit code and everything it printed.
  /// `wait_policy` and `blas_core` set OMP_WAIT_POLICY and OPENBLAS_CORETYPE as a user would (unset when empty).
  std::pair<int, QString> run(const QStringList& args, const QString& wait_policy = {}, const QString& blas_core = {}) {
    QProcess p;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("ROUTELAB_HOME", home_.path());
    for (const auto* name : {"OMP_WAIT_POLICY", "ROUTELAB_RELAUNCHED", "OPENBLAS_CORETYPE", "ROUTELAB_OPENBLAS_CHOSE"})
      env.remove(name);
    if (!wait_policy.isEmpty()) env.insert("OMP_WAIT_POLICY", wait_policy);
    if (!blas_core.isEmpty()) env.insert("OPENBLAS_CORETYPE", blas_core);
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(qEnvironmentVariable("ROUTELAB_CLI"), args);
    if (!p.waitForFinished(120000)) return {-1, "timed out"};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAll())};
  }

  /// The JSON document a command printed (from its first '{' to its last '}': log lines may come before it).
  static QJsonDocument json_in(const QString& output) {
    const auto begin = output.indexOf('{');
    return QJsonDocument::fromJson(output.mid(begin, output.lastIndexOf('}') - begin + 1).toUtf8());
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY2(QFile::exists(qEnvironmentVariable("ROUTELAB_CLI")), "ROUTELAB_CLI not set"); }

  void badArgumentsNameTheOption_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("named");
    const QString db = home_.filePath("cli.sqlite");
    QTest::newRow("steps negative") << QStringList{"train", "--db", db, "--steps", "-5"} << "--steps";
    QTest::newRow("steps zero") << QStringList{"train", "--db", db, "--steps", "0"} << "--steps";
    QTest::newRow("seed negative") << QStringList{"train", "--db", db, "--seed", "-3"} << "--seed";
    QTest::newRow("threads negative") << QStringList{"train", "--db", db, "--threads", "-2"} << "--threads";
    QTest::newRow("device unknown") << QStringList{"train", "--db", db, "--device", "gpu"} << "run.device";
    QTest::newRow("config is a directory") << QStringList{"train", "--db", db, "--config", home_.path()}
                                           << "is a directory, not a config file";
    QTest::newRow("device index") << QStringList{"train", "--db", db, "--device", "cuda:x"} << "run.device";
    QTest::newRow("eval batches zero") << QStringList{"eval", "1", "--db", db, "--batches", "0"} << "--batches";
    QTest::newRow("eval batch size") << QStringList{"eval", "1", "--db", db, "--batch-size", "-1"} << "--batch-size";
    QTest::newRow("corpus is a device") << QStringList{"train", "--db", db, "--set", "data.source=file", "--set",
                                                       "data.path=/dev/zero"}
                                        << "/dev/zero: not a regular file";
    QTest::newRow("takeover negative") << QStringList{"resume", "1", "--db", db, "--takeover-after", "-1"}
                                       << "--takeover-after";
    QTest::newRow("bench steps") << QStringList{"bench", "train-step", "--steps", "0"} << "--steps";
    QTest::newRow("bench shape") << QStringList{"bench", "train-step", "--shape", "gpt5"} << "--shape";
    QTest::newRow("bench device") << QStringList{"bench", "train-step", "--device", "tpu"} << "tpu";
    QTest::newRow("bench forward precision") << QStringList{"bench", "forward", "--precision", "fp16"} << "--precision";
    QTest::newRow("bench forward graph on the cpu")
        << QStringList{"bench", "forward", "--train", "--quick", "--cuda-graph"} << "--cuda-graph: needs";
    QTest::newRow("bench forward eval graph on the cpu")
        << QStringList{"bench", "forward", "--quick", "--cuda-graph"} << "--cuda-graph: needs a CUDA device";
    QTest::newRow("bench eviction kv heads") << QStringList{"bench", "eviction", "--heads", "6", "--kv-heads", "4"}
                                             << "--kv-heads: 4 does not divide --heads 6";
    QTest::newRow("bench routing width") << QStringList{"bench", "routing", "--embd", "-1"} << "--embd: -1 must be";
    QTest::newRow("bench routing heads") << QStringList{"bench", "routing", "--embd", "64", "--heads", "3"}
                                         << "--heads: 3 must divide --embd 64";
    QTest::newRow("bench routing share") << QStringList{"bench", "routing", "--fractions", "0.5,2"} << "--fractions";
    QTest::newRow("bench speed warm-up") << QStringList{"bench", "speed", "--warmup", "-1"} << "--warmup";
    QTest::newRow("bench step without a config") << QStringList{"bench", "step"} << "--preset P or --config FILE";
    QTest::newRow("bench step distilled dense") << QStringList{"bench", "step", "--preset", "tiny", "--set",
                                                               "train.distill_from=3"}
                                                << "train.distill_from: Dense";
    QTest::newRow("bench step progress") << QStringList{"bench", "step", "--preset", "tiny", "--progress", "2"}
                                         << "--progress";
    QTest::newRow("bench step against") << QStringList{"bench", "step", "--preset", "tiny", "--against", "nope"}
                                        << "unknown preset 'nope'";
    QTest::newRow("routing breakdown grouping") << QStringList{"routing-breakdown", "1", "--db", db, "--by", "colour"}
                                                << "--by: unknown grouping 'colour'";
    QTest::newRow("routing breakdown tokens") << QStringList{"routing-breakdown", "1", "--db", db, "--tokens", "0"}
                                              << "--tokens";
    QTest::newRow("bench step against-set alone")
        << QStringList{"bench", "step", "--preset", "tiny", "--against-set", "model.n_layer=3"} << "--against P";
    QTest::newRow("tasks without a task") << QStringList{"tasks", "1", "--db", db} << "--task";
    QTest::newRow("tasks file missing") << QStringList{"tasks", "1", "--db", db, "--task", "piqa=none.jsonl"}
                                        << "none.jsonl: cannot read the task file";
    QTest::newRow("tasks format unknown") << QStringList{"tasks", "1", "--db", db, "--task", "x.jsonl:squad"}
                                          << "unknown task format 'squad'";
  }
  void badArgumentsNameTheOption() {
    QFETCH(QStringList, args);
    QFETCH(QString, named);
    const auto [code, output] = run(args);
    QVERIFY2(code > 0, qPrintable(QString("exit %1: %2").arg(code).arg(output)));
    QVERIFY2(output.contains(named), qPrintable(output));
    QVERIFY2(!output.contains("terminate called"), qPrintable(output));
    QVERIFY(!QFile::exists(home_.filePath("checkpoints")));  // nothing trained (the slots below train later)
  }

  void presetListKeepsItsColumnsApart() {
    // Each row: the preset, the architecture and the description, separated by at least two spaces and aligned.
    const auto [code, output] = run({"presets"});
    QCOMPARE(code, 0);
    const QStringList lines = output.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QVERIFY(lines.size() > 10);
    const qsizetype description = lines.front().indexOf(QStringLiteral("DESCRIPTION"));
    QVERIFY(description > 0);
    for (const QString& line : lines) {
      QVERIFY2(line.mid(description - 2, 2) == QStringLiteral("  "), qPrintable(line));
      QVERIFY2(line.simplified().split(QLatin1Char(' ')).size() >= 3, qPrintable(line));
    }
    QVERIFY(output.contains(QRegularExpression(QStringLiteral("\\nvanilla-classifier +vanilla-classifier  +TAGAT"))));
  }

  void architectureOptionsSayWhatTheyAreReadFor() {
    // One architecture's options, a row each with what it is read for, its help below; --json the same entry.
    const auto [code, output] = run({"architectures", "dtrnet"});
    QCOMPARE(code, 0);
    for (const auto& [key, use] : {std::pair{"attention", "compact \\| masked +for inference"},
                                   std::pair{"aux_coeff", "in training only"}, std::pair{"routing", "skip"}})
      QVERIFY2(output.contains(QRegularExpression(QStringLiteral("\n%1 +[a-z]+ +.*%2\n    \\S").arg(key, use))),
               qPrintable(output));
    QVERIFY2(!output.contains(QRegularExpression(QStringLiteral("\nrouting .*(for inference|in training only)"))),
             qPrintable(output));
    const auto [json_code, json_output] = run({"architectures", "dllm", "--json"});
    QCOMPARE(json_code, 0);
    const auto entry = json_in(json_output).object();
    QCOMPARE(entry["id"].toString(), QStringLiteral("dllm"));
    QStringList inference;
    for (const auto& option : entry["options"].toArray())
      if (option.toObject()["inference"].toBool()) inference << option.toObject()["key"].toString();
    QCOMPARE(inference, (QStringList{"rope_scaling", "rope_factor", "rope_original_context", "threshold"}));
    const auto [bad_code, bad_output] = run({"architectures", "no-such"});
    QCOMPARE(bad_code, 2);
    QVERIFY2(bad_output.contains(QStringLiteral("'no-such' is not a registered architecture (dense, ")),
             qPrintable(bad_output));
  }

  void benchForwardInBothPrecisions_data() {
    QTest::addColumn<QString>("precision");
    QTest::addColumn<bool>("train");
    QTest::newRow("fp32") << "fp32" << false;
    QTest::newRow("bf16") << "bf16" << false;
    QTest::newRow("fp32 training step") << "fp32" << true;
    QTest::newRow("bf16 training step") << "bf16" << true;
  }
  void benchForwardInBothPrecisions() {
    // A small shape: every row timed and priced below dense, the precision and mode reported, the routers on the
    // forced fraction in both precisions (routers compute in fp32 under bf16 autocast: Fp32Router). A training step
    // routes MoD by its top-k at the forced capacity and DTRNet by the forced biases, so both price below dense in
    // training too.
    QFETCH(QString, precision);
    QFETCH(bool, train);
    QStringList args{"bench", "forward", "--lengths", "64,128", "--embd", "64", "--layers", "4", "--heads", "4",
                     "--reps", "1", "--warmup", "0", "--archs", "mod,dtrnet", "--fractions", "0.3", "--precision",
                     precision, "--threads", "1", "--json"};
    if (train) args << "--train";
    const auto [code, output] = run(args);
    QVERIFY2(code == 0, qPrintable(output));
    const auto json = json_in(output);
    QVERIFY2(json.isObject(), qPrintable(output));
    QCOMPARE(json["precision"].toString(), precision);
    QCOMPARE(json["mode"].toString(), train ? "train-step" : "forward");
    // On the CPU compacted sequences run unpadded through RouteLab's fp32 kernel; bf16 takes the padded kernels.
    QCOMPARE(json["compacted_attention"].toString(), precision == "fp32" ? "unpadded CPU kernel" : "padded");
    const auto rows = json["rows"].toArray();
    QCOMPARE(rows.size(), 4);  // 2 lengths x 1 fraction x 2 architectures
    for (const auto& value : rows) {
      const auto row = value.toObject();
      const double routed = row["routed"].toDouble();
      QVERIFY2(std::abs(routed - 0.3) < 0.1, qPrintable(output));
      QVERIFY2(row["flops_ratio"].toDouble() > 0.3 && row["flops_ratio"].toDouble() < 1.0, qPrintable(output));
      QVERIFY(row["ms"].toDouble() > 0 && row["dense_ms"].toDouble() > 0);
    }
  }

  void benchStepProfilesEveryArchitecture_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<bool>("classifier");
    for (const auto& entry : routelab::architectures())
      QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id)
                                      << (entry.task == routelab::Task::Classification);
  }
  void benchStepProfilesEveryArchitecture() {
    // Every architecture's training step, as train runs it on the tiny preset: the timed steps, the tokens a step
    // (a language model's windows x context; a classifier's real tokens, fewer than its padded rows), and the step's
    // time by part: the attention's and the optimizer's parts are there, each part's pieces are listed, and their
    // forward and backward times are the part's.
    QFETCH(QString, arch);
    QFETCH(bool, classifier);
    QStringList args{"bench", "step", "--preset", "tiny", "--set", "model.arch=" + arch, "--set", "model.n_layer=4"};
    args << "--steps" << "2" << "--warmup" << "1" << "--profile-steps" << "1" << "--top" << "400" << "--threads" << "1"
         << "--json";
    if (classifier)
      for (const char* set : {"data.source=entailment", "data.tokenizer=word", "data.context=48",
                              "data.task_train_examples=64", "data.task_eval_examples=16"})
        args << "--set" << set;
    const auto [code, output] = run(args);
    QVERIFY2(code == 0, qPrintable(output));
    const auto json = json_in(output);
    QVERIFY2(json.isObject(), qPrintable(output));
    QCOMPARE(json["arch"].toString(), arch);
    QCOMPARE(json["step_ms"].toArray().size(), 2);
    for (const auto& ms : json["step_ms"].toArray()) QVERIFY(ms.toDouble() > 0);
    const double tokens = json["tokens_per_step"].toDouble();
    if (classifier)
      QVERIFY2(tokens > 16 && tokens < 16 * 48, qPrintable(output));
    else
      QCOMPARE(tokens, 16.0 * 64.0);
    const auto parts = json["parts"].toObject(), pieces = json["part_pieces"].toObject();
    QVERIFY2(parts.contains("attention") && parts.contains("optimizer"), qPrintable(output));
    QVERIFY(json["launches"].toDouble() > 0);
    for (auto it = parts.begin(); it != parts.end(); ++it) {
      const auto part = it.value().toObject();
      double forward = 0, backward = 0;
      for (const auto& piece : pieces[it.key()].toArray()) {
        forward += piece.toObject()["forward_ms"].toDouble();
        backward += piece.toObject()["backward_ms"].toDouble();
      }
      const auto close = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); };
      QVERIFY2(close(forward, part["forward_ms"].toDouble()) && close(backward, part["backward_ms"].toDouble()),
               qPrintable(it.key() + ": " + output));
    }
  }

  void benchStepAgainstABaseline() {
    // --against: the baseline's steps timed interleaved with the model's, the ratio of the medians, the baseline's
    // parts beside the model's; --set reaches the first config only, --threads both.
    const auto [code, output] =
        run({"bench", "step", "--preset", "tiny", "--set", "model.arch=mod", "--set", "model.n_layer=4", "--against",
             "tiny", "--steps", "3", "--warmup", "1", "--profile-steps", "1", "--top", "3", "--threads", "1",
             "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto json = json_in(output);
    QCOMPARE(json["arch"].toString(), QString("mod"));
    const auto against = json["against"].toObject();
    QCOMPARE(against["arch"].toString(), QString("dense"));
    QCOMPARE(against["origin"].toString(), QString("preset tiny"));
    QCOMPARE(against["threads"].toInt(), 1);
    QVERIFY2(against["description"].toString().contains("2 layers"), qPrintable(output));  // --set stayed with mod
    QCOMPARE(against["step_ms"].toArray().size(), 3);
    QVERIFY(against["parts"].toObject().contains("attention"));
    const double ratio = json["time_ratio"].toDouble();
    QVERIFY(ratio > 0);
    QVERIFY(std::abs(ratio - json["median_ms"].toDouble() / against["median_ms"].toDouble()) < 1e-9);
    // The table prints the ratio and dense's column beside the parts; --against-set reaches the baseline only.
    const auto [table_code, table] =
        run({"bench", "step", "--preset", "tiny", "--set", "model.arch=mod", "--set", "model.n_layer=4", "--against",
             "tiny", "--against-set", "model.n_layer=3", "--steps", "1", "--warmup", "0", "--profile-steps", "1",
             "--top", "2", "--threads", "1"});
    QVERIFY2(table_code == 0, qPrintable(table));
    QVERIFY2(table.contains("time ratio mod / dense: ") && table.contains("  dense "), qPrintable(table));
    QVERIFY2(table.contains("mod, 4 layers") && table.contains("dense, 3 layers"), qPrintable(table));
  }

  void benchForwardTrainsWithTheBackwardOutsideAutocast() {
    // bench forward --train times the training step as training runs it: autocast on for the forward only. Under
    // autocast the backward would cast the fp32 routers' inputs and gradients to bf16 and back (aten::to in the
    // router's backward). LibTorch 1.13 names the backward of a step's own casts aten::to too, so only LibTorch 2.x
    // tells the two apart here; test_dtrnet checks AutocastOff's effect on the gradients with either.
    if (TORCH_VERSION_MAJOR < 2) QSKIP("LibTorch 1.13 names a cast's own backward aten::to");
    const auto [code, output] =
        run({"bench", "forward", "--lengths", "64", "--embd", "32", "--layers", "4", "--heads", "4", "--batch", "2",
             "--reps", "1", "--warmup", "0", "--archs", "dtrnet", "--fractions", "0.3", "--threads", "1",
             "--breakdown-above", "0", "--breakdown-from", "0", "--kernels", "400", "--train", "--precision", "bf16",
             "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto json = json_in(output);
    const auto router = json["rows"].toArray().first().toObject()["part_pieces"].toObject()["router"].toArray();
    QVERIFY2(!router.isEmpty(), qPrintable(output));
    bool linear = false;
    for (const auto& value : router) {
      const auto piece = value.toObject();
      linear = linear || piece["name"].toString() == "aten::linear";
      QVERIFY2(!(piece["name"].toString() == "aten::to" && piece["backward_ms"].toDouble() > 0), qPrintable(output));
    }
    QVERIFY2(linear, qPrintable(output));  // the router's products are recorded
  }

  void benchForwardListsTheHostOpsBeyondDense() {
    // Host breakdowns with --kernels: the top-level ops a routed model dispatches beyond dense's count. DTRNet's
    // compaction sorts its routing decisions and reads the counts back; dense does neither, and every listed op's
    // calls are among the call's top-level ops.
    const auto [code, output] =
        run({"bench", "forward", "--lengths", "64", "--embd", "32", "--layers", "4", "--heads", "4", "--batch", "2",
             "--reps", "1", "--warmup", "0", "--archs", "dtrnet", "--fractions", "0.3", "--threads", "1",
             "--breakdown-above", "0", "--breakdown-from", "0", "--kernels", "400", "--train", "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto json = json_in(output);
    const auto row = json["rows"].toArray().first().toObject();
    const auto ops = row["host_ops_beyond_dense"].toArray();
    QVERIFY2(!ops.isEmpty(), qPrintable(output));
    double calls = 0, dense_calls = 0;
    bool sorted = false;
    for (const auto& value : ops) {
      const auto op = value.toObject();
      calls += op["calls"].toDouble();
      dense_calls += op["dense_calls"].toDouble();
      if (op["op"].toString() == "aten::sort") sorted = op["calls"].toDouble() > 0 && op["dense_calls"].toDouble() == 0;
    }
    QVERIFY2(sorted, qPrintable(output));
    // What each part runs, by top-level op: the routing part gathers the routed rows.
    const auto routing = row["part_pieces"].toObject()["routing"].toArray();
    QVERIFY2(std::any_of(routing.begin(), routing.end(),
                         [](const auto& v) { return v.toObject()["name"].toString() == "aten::index_select"; }),
             qPrintable(output));
    QVERIFY2(row["dense_part_pieces"].toObject().contains("mlp"), qPrintable(output));  // dense's beside it
    // Every op name is listed (400 is more than there are): the calls add up to the call's top-level ops.
    QCOMPARE(calls, row["launches"].toDouble());
    QCOMPARE(dense_calls, row["dense_launches"].toDouble());
  }

  void benchEvictionHoldsLessForTheBackward() {
    // D-LLM's training attention: the chunked kernel agrees with the materialised form and keeps no (B, H, T, T)
    // tensor for the backward (the materialised form keeps several: 8 x 4 x 512 x 512 fp32 is 32 MiB each).
    const auto [code, output] = run({"bench", "eviction", "--batch", "8", "--heads", "4", "--head-dim", "16",
                                     "--lengths", "512", "--reps", "1", "--warmup", "0", "--threads", "1"});
    QVERIFY2(code == 0, qPrintable(output));
    // One line a form: "", precision, T, form, ms, chunked / form, peak / saved MB, differences, the largest gradient.
    const auto form = [&](const QString& name) {
      const auto lines = output.split('\n').filter(QRegularExpression("^\\| fp32 \\| 512 \\| " + name + "[ |]"));
      return lines.size() == 1 ? lines[0].split('|') : QStringList();
    };
    const auto saved = [](const QStringList& cells) { return cells[6].split('/').last().trimmed().toDouble(); };
    const auto out_diff = [](const QStringList& cells) { return cells[7].split('/').first().trimmed().toDouble(); };
    const auto chunked = form("chunked"), materialised = form("materialised"), cpu = form("cpu");
    QVERIFY2(chunked.size() == 10 && materialised.size() == 10 && cpu.size() == 10, qPrintable(output));
    QVERIFY2(chunked[3].contains(QRegularExpression("\\(\\d+ rows\\)")), qPrintable(output));
    QVERIFY2(saved(chunked) < 4, qPrintable(output));
    QVERIFY2(saved(materialised) > 64, qPrintable(output));
    QVERIFY2(out_diff(chunked) < 1e-5, qPrintable(output));
    QCOMPARE(materialised[7].trimmed(), QString("- / -"));  // the reference itself
    // The flash form runs where LibTorch has flash attention (2.3 and later; on the CPU in fp32 too); the GPU kernels
    // only on a GPU.
    const auto flash = form("flash");
    QCOMPARE(!flash.isEmpty(), routelab::flash_eviction_available());
    if (!flash.isEmpty()) {
      QVERIFY2(saved(flash) < 16, qPrintable(output));
      QVERIFY2(out_diff(flash) < 1e-4, qPrintable(output));
    }
    QVERIFY2(form("efficient").isEmpty() && form("cudnn").isEmpty(), qPrintable(output));
    // The CPU kernel (the CPU's training form) keeps the causal half of the probabilities for its backward, as the
    // dense CPU kernel keeps its own: 8 x 4 x ~512^2 / 2 fp32, about 17 MiB, under the materialised form's.
    QVERIFY2(cpu[4].trimmed().toDouble() > 0, qPrintable(output));
    QVERIFY2(saved(cpu) > 8 && saved(cpu) < 32, qPrintable(output));
    QVERIFY2(out_diff(cpu) < 1e-5, qPrintable(output));
    QVERIFY2(cpu[7].split('/').last().trimmed().toDouble() < 1e-3, qPrintable(output));
  }

  /// The libraries `binary` names (readelf -d); skips where binutils are missing.
  static QString dynamic_section(const QString& binary) {
    QProcess readelf;
    readelf.start("readelf", {"-d", binary});
    if (!readelf.waitForFinished(30000) || readelf.exitCode() != 0) return {};
    return QString::fromUtf8(readelf.readAllStandardOutput());
  }

  void cppRuntimeBindsBeforeLibTorch() {
    // PyPI's libtorch.so exports copies of std::filesystem; the dynamic linker binds to the first library of the
    // DT_NEEDED list that defines a symbol, and libtorch's remove_all crashed on Ubuntu 24.04. The CLI program (like
    // every RouteLab binary: CMakeLists.txt) names libstdc++ before any LibTorch library.
    const auto dynamic = dynamic_section(qEnvironmentVariable("ROUTELAB_CLI_PROGRAM"));
    if (dynamic.isEmpty()) QSKIP("readelf (binutils) is not available");
    const auto cxx = dynamic.indexOf("[libstdc++.so"), torch = dynamic.indexOf("[libtorch");
    QVERIFY2(cxx >= 0 && torch > 0, qPrintable(dynamic));
    QVERIFY2(cxx < torch, qPrintable(dynamic));
    QVERIFY2(cxx < dynamic.indexOf("[libc10"), qPrintable(dynamic));
  }

  void launcherLoadsNoLibTorch() {
    // routelab-cli sets the variables the libraries read when they load, then starts the program: LibTorch loads
    // once, in the program (it restarting itself loaded Debian's LibTorch twice, 0.8 s a command).
    const auto launcher = dynamic_section(qEnvironmentVariable("ROUTELAB_CLI"));
    if (launcher.isEmpty()) QSKIP("readelf (binutils) is not available");
    for (const auto* library : {"[libtorch", "[libc10", "[libblas", "[libopenblas", "[libgomp", "[libsqlite3"})
      QVERIFY2(!launcher.contains(library), qPrintable(launcher));
    // Started through it, the program runs with the settings (openmpWaitsPassivelyUnlessTold) and its arguments.
    const auto [code, output] = run({"architectures", "dtrnet", "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    QCOMPARE(json_in(output).object().value("id").toString(), QString("dtrnet"));
    // Copied alone, it says which program it misses.
    QTemporaryDir alone;
    const auto copy = alone.filePath("routelab-cli");
    QVERIFY(QFile::copy(qEnvironmentVariable("ROUTELAB_CLI"), copy));
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(copy, {"--version"});
    QVERIFY(p.waitForFinished(30000));
    const auto said = QString::fromUtf8(p.readAll());
    QCOMPARE(p.exitCode(), 127);
    QVERIFY2(said.contains("cannot start " + alone.filePath(QFileInfo(qEnvironmentVariable("ROUTELAB_CLI_PROGRAM"))
                                                               .fileName())),
             qPrintable(said));
  }

  void openmpWaitsPassivelyUnlessTold_data() {
    QTest::addColumn<QString>("set");
    QTest::addColumn<QString>("shown");
    // Debian's LibTorch restarts passive; PyPI's keeps OpenMP's default (see ROUTELAB_PASSIVE_OPENMP).
    const bool passive = qEnvironmentVariable("ROUTELAB_EXPECT_PASSIVE_OPENMP") == "1";
    QTest::newRow("unset") << QString() << (passive ? "OpenMP waiting: passive" : "OpenMP waiting: default");
    QTest::newRow("the user's choice stays") << "ACTIVE" << "OpenMP waiting: active";
  }
  void openmpWaitsPassivelyUnlessTold() {
    QFETCH(QString, set);
    QFETCH(QString, shown);
    const auto db = home_.filePath("omp.sqlite");
    const auto [code, output] =
        run({"--log-level", "info", "train", "--preset", "tiny", "--steps", "1", "--db", db, "--quiet",
             "--set", "train.eval_batches=1"}, set);
    QVERIFY2(code == 0, qPrintable(output));
    QVERIFY2(output.contains(shown), qPrintable(output));
  }

  void openblasKernelsUpgradeOnlyGenericOnes_data() {
    QTest::addColumn<QString>("chosen");
    QTest::addColumn<int>("cpu_level");
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<QString>("asked");
    // OpenBLAS 0.3.21 on an Intel Xeon it does not know (family 6, model 207): Prescott on an AVX-512 BF16 CPU.
    QTest::newRow("prescott on avx-512 bf16") << "Prescott" << 3 << true << "Cooperlake";
    QTest::newRow("prescott on avx-512") << "PRESCOTT" << 3 << false << "SkylakeX";
    QTest::newRow("nehalem on avx2") << "Nehalem" << 2 << false << "Haswell";
    QTest::newRow("haswell on avx-512") << "Haswell" << 3 << false << "SkylakeX";
    QTest::newRow("zen on avx2 stays") << "Zen" << 2 << false << "";
    QTest::newRow("skylakex on avx-512 stays") << "SkylakeX" << 3 << true << "";
    QTest::newRow("sapphirerapids stays") << "SapphireRapids" << 3 << true << "";
    QTest::newRow("prescott on an sse cpu stays") << "Prescott" << 0 << false << "";
    QTest::newRow("a family not ranked stays") << "Neoversev1" << 3 << false << "";
  }
  void openblasKernelsUpgradeOnlyGenericOnes() {
    QFETCH(QString, chosen);
    QFETCH(int, cpu_level);
    QFETCH(bool, bf16);
    QFETCH(QString, asked);
    QCOMPARE(QString::fromStdString(routelab::openblas_core_upgrade(chosen.toStdString(), cpu_level, bf16)), asked);
  }

  void runsNameTheirBlasKernels_data() {
    QTest::addColumn<QString>("set");
    QTest::newRow("unset: the CPU's best") << QString();
    QTest::newRow("the user's choice stays") << "Prescott";
  }
  void trainingKeepsTheLogLevelAsked() {
    // --log-level holds through the trainer (which once set its own level back to info, so that debug lines never
    // showed): warn leaves the log's info lines out, and a training command logs at info by default.
    const auto db = home_.filePath("levels.sqlite");
    const auto train = [&](const QStringList& level) {
      auto args = level;
      args << "train" << "--preset" << "tiny" << "--steps" << "1" << "--db" << db << "--quiet" << "--set"
           << "train.eval_batches=1";
      const auto [code, output] = run(args);
      if (code != 0) qWarning() << output;
      return output;
    };
    QVERIFY(train({}).contains("] [train] info "));
    QVERIFY(!train({"--log-level", "warn"}).contains("] [train] info "));
  }

  void runsNameTheirBlasKernels() {
    QFETCH(QString, set);
    const auto db = home_.filePath("blas.sqlite");
    const auto [code, output] = run({"--log-level", "info", "train", "--preset", "tiny", "--steps", "1", "--db", db,
                                     "--quiet", "--set", "train.eval_batches=1"},
                                    {}, set);
    QVERIFY2(code == 0, qPrintable(output));
    const auto named = QRegularExpression("OpenBLAS (\\w+) kernels").match(output);
    if (qEnvironmentVariable("ROUTELAB_EXPECT_OPENBLAS") != "1") {  // PyPI's LibTorch: MKL
      QVERIFY2(!named.hasMatch(), qPrintable(output));
      return;
    }
    QVERIFY2(named.hasMatch(), qPrintable(output));
    const auto core = named.captured(1).toStdString();
    if (!set.isEmpty()) {
      QCOMPARE(QString::fromStdString(core), set);
      QVERIFY2(!output.contains("set by RouteLab"), qPrintable(output));
      return;
    }
    // Whatever OpenBLAS chose on this machine, the run used kernels RouteLab would not upgrade.
    QVERIFY2(routelab::openblas_core_upgrade(core, routelab::cpu_vector_level(), false).empty(), qPrintable(output));
  }

  void alertsAreReported() {
    // A stored run with a NaN train loss and a collapsed router: `show` and `runs` report the run-health alerts the
    // dashboard shows (core/run/run_health.h), in text and JSON.
    const auto db = home_.filePath("alerts.sqlite");
    auto [code, output] = run({"train", "--preset", "tiny", "--steps", "2", "--db", db, "--quiet"});
    QVERIFY2(code == 0, qPrintable(output));
    {
      routelab::RunStore store(db.toStdString());
      store.insert_metrics(1, {{"train/loss", 3, 1.0, std::nan("")}});
      for (int step = 10; step <= 30; step += 10)
        store.insert_eval(1, {step, "val", 2.0, 7.0, 1.0,
                              R"({"layers": [{"layer": 0, "kind": "routed", "routed": true, "routed_fraction": 0.002}]})"});
    }
    std::tie(code, output) = run({"show", "1", "--db", db, "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto alerts = QJsonDocument::fromJson(output.toUtf8()).object().value("alerts").toArray();
    QCOMPARE(alerts.size(), 2);
    QCOMPARE(alerts[0].toObject().value("severity").toString(), QString("error"));
    QCOMPARE(alerts[0].toObject().value("message").toString(), QString("train loss is NaN at step 3"));
    QCOMPARE(alerts[1].toObject().value("kind").toString(), QString("router_collapse"));
    std::tie(code, output) = run({"show", "1", "--db", db});
    QVERIFY2(output.contains("error    train loss is NaN at step 3"), qPrintable(output));
    std::tie(code, output) = run({"runs", "--db", db});
    QVERIFY2(code == 0 && output.contains("NON_FINITE,router_collapse"), qPrintable(output));
  }

  void runsWhereSelectsByQuery() {
    // `runs --where` reads the GUI search's language (core/store/run_query.h) over stored runs: config keys by last
    // part, fields, or, negation, parentheses, plain words; `--ids` prints what --runs takes.
    const auto db = home_.filePath("where.sqlite");
    {
      routelab::RunStore store(db.toStdString());
      const auto add = [&](const std::string& arch, double lr, double capacity, int seed, double val) {
        routelab::NewRun r;
        r.name = arch + "-s" + std::to_string(seed);
        r.arch = arch;
        r.seed = seed;
        nlohmann::json model = {{"arch", arch}};
        if (capacity > 0) model["capacity"] = capacity;
        r.config_json = nlohmann::json{{"model", model}, {"train", {{"lr", lr}, {"tf32", true}}}}.dump();
        const auto id = store.create_run(r);
        store.insert_metrics(id, {{"val/loss", 10, 1.0, val}});
      };
      add("dense", 1e-3, 0, 1, 2.6);    // 1
      add("mod", 1e-3, 0.25, 1, 2.9);   // 2
      add("mod", 3e-3, 0.5, 2, 2.4);    // 3
      add("dtrnet", 3e-3, 0, 2, 2.45);  // 4
      routelab::RunPatch tags;
      tags.tags = "sweep:a,best";
      store.patch_run(2, tags);
      tags.tags = "sweep:a-b";
      store.patch_run(3, tags);
    }
    const auto ids = [&](const QString& where) {
      const auto [code, output] = run({"runs", "--db", db, "--where", where, "--ids"});
      return code == 0 ? output.trimmed() : QStringLiteral("exit %1: %2").arg(code).arg(output);
    };
    QCOMPARE(ids(""), QString("1,2,3,4"));
    QCOMPARE(ids("arch=mod capacity>=0.5"), QString("3"));
    QCOMPARE(ids("(arch=dense or capacity=0.25) -seed=2"), QString("1,2"));
    QCOMPARE(ids("best<2.5 or lr<0.002 arch=dense"), QString("1,3,4"));
    QCOMPARE(ids("not mod tf32=true"), QString("1,4"));  // a word in the name; a flag as text
    QCOMPARE(ids("train.lr=0.003 -dtrnet"), QString("3"));
    QCOMPARE(ids("nosuchkey=1"), QString(""));  // a key naming nothing is a word no run holds
    QCOMPARE(ids("tags=sweep:a"), QString("2"));    // each tag a value: not run 3's sweep:a-b
    QCOMPARE(ids("sweep:a"), QString("2,3"));       // a word: in the text
    QCOMPARE(ids("tags!=best"), QString("1,3,4"));  // none of its tags is best (runs without tags too)
    // `table` and `figure` take --where instead of --runs.
    auto [code, output] =
        run({"table", "--db", db, "--where", "arch=mod", "--metrics", "val/loss", "--format", "csv", "--no-group"});
    QVERIFY2(code == 0 && output.count("val/loss") == 2 && output.contains("mod-s2"), qPrintable(output));
    const auto json = home_.filePath("where.json");
    std::tie(code, output) = run({"figure", "curves", "--db", db, "--where", "lr=0.003", "--out", json});
    QVERIFY2(code == 0 && output.contains("(1 panel, 2 runs)"), qPrintable(output));
    std::tie(code, output) = run({"figure", "curves", "--db", db, "--where", "nosuchkey=1", "--out", json});
    QVERIFY2(code != 0 && output.contains("--where 'nosuchkey=1': no run of"), qPrintable(output));
    // Archived runs are left out unless --all is given, and a query only archived runs meet says so.
    {
      routelab::RunStore store(db.toStdString());
      routelab::RunPatch archive;
      archive.archived = true;
      store.patch_run(1, archive);
    }
    std::tie(code, output) = run({"table", "--db", db, "--where", "arch=dense", "--format", "csv"});
    QVERIFY2(code != 0 && output.contains("no run of") && output.contains("(1 archived: add --all)"),
             qPrintable(output));
    std::tie(code, output) = run({"table", "--db", db, "--where", "lr=0.001", "--all", "--metrics", "val/loss",
                                  "--format", "csv", "--no-group"});
    QVERIFY2(code == 0 && output.contains("dense-s1") && output.contains("mod-s1"), qPrintable(output));
    std::tie(code, output) = run({"figure", "curves", "--db", db, "--where", "lr=0.001", "--all", "--out", json});
    QVERIFY2(code == 0 && output.contains("(1 panel, 2 runs)"), qPrintable(output));
    std::tie(code, output) = run({"figure", "curves", "--db", db, "--where", "lr=0.001", "--out", json});
    QVERIFY2(code == 0 && output.contains("(1 panel, 1 run"), qPrintable(output));
    std::tie(code, output) = run({"figure", "curves", "--db", db, "--runs", "2", "--all", "--out", json});
    QVERIFY2(code != 0 && output.contains("--all requires --where"), qPrintable(output));
    std::tie(code, output) = run({"table", "--db", db, "--runs", "1", "--where", "arch=mod"});
    QVERIFY2(code != 0 && output.contains("excludes"), qPrintable(output));
    std::tie(code, output) = run({"table", "--db", db});
    QVERIFY2(code != 0 && output.contains("table: give --runs or --where"), qPrintable(output));
  }

  void sweepRunsItsPointsThenSaysHowToReadThemBack() {
    // A sweep of two two-step points: each trains and is tagged, the table follows, then the commands that read the
    // runs back by option, which find them by the sweep's tag.
    const auto db = home_.filePath("sweep.sqlite"), file = home_.filePath("two.json");
    QFile sweep(file);
    QVERIFY(sweep.open(QIODevice::WriteOnly));
    sweep.write(R"({"name": "two", "base": "tiny", "train": {"steps": 2, "warmup_steps": 1, "eval_every": 2},
                    "grid": {"train.lr": [0.001, 0.003]}})");
    sweep.close();
    auto [code, output] = run({"sweep", file, "--db", db, "--quiet"});
    QVERIFY2(code == 0, qPrintable(output));
    QVERIFY2(output.contains("| two/lr=0.001 |") && output.contains("| two/lr=0.003 |"), qPrintable(output));
    QVERIFY2(output.contains("figure sweep --db " + db + " --where tags=sweep:two --out two-sweep.pdf"),
             qPrintable(output));
    QVERIFY2(output.contains("--where tags=sweep:two --ids"), qPrintable(output));
    std::tie(code, output) = run({"runs", "--db", db, "--where", "tags=sweep:two", "--ids"});
    QCOMPARE(output.trimmed(), QString("1,2"));
  }

  void routingBreakdownOfStoredRuns() {
    // `routing-breakdown` of a stored routed run: every grouping's groups cover the tokens asked for, in JSON and as
    // tables; a dense run is refused by name.
    const auto db = home_.filePath("breakdown.sqlite");
    auto [code, output] = run({"train", "--preset", "quickstart-dtrnet", "--steps", "2", "--db", db, "--quiet"});
    QVERIFY2(code == 0, qPrintable(output));
    std::tie(code, output) = run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto doc = QJsonDocument::fromJson(output.toUtf8()).object();
    QCOMPARE(doc.value("tokens").toInt(), 512);
    const auto by = doc.value("by").toObject();
    QCOMPARE(by.keys(), (QStringList{"class", "difficulty", "frequency", "position", "predictability"}));
    for (const auto& grouping : by.keys()) {
      int tokens = 0;
      for (const auto& group : by.value(grouping).toArray()) tokens += group.toObject().value("tokens").toInt();
      QVERIFY2(tokens == 512, qPrintable(grouping));
    }
    std::tie(code, output) = run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--by", "class,position"});
    QVERIFY2(code == 0 && output.contains("by class:") && output.contains("| mid-word | ") &&
                 output.contains("by position:") && !output.contains("by frequency"),
             qPrintable(output));
    std::tie(code, output) = run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--by", "class", "--gates"});
    QVERIFY2(code == 0 && output.contains("the mean gate of each group's tokens") && output.contains("| space | "),
             qPrintable(output));
    // The tables above read the breakdown the first command kept; computed again from the checkpoint, it is the same.
    const auto kept = run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--by", "class,position"});
    const auto recomputed =
        run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--by", "class,position", "--recompute"});
    QVERIFY2(kept.first == 0 && recomputed.first == 0 && kept.second == recomputed.second,
             qPrintable(kept.second + "\n----\n" + recomputed.second));
    // A paper table of the runs: groups x runs.
    std::tie(code, output) =
        run({"routing-breakdown", "1", "--db", db, "--tokens", "512", "--by", "class", "--format", "md"});
    QVERIFY2(code == 0 && output.contains("| class |") && output.contains("| space |"), qPrintable(output));
    std::tie(code, output) =
        run({"routing-breakdown", "1", "--db", db, "--by", "class", "--format", "md", "--step", "1"});
    QVERIFY2(code != 0 && output.contains("run 1 has no checkpoint at step 1 (its one checkpoint is at step 2)"),
             qPrintable(output));
    std::tie(code, output) = run({"routing-breakdown", "1", "--db", db, "--format", "md"});
    QVERIFY2(code == 2 && output.contains("--format: choose one grouping with --by"), qPrintable(output));
    std::tie(code, output) = run({"routing-breakdown", "1", "--db", db, "--per-layer"});
    QVERIFY2(code == 2 && output.contains("--per-layer and --no-group need --format"), qPrintable(output));
    std::tie(code, output) = run({"train", "--preset", "tiny", "--steps", "2", "--db", db, "--quiet"});
    QVERIFY2(code == 0, qPrintable(output));
    std::tie(code, output) = run({"routing-breakdown", "2", "--db", db});
    QVERIFY2(code == 2 && output.contains("run 2: routing breakdown: architecture 'dense' routes no token"),
             qPrintable(output));
    // Zero-shot tasks of the routed run, kept with it and read back by the paper's downstream layout.
    const auto piqa = home_.filePath("piqa.jsonl");
    QFile file(piqa);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("{\"goal\": \"And God said\", \"sol1\": \"let there be light\", \"sol2\": \"qqq\", \"label\": 0}\n");
    file.close();
    const auto samples = home_.filePath("samples.jsonl");
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--task", piqa, "--store", "--samples", samples});
    QVERIFY2(code == 0 && output.contains("| piqa | piqa | 1 | ") && output.contains("stored as metrics"),
             qPrintable(output));
    QFile written(samples);  // one line an example: its prediction and both choices' scores
    QVERIFY(written.open(QIODevice::ReadOnly));
    const auto sample = nlohmann::json::parse(written.readAll().toStdString());
    QVERIFY2(sample.at("task") == "piqa" && sample.at("label") == 0 && sample.at("requests").size() == 2 &&
                 sample.at("acc") == (sample.at("pred") == 0 ? 1 : 0) &&
                 sample.at("requests")[0].at("context") == "Question: And God said\nAnswer:" &&
                 sample.at("requests")[1].at("continuation") == " qqq",
             sample.dump().c_str());
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--task", piqa, "--fewshot-from", "piqa=" + piqa});
    QVERIFY2(code != 0 && output.contains("--fewshot-from requires --fewshot"), qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--task", piqa, "--fewshot", "1"});  // one example only
    QVERIFY2(code == 2 && output.contains("piqa.jsonl: 1 few-shot examples asked for task piqa, the file holds 0 "
                                          "other than the example"),
             qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--task", piqa, "--fewshot", "1", "--fewshot-from",
                                  "piqa=" + piqa, "--json"});
    const auto one_shot = json_in(output).object().value("tasks").toArray().at(0).toObject();
    QVERIFY2(code == 0 && one_shot.value("name").toString() == "piqa_1shot" && one_shot.value("shots").toInt() == 1,
             qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "2", "--db", db, "--task", piqa, "--store"});  // routed and dense
    QVERIFY2(code == 0 && output.contains("paired against run 1") && output.contains("| piqa | acc | 1 "),
             qPrintable(output));
    const auto pairs = output.mid(output.indexOf("paired against run 1"));
    std::tie(code, output) = run({"tasks", "1", "2", "--db", db, "--stored"});  // the same pairs, nothing scored
    QVERIFY2(code == 0 && output.contains("stored results, the latest at step") && output.endsWith(pairs),
             qPrintable(output + "\n---\n" + pairs));
    std::tie(code, output) = run({"tasks", "2", "1", "--db", db, "--stored", "--every-pair"});
    QVERIFY2(code == 0 && output.contains("every pair of runs") && output.contains("| piqa | acc | 2 "),
             qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--stored", "--store"});
    QVERIFY2(code != 0 && output.contains("excludes"), qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "--db", db});
    QVERIFY2(code == 2 && output.contains("--task: give at least one task file"), qPrintable(output));
    // Every kept checkpoint: a report each, oldest first, stored at its step (the task over training).
    std::tie(code, output) = run({"train", "--preset", "tiny", "--steps", "2", "--set", "train.checkpoint_every=1",
                                  "--db", db, "--quiet"});
    QVERIFY2(code == 0, qPrintable(output));
    std::tie(code, output) = run({"tasks", "3", "--db", db, "--task", piqa, "--every-checkpoint", "--store", "--json"});
    QVERIFY2(code == 0, qPrintable(output));
    const auto every = json_in(output).object().value("runs").toArray();
    QVERIFY2(every.size() == 2 && every[0].toObject().value("step").toInt() == 1 &&
                 every[1].toObject().value("step").toInt() == 2,
             qPrintable(output));
    std::tie(code, output) = run({"tasks", "3", "--db", db, "--task", piqa, "--every-checkpoint", "--step", "1"});
    QVERIFY2(code != 0 && output.contains("excludes"), qPrintable(output));
    std::tie(code, output) = run({"tasks", "1", "--db", db, "--task", piqa, "--samples", home_.filePath("no/such/x")});
    QVERIFY2(code == 2 && output.contains("--samples: cannot write"), qPrintable(output));
    std::tie(code, output) = run({"show", "1", "--db", db});
    QVERIFY2(code == 0 && output.contains("task     piqa: acc ") && output.contains("acc_norm") &&
                 output.contains("(step 2)"),
             qPrintable(output));
    std::tie(code, output) = run({"table", "dtrnet-table1-tasks", "--db", db, "--runs", "1", "--format", "csv"});
    QVERIFY2(code == 0 && output.contains("quickstart-dtrnet,PIQA,%,"), qPrintable(output));
  }

  void corpusToSubwordRunThroughTheCommands() {
    ROUTELAB_REQUIRE_SENTENCEPIECE();
    // README's path from a text corpus on disk to a run on subwords: tokenizer train, prepare, train on the shards;
    // `show` names the stored tokenizer by the hash `tokenizer show` prints.
    const auto corpus = home_.filePath("corpus.txt");
    {
      QFile file(corpus);
      QVERIFY(file.open(QIODevice::WriteOnly));
      file.write(QByteArray::fromStdString(routelab::test::corpus_head(200'000)));
    }
    const auto model = home_.filePath("tok.model"), shards = home_.filePath("shards"),
               db = home_.filePath("subword.sqlite");
    auto [code, output] = run({"tokenizer", "train", "--corpus", corpus, "--vocab", "400", "--out", model, "--quiet",
                               "--threads", "2"});
    QVERIFY2(code == 0 && output.contains("400 pieces"), qPrintable(output));
    std::tie(code, output) = run({"tokenizer", "show", model, "--text", "And God said"});
    QVERIFY2(code == 0 && output.contains("decodes to the text: yes"), qPrintable(output));
    const auto hash = output.section("hash ", 1).section(",", 0, 0);
    std::tie(code, output) = run({"prepare", "--corpus", corpus, "--tokenizer", model, "--out", shards,
                                  "--val-fraction", "0.1"});
    QVERIFY2(code == 0 && output.contains("routelab-shards.json"), qPrintable(output));
    std::tie(code, output) = run({"train", "--preset", "tiny", "--steps", "2", "--db", db, "--quiet", "--set",
                                  "data.source=shards", "--set", "data.path=" + shards});
    QVERIFY2(code == 0, qPrintable(output));
    std::tie(code, output) = run({"show", "1", "--db", db, "--json"});
    const auto tokenizer = QJsonDocument::fromJson(output.toUtf8()).object().value("tokenizer").toObject();
    QCOMPARE(tokenizer.value("kind").toString(), QString("sentencepiece"));
    QCOMPARE(tokenizer.value("hash").toString(), hash);
    QCOMPARE(tokenizer.value("vocab").toInt(), 400);
    // A folder that is not empty is refused, naming it; the shards already there stay.
    std::tie(code, output) = run({"prepare", "--corpus", corpus, "--tokenizer", model, "--out", shards});
    QVERIFY2(code == 2 && output.contains("is not empty"), qPrintable(output));
  }
};

}  // namespace test_cli

ROUTELAB_TEST_SUITE(test_cli, TestCli)
#include "test_cli.moc"
