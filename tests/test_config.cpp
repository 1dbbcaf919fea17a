// Config resolution: defaults, presets, --set overrides, and errors that name the key path (and the file).
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/config/run_name.h"
#include "core/models/registry.h"
#include "core/util/cpu_load.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/process.h"
#include "tests/suite.h"

namespace test_config {

using namespace routelab;

class TestConfig : public QObject {
  Q_OBJECT

 private:
  static QString error_of(const nlohmann::json& overrides, const std::vector<std::string>& sets = {},
                          const std::string& origin = "") {
    try {
      resolve_config(overrides, sets, origin);
    } catch (const ConfigError& e) {
      return QString::fromStdString(e.what());
    }
    return {};
  }

 private Q_SLOTS:
  void defaultsResolve() {
    const auto c = resolve_config(nlohmann::json::object());
    QCOMPARE(QString::fromStdString(c.arch()), QString("dense"));
    QCOMPARE(c.train().at("steps").get<int>(), 1000);
    QCOMPARE(c.model().at("n_layer").get<int>(), 4);
    QCOMPARE(QString::fromStdString(c.data().at("source").get<std::string>()), QString("kjv"));
    QVERIFY(c.run().contains("seed"));
  }

  void errorsNameTheKey_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown model key") << R"({"model": {"n_haed": 4}})" << "model.n_haed: unknown key";
    QTest::newRow("unknown train key") << R"({"train": {"stepz": 4}})" << "train.stepz: unknown key";
    QTest::newRow("unknown section") << R"({"optim": {}})" << "optim: unknown section";
    QTest::newRow("wrong type") << R"({"train": {"steps": "ten"}})" << "train.steps: expected an integer";
    QTest::newRow("fractional int") << R"({"model": {"n_layer": 2.5}})" << "model.n_layer: expected an integer";
    QTest::newRow("out of range") << R"({"train": {"lr": -1}})" << "train.lr: -1 is below the minimum 0";
    QTest::newRow("bad choice") << R"({"data": {"tokenizer": "bpe"}})" << "data.tokenizer: 'bpe' is not one of char, byte";
    QTest::newRow("head does not divide") << R"({"model": {"n_embd": 128, "n_head": 3}})"
                                          << "model.n_head: 3 does not divide n_embd 128";
    QTest::newRow("kv heads") << R"({"model": {"n_head": 4, "n_kv_head": 3}})" << "model.n_kv_head: 3 does not divide n_head 4";
    QTest::newRow("min lr above lr") << R"({"train": {"lr": 1e-4, "min_lr": 1e-3}})" << "train.min_lr";
    QTest::newRow("warmup beyond steps") << R"({"train": {"steps": 10, "warmup_steps": 20}})" << "train.warmup_steps";
    QTest::newRow("file without path") << R"({"data": {"source": "file"}})" << "data.path: required";
    QTest::newRow("split fractions") << R"({"data": {"train_fraction": 0.9, "val_fraction": 0.2}})" << "data.val_fraction";
    QTest::newRow("unknown arch") << R"({"model": {"arch": "nope"}})" << "unsupported architecture: 'nope'";
    QTest::newRow("section not object") << R"({"train": 3})" << "train: expected an object";
    QTest::newRow("bad device") << R"({"run": {"device": "gpu"}})" << "run.device: 'gpu' (expected cpu, cuda or cuda:N)";
    QTest::newRow("device index") << R"({"run": {"device": "cuda:x"}})" << "run.device: 'cuda:x'";
    QTest::newRow("tf32 type") << R"({"train": {"tf32": "yes"}})" << "train.tf32: expected true or false";
  }
  void errorsNameTheKey() {
    QFETCH(QString, overrides);
    QFETCH(QString, expected);
    const auto message = error_of(nlohmann::json::parse(overrides.toStdString()), {}, "my.json");
    QVERIFY2(message.contains(expected), qPrintable(message));
    QVERIFY2(message.startsWith("my.json: "), qPrintable(message));
  }

  void setOverridesKeepType() {
    const auto c = resolve_config(nlohmann::json::object(),
                                  {"model.n_layer=6", "train.lr=3e-4", "model.tie_weights=false", "data.source=copy",
                                   "model.style=gpt2"});
    QVERIFY(c.model().at("n_layer").is_number_integer());
    QCOMPARE(c.model().at("n_layer").get<int>(), 6);
    QCOMPARE(c.train().at("lr").get<double>(), 3e-4);
    QCOMPARE(c.model().at("tie_weights").get<bool>(), false);
    QCOMPARE(QString::fromStdString(c.data().at("source").get<std::string>()), QString("copy"));
  }

  void setErrors_data() {
    QTest::addColumn<QString>("assignment");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown key") << "model.n_layerz=3" << "model.n_layerz: unknown key";
    QTest::newRow("type kept") << "model.n_layer=four" << "model.n_layer: cannot parse 'four'";
    QTest::newRow("no equals") << "model.n_layer" << "expected section.key=value";
    QTest::newRow("bad section") << "optim.lr=1" << "optim.lr: unknown section";
    QTest::newRow("range") << "train.beta1=2" << "train.beta1: 2 is above the maximum";
  }
  void setErrors() {
    QFETCH(QString, assignment);
    QFETCH(QString, expected);
    const auto message = error_of(nlohmann::json::object(), {assignment.toStdString()});
    QVERIFY2(message.contains(expected), qPrintable(message));
  }

  void deviceNames_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("valid");
    for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:12"}) QTest::newRow(ok) << ok << true;
    for (const char* bad : {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1a", "cuda0", "cpu:0", "cuda:12345", ""})
      QTest::newRow(bad) << bad << false;
  }
  void deviceNames() {
    QFETCH(QString, name);
    QFETCH(bool, valid);
    QCOMPARE(is_device_name(name.toStdString()), valid);
    if (valid) {  // every valid name is accepted by the config (whether this machine has that GPU is checked at run)
      const auto c = resolve_config(nlohmann::json::object(), {"run.device=" + name.toStdString()});
      QCOMPARE(QString::fromStdString(c.run().at("device").get<std::string>()), name);
    }
  }

  void threadCountsLeaveReservedCoresAndTheCap() {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const QByteArray cap = qgetenv("ROUTELAB_MAX_THREADS");
    qunsetenv("ROUTELAB_MAX_THREADS");
    reserve_cores(1);  // as the GUI does on 4+ cores
    QCOMPARE(configure_threads(0), std::max(1, cores - 1));
    QCOMPARE(configure_threads(3), 3);  // an explicit run.threads is the user's
    reserve_cores(0);
    QCOMPARE(configure_threads(0), cores);
    qputenv("ROUTELAB_MAX_THREADS", "1");
    QCOMPARE(configure_threads(3), 1);
    QCOMPARE(configure_threads(0), 1);
    if (cap.isNull())
      qunsetenv("ROUTELAB_MAX_THREADS");
    else
      qputenv("ROUTELAB_MAX_THREADS", cap);
  }

  void otherProcessesLoadIsTheirsAlone() {
    // 2 cores over 100 ticks each: 150 busy ticks, 50 of them this process's own (its spinning threads too).
    const CpuTimes before{1000, 4000, 300};
    QCOMPARE(other_busy_cores(before, {1150, 4200, 350}, 2), 1.0);
    QCOMPARE(other_busy_cores(before, {1050, 4200, 350}, 2), 0.0);  // all of it ours: nobody else is busy
    QCOMPARE(other_busy_cores(before, before, 2), 0.0);             // no time passed
    QCOMPARE(threads_beside_load(2, 1.0), 1);
    QCOMPARE(threads_beside_load(2, 0.3), 2);  // a daemon's blip is not a busy core
    QCOMPARE(threads_beside_load(2, 5.0), 1);  // never below one thread
    QCOMPARE(threads_beside_load(16, 7.6), 8);
    QCOMPARE(threads_beside_load(1, 0.0), 1);
  }

  void threadsFollowTheLoadOnlyWhenEveryCoreWasAsked() {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    reserve_cores(0);
    ThreadGovernor fixed(cores, /*interval_s=*/0.0);
    ThreadGovernor governed(0, /*interval_s=*/0.0);
    if (governed.threads() < 2) QSKIP("one thread allowed here (one core, or ROUTELAB_MAX_THREADS=1): nothing to adapt");
    // As many spinning processes as cores: whatever else runs, the others keep every core busy.
    std::vector<pid_t> busy;
    for (int i = 0; i < cores; ++i) {
      const pid_t pid = ::fork();
      QVERIFY(pid >= 0);
      if (pid == 0) {
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      busy.push_back(pid);
    }
    const auto before = read_cpu_times();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const auto after = read_cpu_times();
    const bool changed = governed.update();
    const bool fixed_changed = fixed.update();
    for (const pid_t pid : busy) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    QVERIFY(before && after);
    QVERIFY2(other_busy_cores(*before, *after, cores) > 0.5 * cores,
             qPrintable(QString::number(other_busy_cores(*before, *after, cores))));
    QVERIFY(changed);
    QCOMPARE(governed.threads(), 1);
    QVERIFY2(QString::fromStdString(governed.note()).contains("other processes kept"), governed.note().c_str());
    QVERIFY(!fixed_changed);  // an explicit count is the user's
    QCOMPARE(fixed.threads(), std::min(cores, max_threads_from_environment() > 0 ? max_threads_from_environment() : cores));
    QCOMPARE(at::get_num_threads(), 1);
    configure_threads(0);
  }

  void deterministicKernelsAreSwitchedOnAndOff() {
    QCOMPARE(resolve_config(nlohmann::json::object()).train().at("deterministic").get<bool>(), false);
    qunsetenv("CUBLAS_WORKSPACE_CONFIG");
    configure_cuda_math(/*tf32=*/false, /*deterministic=*/true);
    auto& context = at::globalContext();
    QVERIFY(context.deterministicAlgorithms());
    QVERIFY(context.deterministicAlgorithmsWarnOnly());  // an op without a deterministic kernel warns, never fails
    QVERIFY(context.deterministicCuDNN());
    QVERIFY(!context.benchmarkCuDNN());
    QCOMPARE(qgetenv("CUBLAS_WORKSPACE_CONFIG"), QByteArray(":4096:8"));
    configure_cuda_math(/*tf32=*/true, /*deterministic=*/false);
    QVERIFY(!context.deterministicAlgorithms());
    QVERIFY(!context.deterministicCuDNN());
    qunsetenv("CUBLAS_WORKSPACE_CONFIG");
  }

  void hashIsStableAndSensitive() {
    const auto a = resolve_config(nlohmann::json::object());
    const auto b = resolve_config(nlohmann::json::object());
    const auto c = resolve_config(nlohmann::json::object(), {"train.steps=999"});
    QCOMPARE(a.hash(), b.hash());
    QVERIFY(a.hash() != c.hash());
    QCOMPARE(a.hash().size(), std::size_t(16));
    // 4.0 given for an integer is canonicalised, so the hash does not depend on how the number was written.
    const auto d = resolve_config(nlohmann::json::parse(R"({"model": {"n_layer": 4.0}})"));
    QCOMPARE(a.hash(), d.hash());
  }

  void resolvedConfigRoundTrips() {
    const auto a = resolve_config(nlohmann::json::object(), {"model.n_layer=3"});
    const auto b = config_from_resolved(nlohmann::json::parse(a.doc.dump()), "stored");
    QCOMPARE(a.hash(), b.hash());
  }

  void badJsonFileNamesFileAndLine() {
    QTemporaryDir dir;
    const auto path = dir.filePath("bad.json").toStdString();
    std::ofstream(path) << "{\n  \"train\": {\n    \"steps\": 10,,\n  }\n}\n";
    try {
      load_json_file(path);
      QFAIL("no error");
    } catch (const ConfigError& e) {
      const QString message = e.what();
      QVERIFY2(message.contains(QString::fromStdString(path) + ":3:"), qPrintable(message));
    }
    try {
      load_json_file(dir.filePath("missing.json").toStdString());
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY(QString(e.what()).contains("missing.json: cannot open"));
    }
  }

  void unknownPresetListsKnownOnes() {
    try {
      load_preset("no-such-preset");
      QFAIL("no error");
    } catch (const ConfigError& e) {
      const QString message = e.what();
      QVERIFY2(message.contains("unknown preset 'no-such-preset'") && message.contains("quickstart"), qPrintable(message));
    }
  }

  void defaultRunNamesTellRunsApart_data() {
    QTest::addColumn<QString>("preset");
    QTest::addColumn<QStringList>("sets");
    QTest::addColumn<QString>("expected");
    QTest::newRow("a preset as it is") << "quickstart" << QStringList{} << "dense-quickstart";
    QTest::newRow("named by its architecture") << "mod-0.7" << QStringList{} << "mod-0.7";
    QTest::newRow("its architecture last") << "quickstart-dtrnet" << QStringList{"run.seed=2"} << "quickstart-dtrnet-s2";
    QTest::newRow("a dense twin named for its pair") << "tsa-charlm-dense" << QStringList{} << "tsa-charlm-dense";
    QTest::newRow("a changed option") << "mod-0.7" << QStringList{"model.capacity=0.5"} << "mod-0.7-c0.5";
    QTest::newRow("another seed") << "quickstart" << QStringList{"run.seed=2"} << "dense-quickstart-s2";
    QTest::newRow("another architecture") << "dtrnet-bilayer" << QStringList{"model.arch=mod", "run.seed=3"}
                                          << "mod-s3";
    QTest::newRow("a string and a flag") << "quickstart" << QStringList{"model.style=gpt2", "model.tie_weights=false"}
                                         << "dense-quickstart-gpt2-notie_weights";
    QTest::newRow("more than three changes")
        << "quickstart" << QStringList{"model.n_layer=6", "model.n_head=8", "train.lr=0.001", "train.precision=bf16"}
        << "dense-quickstart-nh8-nl6-lr0.001+1";
    QTest::newRow("bookkeeping is not a difference") << "quickstart" << QStringList{"train.steps=700", "train.log_every=5"}
                                                     << "dense-quickstart";
    QTest::newRow("no preset") << "" << QStringList{"model.n_layer=3"} << "dense";
  }
  void defaultRunNamesTellRunsApart() {
    QFETCH(QString, preset);
    QFETCH(QStringList, sets);
    QFETCH(QString, expected);
    std::vector<std::string> s;
    for (const auto& item : sets) s.push_back(item.toStdString());
    const auto config = preset.isEmpty() ? resolve_config(nlohmann::json::object(), s) : preset_config(preset.toStdString(), s);
    QCOMPARE(QString::fromStdString(default_run_name(config)), expected);
  }

  void dataFilesAreCheckedByKey() {
    QTemporaryDir dir;
    const auto folder = dir.path().toStdString(), file = dir.filePath("corpus.txt").toStdString();
    QFile(QString::fromStdString(file)).open(QIODevice::WriteOnly);
    const auto check = [](const std::vector<std::string>& sets) {
      try {
        check_data_files(resolve_config(nlohmann::json::object(), sets, "test"));
      } catch (const ConfigError& e) {
        return std::string(e.what());
      }
      return std::string("ok");
    };
    QCOMPARE(check({"data.source=file", "data.path=" + file}), std::string("ok"));
    QCOMPARE(check({"data.source=shards", "data.path=" + folder}), std::string("ok"));
    QCOMPARE(check({"data.source=file", "data.path=" + folder}), "data.path: " + folder + " is a folder; give a file");
    QCOMPARE(check({"data.source=shards", "data.path=" + file}),
             "data.path: " + file + " is a file; give the folder of token shards");
    QCOMPARE(check({"data.tokenizer=sentencepiece", "data.tokenizer_model=" + folder + "/tok.model"}),
             "data.tokenizer_model: " + folder + "/tok.model: no such file");
    QCOMPARE(check({}), std::string("ok"));  // the embedded corpus names no file
  }

  void unreadConfigKeysAreNamed_data() {
    QTest::addColumn<QStringList>("sets");
    QTest::addColumn<QString>("expected");  // the messages, one a line
    QTest::newRow("defaults") << QStringList{} << "";
    QTest::newRow("file reads its path") << QStringList{"data.source=file", "data.path=a.txt"} << "";
    QTest::newRow("shards read path and vocab")
        << QStringList{"data.source=shards", "data.path=d", "data.shard_vocab=50257"} << "";
    QTest::newRow("kjv with a shard folder")  // the 360M presets under --set data.source=kjv
        << QStringList{"data.path=fineweb-edu-shards"}
        << "data.path: fineweb-edu-shards is not read: data.source is 'kjv' (it is read with data.source file or "
           "shards)";
    QTest::newRow("synthetic task with vocab and model")
        << QStringList{"data.source=copy", "data.shard_vocab=256", "data.tokenizer_model=t.model"}
        << "data.shard_vocab: 256 is not read: data.source is 'copy' (it is read with data.source shards)\n"
           "data.tokenizer_model: t.model is not read: data.tokenizer is 'char' (it is read with data.tokenizer "
           "sentencepiece)";
    QTest::newRow("shards keep their split")
        << QStringList{"data.source=shards", "data.path=d", "data.val_fraction=0.05"}
        << "data.val_fraction: 0.05 is not read: data.source is 'shards' (it is read with data.source kjv or file)";
    QTest::newRow("a task's keys under the corpus")
        << QStringList{"data.task_length=20", "data.task_seed=7"}
        << "data.task_length: 20 is not read: data.source is 'kjv' (it is read with data.source copy or sort)\n"
           "data.task_seed: 7 is not read: data.source is 'kjv' (it is read with data.source copy, sort or "
           "entailment)";
    QTest::newRow("entailment with a word-tokenizer key under wordpiece")
        << QStringList{"model.arch=tagat",       "data.source=entailment", "data.tokenizer=wordpiece",
                       "data.vocab_path=v.txt",  "data.min_count=3",       "data.task_length=20",
                       "data.entailment_facts=3"}
        << "data.task_length: 20 is not read: data.source is 'entailment' (it is read with data.source copy or sort)\n"
           "data.min_count: 3 is not read: data.tokenizer is 'wordpiece' (it is read with data.tokenizer word)";
    QTest::newRow("sentencepiece reads its model")
        << QStringList{"data.tokenizer=sentencepiece", "data.tokenizer_model=t.model"} << "";
    QTest::newRow("pair files outside pairs")
        << QStringList{"data.train_path=a.tsv", "data.test_path=c.tsv", "data.vocab_path=v.txt"}
        << "data.train_path: a.tsv is not read: data.source is 'kjv' (it is read with data.source pairs)\n"
           "data.test_path: c.tsv is not read: data.source is 'kjv' (it is read with data.source pairs)\n"
           "data.vocab_path: v.txt is not read: data.tokenizer is 'char' (it is read with data.tokenizer wordpiece)";
    // The model's options whose schema says when they are read; the train section's.
    QTest::newRow("DTRNet's capacity with token routing")
        << QStringList{"model.arch=dtrnet", "model.capacity=0.3", "model.predictor_coeff=0.5"}
        << "model.capacity: 0.3 is not read: model.routing is 'token' (it is read with model.routing expert)\n"
           "model.predictor_coeff: 0.5 is not read: model.routing is 'token' (it is read with model.routing expert)";
    QTest::newRow("DTRNet's capacity with expert routing")
        << QStringList{"model.arch=dtrnet", "model.routing=expert", "model.capacity=0.3"} << "";
    QTest::newRow("RoPE factor without scaling")
        << QStringList{"model.rope_factor=4", "model.rope_original_context=64"}
        << "model.rope_factor: 4 is not read: model.rope_scaling is 'none' (it is read with model.rope_scaling linear "
           "or yarn)\n"
           "model.rope_original_context: 64 is not read: model.rope_scaling is 'none' (it is read with "
           "model.rope_scaling yarn)";
    QTest::newRow("RoPE in the gpt2 style")
        << QStringList{"model.style=gpt2", "model.rope_theta=500000", "model.rope_scaling=linear"}
        << "model.rope_theta: 500000 is not read: model.style is 'gpt2' (it is read with model.style llama)\n"
           "model.rope_scaling: linear is not read: model.style is 'gpt2' (it is read with model.style llama)";
    QTest::newRow("steps under epochs, distillation without a teacher")
        << QStringList{"model.arch=tagat", "data.source=entailment", "data.tokenizer=word",      "train.epochs=2",
                       "train.steps=50",   "train.distill_weight=2", "train.distill_layers=true"}
        << "train.steps: 50 is not read: train.epochs is 2 (it is read with train.epochs 0)\n"
           "train.distill_weight: 2 is not read: train.distill_from is 0 (it is read with train.distill_from other "
           "than 0)\n"
           "train.distill_layers: true is not read: train.distill_from is 0 (it is read with train.distill_from other "
           "than 0)";
    QTest::newRow("steps without epochs, distillation from a teacher")
        << QStringList{"train.steps=500", "train.distill_from=3", "train.distill_weight=2"} << "";
    // Numbers that switch a loss term off at 0 (OptionCondition::nonzero).
    QTest::newRow("D-LLM's rate schedule without a rate loss")
        << QStringList{"model.arch=dllm", "model.rate_coeff=0", "model.rate_schedule=constant"}
        << "model.rate_schedule: constant is not read: model.rate_coeff is 0 (it is read with model.rate_coeff "
           "other than 0)";
    QTest::newRow("Radial's depth warm-up without a depth loss")
        << QStringList{"model.arch=radial", "model.depth_coeff=0", "model.depth_warmup=0.5"}
        << "model.depth_warmup: 0.5 is not read: model.depth_coeff is 0 (it is read with model.depth_coeff other "
           "than 0)";
    QTest::newRow("TAGAT's balance form without a balance loss")
        << QStringList{"model.arch=tagat", "data.source=entailment", "data.tokenizer=word", "model.lambda_bal=0",
                       "model.balance=per_layer"}
        << "model.balance: per_layer is not read: model.lambda_bal is 0 (it is read with model.lambda_bal other than "
           "0)";
    // Read on a CUDA device only, or by a data-parallel run only (one process here).
    QTest::newRow("CUDA math options on the CPU, data-parallel options in one process")
        << QStringList{"train.tf32=false", "train.deterministic=true", "run.backend=gloo", "run.dist_timeout_s=60"}
        << "train.tf32: false is not read: run.device is 'cpu' (it is read on a CUDA device)\n"
           "train.deterministic: true is not read: run.device is 'cpu' (it is read on a CUDA device)\n"
           "run.backend: gloo is not read: the run is one process (it is read by a data-parallel run: torchrun, srun "
           "or --nproc)\n"
           "run.dist_timeout_s: 60 is not read: the run is one process (it is read by a data-parallel run: "
           "torchrun, srun or --nproc)";
    QTest::newRow("CUDA math options on a GPU")
        << QStringList{"run.device=cuda:1", "train.tf32=false", "train.deterministic=true"} << "";
    QTest::newRow("Radial's depth warm-up with a depth loss")
        << QStringList{"model.arch=radial", "model.depth_coeff=0.01", "model.depth_warmup=0.5"} << "";
  }

  void unreadConfigKeysAreNamed() {
    QFETCH(QStringList, sets);
    QFETCH(QString, expected);
    std::vector<std::string> s;
    for (const auto& item : sets) s.push_back(item.toStdString());
    QStringList messages;
    for (const auto& m : unread_config_keys(resolve_config(nlohmann::json::object(), s)))
      messages << QString::fromStdString(m);
    QCOMPARE(messages.join('\n'), expected);
    if (expected.contains(QStringLiteral("run.backend")))  // a data-parallel run reads them
      for (const auto& m : unread_config_keys(resolve_config(nlohmann::json::object(), s), /*data_parallel=*/true))
        QVERIFY2(m.rfind("run.", 0) != 0, m.c_str());
  }

  void everyPresetReadsItsKeys() {
    for (const auto& p : list_presets()) {
      const auto unread = unread_config_keys(preset_config(p.name));
      QVERIFY2(unread.empty(), (p.name + ": " + (unread.empty() ? "" : unread.front())).c_str());
    }
  }

  void everyPresetResolves() {
    const auto presets = list_presets();
    QVERIFY(presets.size() >= 3);
    for (const auto& p : presets) {
      const auto c = preset_config(p.name);
      QVERIFY2(!p.description.empty(), p.name.c_str());
      QCOMPARE(QString::fromStdString(c.arch()), QString::fromStdString(p.arch));
      QCOMPARE(QString::fromStdString(c.origin), QString::fromStdString(p.name));
    }
  }

  /// A preset folder holding files whose fields have other types: listed (the GUI's list and `presets` read them all),
  /// and loading one names the file.
  void presetListingSurvivesFieldsOfAnotherType() {
    QTemporaryDir dir;
    auto write = [&](const char* name, const char* text) { std::ofstream(dir.filePath(name).toStdString()) << text; };
    write("numbers.json", R"({"description": 5, "model": {"arch": 3}})");
    write("list.json", R"([1, 2])");
    write("model-list.json", R"({"description": "fine", "model": [1]})");
    const auto saved = qgetenv("ROUTELAB_EXPERIMENTS");
    qputenv("ROUTELAB_EXPERIMENTS", dir.path().toUtf8());
    std::vector<PresetInfo> presets;
    std::string error;
    try {
      presets = list_presets();
      preset_config("numbers");
    } catch (const ConfigError& e) {
      error = e.what();
    }
    qputenv("ROUTELAB_EXPERIMENTS", saved);
    QCOMPARE(presets.size(), std::size_t{3});
    for (const auto& p : presets) QCOMPARE(QString::fromStdString(p.arch), QString(kBaselineArchitecture));
    QCOMPARE(QString::fromStdString(presets[1].description), QString("fine"));  // model-list, sorted by name
    QVERIFY2(error.find("numbers") != std::string::npos, error.c_str());
  }

  /// What the CLI and the GUI's run worker print for LibTorch's exceptions: its message without the C++ backtrace
  /// what() carries, an allocator's refusal told apart as running out of memory.
  void foreignErrorsReadWithoutTheirBacktrace() {
    bool out_of_memory = true;
    try {
      (void)torch::empty({-1});
      QFAIL("no error");
    } catch (const std::exception& e) {
      const auto text = foreign_error_text(e, &out_of_memory);
      QVERIFY2(text.rfind("LibTorch: ", 0) == 0 && text.find("negative dimension") != std::string::npos &&
                   text.find('\n') == std::string::npos && std::string(e.what()).size() > text.size(),
               text.c_str());
      QVERIFY(!out_of_memory);
    }
    try {
      TORCH_CHECK(false, "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes");
    } catch (const std::exception& e) {
      QCOMPARE(QString::fromStdString(foreign_error_text(e, &out_of_memory)),
               QString("LibTorch: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"));
      QVERIFY(out_of_memory);
    }
    QCOMPARE(QString::fromStdString(foreign_error_text(std::runtime_error("plain"), &out_of_memory)), QString("plain"));
    QVERIFY(!out_of_memory);
  }

  void registryIsSortedAndComplete() {
    const auto& entries = architectures();
    QVERIFY(!entries.empty());
    for (std::size_t i = 1; i < entries.size(); ++i) QVERIFY(entries[i - 1].id < entries[i].id);
    for (const auto& e : entries) {
      QVERIFY(e.create && !e.display_name.empty() && !e.options.empty());
      for (const auto& spec : e.options) QVERIFY2(!spec.help.empty(), spec.key.c_str());
    }
    QVERIFY_THROWS_EXCEPTION(ConfigError, architecture("nope"));
  }
};

}  // namespace test_config

ROUTELAB_TEST_SUITE(test_config, TestConfig)
#include "test_config.moc"
