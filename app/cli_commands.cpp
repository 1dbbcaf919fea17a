// Implementation of routelab-cli's sub-commands on top of core/ (trainer, run store, registry, bench).
#include "app/cli_commands.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/bench/train_step_bench.h"
#include "core/config/experiment_config.h"
#include "core/config/sweep.h"
#include "core/data/tokenizer.h"
#include "core/models/registry.h"
#include "core/report/tables/run_tables.h"
#include "core/run/evaluation_record.h"
#include "core/run/run_config.h"
#include "core/run/run_health.h"
#include "core/store/run_query.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/data_parallel.h"
#include "core/train/resumable_run.h"
#include "core/train/trainer.h"
#include "core/util/cpu_allocator.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/paths.h"
#include "core/util/process.h"

namespace routelab::cli {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_cancel{false};

extern "C" void on_interrupt(int) { g_cancel.store(true); }

std::string resolve_db(const std::string& db) { return db.empty() ? default_db_path() : db; }


std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const auto s = static_cast<long long>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h";
  if (s >= 60) out << std::setw(s >= 3600 ? 2 : 1) << std::setfill('0') << (s / 60) % 60 << "m";
  out << std::setw(s >= 60 ? 2 : 1) << std::setfill('0') << s % 60 << "s";
  return out.str();
}

std::string fmt(const std::optional<double>& v, int precision = 4) {
  if (!v) return "-";
  std::ostringstream out;
  out << std::fixed << std::setprecision(precision) << *v;
  return out.str();
}

/// Progress on stderr: one rewritten line on a terminal, a line per log interval otherwise.
class ProgressPrinter : public TrainObserver {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO)) {}

  void on_started(std::int64_t run_id, const std::string& description, std::int64_t total_steps) override {
    if (!quiet_) std::cerr << "run " << run_id << ": " << description << "\n";
    log_every_ = std::max<std::int64_t>(1, total_steps / 50);
  }
  void on_step(const StepMetrics& m) override {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    if (tty_ && now - last_print_ < std::chrono::milliseconds(200) && m.step != m.total_steps) return;
    if (!tty_ && m.step % log_every_ != 0 && m.step != m.total_steps) return;
    last_print_ = now;
    std::ostringstream line;
    line << "step " << m.step << "/" << m.total_steps << "  loss " << std::fixed << std::setprecision(4) << m.loss
         << "  " << std::setprecision(0) << m.tokens_per_s << " tok/s  ETA " << format_duration(m.eta_s);
    if (last_val_) line << "  val " << std::setprecision(4) << *last_val_;
    if (tty_) {
      std::cerr << "\r\033[K" << line.str() << std::flush;
    } else {
      std::cerr << line.str() << "\n";
    }
  }
  void on_eval(const EvalMetrics& e) override {
    last_val_ = e.val_loss;
    if (quiet_ || !e.val_accuracy) return;
    // Classification: every evaluation on its own line (accuracy and macro-F1 over the validation split).
    std::ostringstream line;
    line << "eval step " << e.step;
    if (e.epoch) line << " (epoch " << *e.epoch << ")";
    line << "  val loss " << std::fixed << std::setprecision(4) << e.val_loss << "  accuracy " << *e.val_accuracy
         << "  macro-F1 " << e.val_macro_f1.value_or(0.0);
    if (const auto it = e.stats.find("entropy"); it != e.stats.end()) line << "  routing entropy " << it->second;
    std::cerr << (tty_ ? "\r\033[K" : "") << line.str() << "\n";
  }
  void on_finished(const TrainOutcome&) override {
    if (!quiet_ && tty_) std::cerr << "\n";
  }

 private:
  bool quiet_, tty_;
  std::int64_t log_every_ = 1;
  std::optional<double> last_val_;
  std::chrono::steady_clock::time_point last_print_{};
};

int report(const TrainOutcome& o) {
  std::cout << "run " << o.run_id << " " << to_string(o.status) << " at step " << o.last_step;
  if (o.first_val_loss && o.last_val_loss)
    std::cout << ": val loss " << fmt(o.first_val_loss) << " -> " << fmt(o.last_val_loss);
  if (o.first_val_accuracy && o.last_val_accuracy)
    std::cout << ", val accuracy " << fmt(o.first_val_accuracy) << " -> " << fmt(o.last_val_accuracy);
  std::cout << "\nstored in " << o.db_path << "\n";
  if (o.status == RunStatus::Failed) {
    std::cerr << "routelab-cli: run failed: " << o.message << "\n";
    return 1;
  }
  return o.status == RunStatus::Stopped ? 130 : 0;
}

}  // namespace

SignalScope::SignalScope() {
  g_cancel = false;
  previous_int_ = std::signal(SIGINT, on_interrupt);
  previous_term_ = std::signal(SIGTERM, on_interrupt);
}

SignalScope::~SignalScope() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

const std::atomic<bool>* SignalScope::flag() const { return &g_cancel; }

namespace {

nlohmann::json run_json(const RunRecord& r) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"id", r.id}, {"name", r.name}, {"arch", r.arch}, {"preset", r.preset}, {"status", to_string(r.status)},
          {"message", r.message}, {"steps", r.last_step}, {"total_steps", r.total_steps}, {"seed", r.seed},
          {"device", r.device}, {"world_size", r.world_size}, {"backend", r.backend}, {"config_hash", r.config_hash}, {"created_at", r.created_at}, {"ended_at", r.ended_at},
          {"last_train_loss", opt(r.last_train_loss)}, {"last_val_loss", opt(r.last_val_loss)},
          {"best_val_loss", opt(r.best_val_loss)}, {"routelab_version", r.routelab_version},
          {"torch_version", r.torch_version}, {"qt_version", r.qt_version}, {"tags", r.tags}, {"notes", r.notes},
          {"archived", r.archived},
          {"parent_run_id", r.parent_run_id ? nlohmann::json(*r.parent_run_id) : nlohmann::json(nullptr)},
          {"resumed_from_step", r.resumed_from_step ? nlohmann::json(*r.resumed_from_step) : nlohmann::json(nullptr)}};
}

/// What `show` says of a run's stored tokenizer: its kind and size, and for SentencePiece its content hash and the
/// file it came from (the model's bytes stay in the store); null for a run stored without one.
nlohmann::json tokenizer_summary(const std::string& stored, std::int64_t run_id) {
  try {
    const auto doc = parse_stored_tokenizer(stored, "run " + std::to_string(run_id));
    if (doc.is_null()) return nullptr;
    const auto tokenizer = Tokenizer::from_json(doc);
    nlohmann::json out = {{"kind", tokenizer->kind()}, {"vocab", tokenizer->vocab_size()}};
    for (const char* key : {"hash", "source"})
      if (doc.contains(key)) out[key] = doc[key];
    return out;
  } catch (const DataError& e) {  // a damaged stored tokenizer is reported; the rest of the run still shows
    return {{"kind", "unreadable"}, {"error", e.what()}};
  }
}

RunRecord require_run(const RunStore& store, std::int64_t id) {
  auto r = store.run(id);
  if (!r) throw StoreError(store.path() + ": no run with id " + std::to_string(id));
  return *r;
}

/// Whether the run's architecture is a classifier (an architecture no longer registered counts as LM).
bool is_classification(const RunRecord& r) {
  try {
    return architecture(r.arch).task == Task::Classification;
  } catch (const ConfigError&) {
    return false;
  }
}

/// The last stored value of a metric, if any.
std::optional<double> last_metric(const RunStore& store, std::int64_t id, const std::string& key) {
  const auto points = store.metric(id, key);
  if (points.empty()) return std::nullopt;
  return points.back().value;
}

/// The best (highest) stored value of a metric, if any.
std::optional<double> best_metric(const RunStore& store, std::int64_t id, const std::string& key) {
  std::optional<double> best;
  for (const auto& p : store.metric(id, key))
    if (!best || p.value > *best) best = p.value;
  return best;
}

/// JSON cannot hold NaN/Inf: they are written as the strings "NaN", "Infinity", "-Infinity".
nlohmann::json number_json(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

/// number_json of a value that may be absent (null).
nlohmann::json optional_json(const std::optional<double>& v) { return v ? number_json(*v) : nlohmann::json(); }

nlohmann::json alerts_json(const std::vector<HealthAlert>& alerts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : alerts)
    out.push_back({{"severity", to_string(a.severity)}, {"kind", a.kind}, {"message", a.message}});
  return out;
}

/// The run's alerts by kind for the runs table ("-" when healthy; errors upper case).
std::string alert_kinds(const std::vector<HealthAlert>& alerts) {
  std::string out;
  for (const auto& a : alerts) {
    std::string kind = a.kind;
    if (a.severity == HealthAlert::Severity::Error)
      for (auto& c : kind) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (out.find(kind) == std::string::npos) out += (out.empty() ? "" : ",") + kind;
  }
  return out.empty() ? "-" : out;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int cmd_train(const TrainArgs& a) {
  std::vector<std::string> sets = a.sets;
  if (a.steps > 0) {
    sets.push_back("train.steps=" + std::to_string(a.steps));
    sets.push_back("train.epochs=0");  // an explicit step count wins over a classification preset's epochs
  }
  if (a.seed >= 0) sets.push_back("run.seed=" + std::to_string(a.seed));
  if (a.threads >= 0) sets.push_back("run.threads=" + std::to_string(a.threads));
  if (!a.device.empty()) sets.push_back("run.device=" + a.device);
  if (!a.precision.empty()) sets.push_back("train.precision=" + a.precision);
  const nlohmann::json overrides = a.config_file.empty() ? load_preset(a.preset) : load_json_file(a.config_file);
  const std::string origin = a.config_file.empty() ? a.preset : a.config_file;
  if (a.steps > 0) {
    // --steps shortens a preset: keep its warm-up inside the new budget (10% of it) unless set explicitly.
    const auto base = resolve_config(overrides, a.sets, origin);
    if (base.train().at("warmup_steps").get<std::int64_t>() > a.steps)
      sets.push_back("train.warmup_steps=" + std::to_string(a.steps / 10));
  }
  ExperimentConfig config = resolve_config(overrides, sets, origin);
  const auto rank = launched_rank(a.nproc);
  if (a.nproc > 0) {  // the config is checked once here, before any rank starts
    check_data_parallel(config, a.nproc);
    return run_nproc(a.nproc);
  }
  TrainRequest request{config, resolve_db(a.db), a.name, ""};
  ProgressPrinter progress(a.quiet || (rank && rank->rank != 0));  // rank 0 speaks for the run
  SignalScope signals;
  return report(train(request, &progress, &g_cancel, rank ? &*rank : nullptr));
}

int cmd_resume(const std::string& db, std::int64_t run_id, bool quiet, double takeover_after_s, int nproc) {
  const auto rank = launched_rank(nproc);
  if (nproc > 0) {
    check_resume_over_ranks(resolve_db(db), run_id, nproc);
    return run_nproc(nproc);
  }
  ProgressPrinter progress(quiet || (rank && rank->rank != 0));
  SignalScope signals;
  return report(resume(resolve_db(db), run_id, &progress, &g_cancel, /*threads=*/-1, takeover_after_s,
                       rank ? &*rank : nullptr));
}

namespace {

/// Tags the run with the sweep as soon as it exists, so a crashed point still belongs to its sweep.
class SweepTagger : public ProgressPrinter {
 public:
  SweepTagger(bool quiet, std::string db, std::string tag) : ProgressPrinter(quiet), db_(std::move(db)), tag_(std::move(tag)) {}
  void on_started(std::int64_t run_id, const std::string& description, std::int64_t total_steps) override {
    if (!tag_.empty()) {  // "": a data-parallel rank other than 0, which writes nothing
      RunPatch patch;
      patch.tags = tag_;
      RunStore(db_, /*mark_crashed=*/false).patch_run(run_id, patch);
    }
    ProgressPrinter::on_started(run_id, description, total_steps);
  }

 private:
  std::string db_, tag_;
};

/// A finished run of the store with this config hash and name (a sweep point already done).
std::optional<std::int64_t> finished_run(const RunStore& store, const SweepPoint& point) {
  for (const auto& r : store.list_runs(true))
    if (r.status == RunStatus::Finished && r.config_hash == point.config.hash() && r.name == point.name) return r.id;
  return std::nullopt;
}

}  // namespace

int cmd_sweep(const SweepArgs& a) {
  const auto plan = load_sweep(a.file);
  const auto& table = sweep_table(plan);  // a typo in its table fails now, not after the last run
  const auto db = resolve_db(a.db);
  std::cout << "sweep " << plan.name << ": " << plan.points.size() << " runs" << (plan.description.empty() ? "" : " (")
            << plan.description << (plan.description.empty() ? "" : ")") << "\n";
  if (a.dry_run) {
    for (const auto& p : plan.points) std::cout << "  " << p.name << "  [" << p.origin << ", " << p.config.hash() << "]\n";
    return 0;
  }
  std::vector<std::int64_t> ids;
  SignalScope signals;
  const auto rank = launched_rank(0);  // under torchrun or srun every point trains on every rank
  for (const auto& point : plan.points) {
    if (a.skip_done) {
      RunStore store(db, /*mark_crashed=*/false);
      if (const auto done = finished_run(store, point)) {
        std::cout << "run " << *done << " " << point.name << ": already finished, skipped\n";
        ids.push_back(*done);
        continue;
      }
    }
    const bool follower = rank && rank->rank != 0;
    SweepTagger progress(a.quiet || follower, db, follower ? "" : plan.tag());
    const auto outcome = train(TrainRequest{point.config, db, point.name, ""}, &progress, &g_cancel,
                               rank ? &*rank : nullptr);
    const int code = report(outcome);
    ids.push_back(outcome.run_id);
    if (code != 0) {
      std::cerr << "routelab-cli: sweep " << plan.name << " stopped at " << point.name
                << " (re-run with --skip-done to continue)\n";
      return code;
    }
  }
  RunStore store(db, /*mark_crashed=*/false);
  std::cout << "\n" << to_markdown(build_run_table(store, table, ids, /*by_seed=*/true));
  const std::string where = "tags=" + plan.tag();
  std::cout << "\nread back by option: routelab-cli figure sweep --db " << db << " --where " << where << " --out "
            << plan.name << "-sweep.pdf\n(two options together: figure sweep-grid; the run ids: routelab-cli runs --db "
            << db << " --where " << where << " --ids)\n";
  return 0;
}

int cmd_runs(const std::string& db, bool json, bool all, const std::string& where, bool ids) {
  RunStore store(resolve_db(db));
  const auto runs = runs_where(store, where, all);
  if (ids) {  // in id order, the order the runs were made (a sweep's points)
    std::vector<std::int64_t> sorted;
    for (const auto& r : runs) sorted.push_back(r.id);
    std::sort(sorted.begin(), sorted.end());
    std::string out;
    for (const auto id : sorted) out += (out.empty() ? "" : ",") + std::to_string(id);
    std::cout << out << "\n";
    return 0;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : runs) {
      auto row = run_json(r);
      row["alerts"] = alerts_json(assess_run(store, r, unix_now()));
      if (is_classification(r)) {
        row["task"] = "classification";
        const auto acc = last_metric(store, r.id, "val/accuracy"), f1 = last_metric(store, r.id, "val/macro_f1");
        row["last_val_accuracy"] = acc ? nlohmann::json(*acc) : nlohmann::json(nullptr);
        row["last_val_macro_f1"] = f1 ? nlohmann::json(*f1) : nlohmann::json(nullptr);
      }
      out.push_back(std::move(row));
    }
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  // Losses for every run; classification runs add validation accuracy and macro-F1.
  std::cout << std::left << std::setw(6) << "ID" << std::setw(28) << "NAME" << std::setw(20) << "ARCH" << std::setw(10)
            << "STATUS" << std::setw(14) << "STEPS" << std::setw(12) << "TRAIN" << std::setw(10) << "VAL"
            << std::setw(10) << "VAL ACC" << std::setw(10) << "MACRO-F1" << "ALERTS\n";
  for (const auto& r : runs) {
    const bool cls = is_classification(r);
    std::cout << std::setw(6) << r.id << std::setw(28) << r.name.substr(0, 27) << std::setw(20) << r.arch.substr(0, 19)
              << std::setw(10) << to_string(r.status) << std::setw(14)
              << (std::to_string(r.last_step) + "/" + std::to_string(r.total_steps)) << std::setw(12)
              << fmt(r.last_train_loss) << std::setw(10) << fmt(r.last_val_loss) << std::setw(10)
              << (cls ? fmt(last_metric(store, r.id, "val/accuracy")) : "-") << std::setw(10)
              << (cls ? fmt(last_metric(store, r.id, "val/macro_f1")) : "-")
              << alert_kinds(assess_run(store, r, unix_now())) << "\n";
  }
  return 0;
}

int cmd_show(const std::string& db, std::int64_t run_id, bool json) {
  RunStore store(resolve_db(db));
  const auto r = require_run(store, run_id);
  auto doc = run_json(r);
  doc["config"] = stored_config(r, store.path());
  doc["metric_keys"] = store.metric_keys(run_id);
  doc["checkpoints"] = nlohmann::json::array();
  for (const auto& c : store.checkpoints(run_id))
    doc["checkpoints"].push_back({{"step", c.step}, {"path", c.path}, {"bytes", c.bytes}});
  const bool cls = is_classification(r);
  doc["task"] = cls ? "classification" : "lm";
  doc["tokenizer"] = tokenizer_summary(store.run_tokenizer(run_id), run_id);
  doc["evals"] = nlohmann::json::array();
  for (const auto& e : read_evaluations(store, run_id)) {
    nlohmann::json row = {{"step", e.step}, {"split", e.split}, {"loss", number_json(e.loss)}};
    if (cls) {
      row["accuracy"] = optional_json(e.accuracy);
      row["macro_f1"] = optional_json(e.macro_f1);
      row["entropy"] = optional_json(e.stat("entropy"));
    } else {
      row["ppl"] = number_json(e.ppl);
      row["bpc"] = number_json(e.bpc);
    }
    doc["evals"].push_back(std::move(row));
  }
  doc["tasks"] = nlohmann::json::object();  // zero-shot measures kept by `tasks --store`: the latest of each
  for (const auto& key : doc["metric_keys"]) {
    const auto k = key.get<std::string>();
    const auto slash = k.rfind('/');
    if (k.rfind("task/", 0) != 0 || slash <= 5) continue;
    const auto points = store.metric(run_id, k);
    doc["tasks"][k.substr(5, slash - 5)][k.substr(slash + 1)] = {{"step", points.back().step},
                                                                 {"value", number_json(points.back().value)}};
  }
  const auto alerts = assess_run(store, r, unix_now());
  doc["alerts"] = alerts_json(alerts);
  if (json) {
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::cout << "run " << r.id << " '" << r.name << "' (" << r.arch << ", preset " << (r.preset.empty() ? "-" : r.preset)
            << ")\nstatus   " << to_string(r.status) << (r.message.empty() ? "" : ": " + r.message) << "\nsteps    "
            << r.last_step << "/" << r.total_steps << "\nloss     train " << fmt(r.last_train_loss) << ", val "
            << fmt(r.last_val_loss) << " (best " << fmt(r.best_val_loss) << ")\ndevice   " << r.device << ", seed "
            << r.seed;
  if (r.world_size > 1 || !r.backend.empty())
    std::cout << "\nranks    " << r.world_size << " (data parallel" << (r.backend.empty() ? "" : ", " + r.backend) << ")";
  if (r.parent_run_id) std::cout << "\nparent   run " << *r.parent_run_id;
  if (const auto& t = doc["tokenizer"]; t.is_object()) {
    std::cout << "\ntokenizer " << t["kind"].get<std::string>();
    if (t.contains("vocab")) std::cout << ", " << t["vocab"] << " symbols";
    if (t.contains("hash")) std::cout << ", hash " << t["hash"].get<std::string>();
    if (t.contains("source")) std::cout << ", from " << t["source"].get<std::string>();
    if (t.contains("error")) std::cout << ": " << t["error"].get<std::string>();
  }
  for (const auto& a : alerts) std::cout << "\n" << std::left << std::setw(9) << to_string(a.severity) << a.message;
  if (cls)
    std::cout << "\naccuracy val " << fmt(last_metric(store, run_id, "val/accuracy")) << " (best "
              << fmt(best_metric(store, run_id, "val/accuracy")) << "), macro-F1 "
              << fmt(last_metric(store, run_id, "val/macro_f1")) << ", train (last epoch) "
              << fmt(last_metric(store, run_id, "train/epoch_accuracy"));
  std::cout << "\nversions RouteLab " << r.routelab_version << ", " << r.torch_version
            << (r.qt_version.empty() ? "" : ", Qt " + r.qt_version) << "\nconfig   " << r.config_hash << "\n"
            << doc["config"].dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  for (const auto& e : doc["evals"]) {
    std::cout << "eval     step " << e["step"] << " val loss " << e["loss"];
    if (cls) std::cout << " accuracy " << e["accuracy"] << " macro-F1 " << e["macro_f1"];
    std::cout << "\n";
  }
  for (const auto& [name, measures] : doc["tasks"].items()) {
    std::cout << "task     " << name;
    const char* separator = ":";
    for (const auto& [measure, m] : measures.items()) {
      std::cout << separator << " " << measure << " " << m["value"] << " (step " << m["step"] << ")";
      separator = ",";
    }
    std::cout << "\n";
  }
  for (const auto& c : doc["checkpoints"]) std::cout << "ckpt     step " << c["step"] << " " << c["path"].get<std::string>() << "\n";
  return 0;
}

int cmd_compare(const std::string& db, const std::vector<std::int64_t>& run_ids, bool json) {
  RunStore store(resolve_db(db));
  nlohmann::json rows = nlohmann::json::array(), class_rows = nlohmann::json::array();
  std::size_t max_layers = 0, max_experts = 0;
  for (const auto id : run_ids) {
    const auto r = require_run(store, id);
    const auto evals = read_evaluations(store, id);
    if (evals.empty()) throw StoreError("run " + std::to_string(id) + " has no evaluation yet");
    const auto& e = evals.back();
      if (is_classification(r)) {
      // Classification: accuracy, macro-F1, routing entropy and per-expert loads (mean over layers) of the last
      // evaluation, plus the best validation accuracy.
      nlohmann::json row = {{"run", id}, {"name", r.name}, {"arch", r.arch}, {"task", "classification"},
                            {"step", e.step}, {"val_loss", number_json(e.loss)}};
      row["val_accuracy"] = optional_json(e.accuracy);
      row["val_macro_f1"] = optional_json(e.macro_f1);
      const auto best = best_metric(store, id, "val/accuracy");
      row["best_val_accuracy"] = best ? nlohmann::json(*best) : nlohmann::json();
      const auto epoch = last_metric(store, id, "val/epoch");
      row["epoch"] = epoch ? nlohmann::json(*epoch) : nlohmann::json();
      row["entropy"] = optional_json(e.stat("entropy"));
      row["load"] = nlohmann::json::array();
      for (std::size_t i = 0; e.stat("load/E" + std::to_string(i)); ++i)
        row["load"].push_back(number_json(*e.stat("load/E" + std::to_string(i))));
      max_experts = std::max(max_experts, row["load"].size());
      class_rows.push_back(std::move(row));
      continue;
    }
    nlohmann::json row = {{"run", id}, {"name", r.name}, {"arch", r.arch}, {"step", e.step},
                          {"val_loss", number_json(e.loss)}, {"val_bpc", number_json(e.bpc)}};
    const auto speed = store.metric(id, "train/tokens_per_s");
    row["train_tokens_per_s"] = speed.empty() ? nlohmann::json() : number_json(speed.back().value);
    row["flops_ratio"] = optional_json(e.flops_ratio);
    row["routed_fraction"] = nlohmann::json::array();
    for (const auto& l : e.layers)
      row["routed_fraction"].push_back(l.routed ? number_json(l.routed_fraction) : nlohmann::json());
    max_layers = std::max(max_layers, row["routed_fraction"].size());
    rows.push_back(std::move(row));
  }
  if (json) {
    for (const auto& row : class_rows) rows.push_back(row);
    std::cout << rows.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  const auto num = [](const nlohmann::json& v, int precision) {
    if (!v.is_number()) return std::string("-");
    std::ostringstream s;
    s << std::fixed << std::setprecision(precision) << v.get<double>();
    return s.str();
  };
  if (!class_rows.empty()) {
    // Markdown: one row per classification run; loads u_i per expert, averaged over the layers.
    std::cout << "| run | arch | step | epoch | val loss | val acc | best acc | macro-F1 | routing entropy |";
    for (std::size_t i = 0; i < max_experts; ++i) std::cout << " u" << i << " |";
    std::cout << "\n|---|---|---|---|---|---|---|---|---|";
    for (std::size_t i = 0; i < max_experts; ++i) std::cout << "---|";
    std::cout << "\n";
    for (const auto& row : class_rows) {
      std::cout << "| " << row["run"] << " " << row["name"].get<std::string>() << " | " << row["arch"].get<std::string>()
                << " | " << row["step"] << " | " << num(row["epoch"], 2) << " | " << num(row["val_loss"], 4) << " | "
                << num(row["val_accuracy"], 4) << " | " << num(row["best_val_accuracy"], 4) << " | "
                << num(row["val_macro_f1"], 4) << " | " << num(row["entropy"], 4) << " |";
      for (std::size_t i = 0; i < max_experts; ++i)
        std::cout << " " << (i < row["load"].size() ? num(row["load"][i], 4) : std::string("-")) << " |";
      std::cout << "\n";
    }
    if (rows.empty()) return 0;
    std::cout << "\n";
  }
  // Markdown: one row per run, one column per layer (inference-mode routed %, "-" for a dense layer).
  std::cout << "| run | arch | step | val loss | val bpc | FLOPs ratio | train tok/s |";
  for (std::size_t l = 0; l < max_layers; ++l) std::cout << " L" << l << " |";
  std::cout << "\n|---|---|---|---|---|---|---|";
  for (std::size_t l = 0; l < max_layers; ++l) std::cout << "---|";
  std::cout << "\n";
  for (const auto& row : rows) {
    std::cout << "| " << row["run"] << " " << row["name"].get<std::string>() << " | " << row["arch"].get<std::string>()
              << " | " << row["step"] << " | " << num(row["val_loss"], 4) << " | " << num(row["val_bpc"], 3) << " | "
              << num(row["flops_ratio"], 3) << " | " << num(row["train_tokens_per_s"], 0) << " |";
    for (std::size_t l = 0; l < max_layers; ++l) {
      const auto& f = l < row["routed_fraction"].size() ? row["routed_fraction"][l] : nlohmann::json();
      std::cout << " " << (f.is_number() ? num(100.0 * f.get<double>(), 1) + "%" : std::string("-")) << " |";
    }
    std::cout << "\n";
  }
  return 0;
}

int cmd_export(const std::string& db, std::int64_t run_id, const std::string& format, const std::string& out_path) {
  RunStore store(resolve_db(db));
  const auto r = require_run(store, run_id);
  check_output_path(out_path, db);
  std::ofstream file;
  if (!out_path.empty()) {
    file.open(out_path);
    if (!file) throw Error(out_path + ": cannot write");
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  out << std::setprecision(10);
  if (format == "csv") {
    out << "run,key,step,wall_time,value\n";
    for (const auto& key : store.metric_keys(run_id))
      for (const auto& p : store.metric(run_id, key))
        out << run_id << "," << key << "," << p.step << "," << std::fixed << std::setprecision(3) << p.wall_time
            << std::defaultfloat << std::setprecision(10) << "," << p.value << "\n";
  } else {
    auto doc = run_json(r);
    doc["config"] = stored_config(r, store.path());
    for (const auto& key : store.metric_keys(run_id)) {
      auto& series = doc["metrics"][key];
      series = nlohmann::json::array();
      for (const auto& p : store.metric(run_id, key))
        series.push_back({{"step", p.step}, {"wall_time", p.wall_time}, {"value", number_json(p.value)}});
    }
    doc["routing"] = nlohmann::json::array();
    for (const auto& row : store.routing(run_id))
      doc["routing"].push_back({{"step", row.step}, {"layer", row.layer}, {"routed_fraction", row.routed_fraction},
                                {"gate_mean", row.gate_mean}, {"tokens_attn", row.tokens_attn}, {"tokens_mlp", row.tokens_mlp}});
    out << doc.dump(1) << "\n";
  }
  if (!out_path.empty()) std::cerr << "wrote " << out_path << "\n";
  return 0;
}

namespace {

/// The benchmark model and schedule the train-step and contention benchmarks share.
TrainStepBenchOptions step_bench_options(const BenchArgs& a) {
  TrainStepBenchOptions o;
  apply_bench_shape(o, a.shape);
  if (a.batch > 0) o.batch = a.batch;
  if (a.context > 0) o.context = a.context;
  o.steps = a.steps;
  o.warmup = a.warmup;
  o.threads = static_cast<int>(a.threads);
  return o;
}

}  // namespace

int cmd_bench_train_step(const BenchArgs& a) {
  TrainStepBenchOptions o = step_bench_options(a);
  o.device = a.device;
  o.tf32 = a.tf32;
  o.profile_path = a.profile;
  o.kernel_top = a.kernels;
  check_train_step_bench(o);  // a clear error before the peer starts
  if (a.cuda_graph && (o.device.rfind("cuda", 0) != 0 || !cuda_graphs_available()))
    throw ConfigError("bench train-step --cuda-graph: needs --device cuda and a CUDA LibTorch (this one: " +
                      torch_version_string() + ")");
  const std::string python = a.python.empty() ? default_peer_python() : a.python;
  const std::string script = a.script.empty() ? default_peer_script(python) : a.script;
  std::cout << "train-step benchmark on " << o.device << ": GPT-2 style d " << o.n_embd << ", L " << o.n_layer << ", H "
            << o.n_head << ", d_ff " << o.d_ff << ", vocab " << o.vocab << ", B " << o.batch << ", T " << o.context
            << ", " << o.steps << " timed steps after " << o.warmup << " warm-up"
            << (o.tf32 ? ", fp32 matmuls on TF32" : "") << "; " << torch_version_string() << blas_kernels_note() << "\n"
            << "peer: " << python << " " << script << "\n";
  auto print_mfu = [&](double tflops) {
    if (tflops < 1.0)
      std::cout << "  " << std::setprecision(0) << tflops * 1000.0 << " GFLOP/s";
    else
      std::cout << "  " << std::setprecision(1) << tflops << " TFLOP/s";
    if (a.peak_tflops > 0) std::cout << " (MFU " << std::setprecision(1) << 100.0 * tflops / a.peak_tflops << "%)";
  };
  for (const bool bf16 : {false, true}) {
    if ((bf16 && a.precision == "fp32") || (!bf16 && a.precision == "bf16")) continue;
    o.bf16 = bf16;
    const char* precision = bf16 ? "bf16" : "fp32";
    // Side by side in one run: the peer (eager, then compiled when asked), then RouteLab, same shape and device.
    std::vector<std::pair<std::string, PeerBenchResult>> peers{{"eager", run_peer_bench(python, script, o)}};
    if (a.compile) peers.emplace_back("torch.compile", run_peer_bench(python, script, o, /*compile=*/true));
    for (const auto& [mode, peer] : peers) {
      if (!peer.ok) {
        std::cout << "pytorch " << precision << " " << mode << ": unavailable: " << peer.output.substr(0, 300) << "\n";
        continue;
      }
      std::cout << "pytorch " << precision << " " << mode << ": " << std::fixed << std::setprecision(1)
                << peer.ms_per_step << " ms/step  " << std::setprecision(0) << peer.tokens_per_s << " tokens/s";
      print_mfu(train_step_flops(o) / (peer.ms_per_step / 1000.0) / 1e12);
      std::cout << "\n";
    }
    for (const bool graph : {false, true}) {
      if (graph && !a.cuda_graph) continue;
      o.cuda_graph = graph;
      const auto r = bench_train_step(o);
      std::cout << "routelab " << precision << (graph ? " CUDA graph" : "") << " (" << r.threads << " threads, "
                << r.parameters << " params, " << r.optimizer << " AdamW, kernels: " << r.kernels << "): " << std::fixed << std::setprecision(1)
                << r.ms_per_step << " ms/step  " << std::setprecision(0) << r.tokens_per_s << " tokens/s  loss "
                << std::setprecision(3) << r.first_loss << " -> " << r.last_loss;
      print_mfu(r.tflops);
      for (const auto& [mode, peer] : peers)
        if (peer.ok)
          std::cout << "  ratio vs " << mode << " " << std::setprecision(2) << r.tokens_per_s / peer.tokens_per_s
                    << "x";
      std::cout << "\n" << r.kernel_table;
    }
  }
  if (o.device == "cpu") {
    const auto cache = cpu_cache_stats();
    std::cout << "CPU block cache (ROUTELAB_CPU_CACHE_MB=0 turns it off): " << cache.hits << " large allocations reused, "
              << cache.misses << " from the system, " << (cache.cached_bytes >> 20) << " MiB held\n";
  }
  return 0;
}

int cmd_bench_routing(const RoutingBenchOptions& o) {
  const auto rows = bench_routed_attention(o);  // bad options refused before anything is printed
  std::cout << "DTRNet layer forward+backward, batch " << o.batch << ", d " << o.n_embd << ", " << o.n_head
            << " heads, median of " << o.reps << " (ms)\n";
  std::cout << "| context | routed | compact ms | masked ms | dense layer ms | compact / dense | masked / compact | FLOPs ratio |\n"
               "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    std::cout << std::fixed << std::setprecision(1) << "| " << r.context << " | " << 100.0 * r.routed_share << "% | "
              << r.compact_ms << " | ";
    if (o.masked) std::cout << r.masked_ms << " | ";
    else std::cout << "- | ";
    std::cout << r.dense_ms << " | " << std::setprecision(2) << r.compact_ms / r.dense_ms << " | ";
    if (o.masked) std::cout << r.masked_ms / r.compact_ms << " | ";
    else std::cout << "- | ";
    std::cout << std::setprecision(3) << r.flops_ratio << " |\n";
  }
  return 0;
}

int cmd_bench_loss(const LossBenchOptions& o) {
  std::cout << "next-token loss, forward + backward on " << o.device << ": " << o.rows << " rows x " << o.vocab
            << " columns (a view of a product padded to a multiple of 64), median of " << o.reps << " after "
            << o.warmup << " warm-up\n"
            << "| logits | unfused ms | fused ms | speed-up | max |loss diff| | max |grad diff| | max |grad| |\n"
               "|---|---|---|---|---|---|---|\n";
  for (const auto& r : bench_loss(o))
    std::cout << "| " << r.precision << " | " << std::fixed << std::setprecision(2) << r.unfused_ms << " | "
              << r.fused_ms << " | " << r.unfused_ms / r.fused_ms << "x | " << std::scientific << std::setprecision(2)
              << r.loss_diff << " | " << r.grad_diff << " | " << r.grad_max << " |\n"
              << std::defaultfloat;
  return 0;
}

std::string fixed(double v, int precision) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

void check_output_path(const std::string& out, const std::string& db) {
  if (out.empty()) return;
  std::error_code ec;
  const auto canonical = [&](const fs::path& p) { return fs::weakly_canonical(fs::absolute(p), ec); };
  const fs::path target = canonical(out);
  const std::string store = resolve_db(db);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    if (target == canonical(store + suffix))
      throw Error("--out " + out + " names the run store " + store + ": writing there would destroy it");
  // Every checkpoint of the store lies under <store folder>/checkpoints/<store name>/.
  const fs::path checkpoints = canonical(fs::path(checkpoint_dir(store, 0)).parent_path());
  const auto rel = target.lexically_relative(checkpoints);
  if (!rel.empty() && *rel.begin() != "..")
    throw Error("--out " + out + " lies in the checkpoint folder of " + store + " (" + checkpoints.string() +
                "): choose a file elsewhere");
  std::ifstream existing(target, std::ios::binary);
  char header[16] = {};
  if (existing.read(header, sizeof header) && std::string(header, 16) == std::string("SQLite format 3\0", 16))
    throw Error("--out " + out + " is an SQLite database (a run store?): it is not overwritten");
}

int cmd_bench_contention(const BenchArgs& a) {
  TrainStepBenchOptions o = step_bench_options(a);
  o.bf16 = a.precision == "bf16";
  std::cout << "contention benchmark: RouteLab's training step (d " << o.n_embd << ", L " << o.n_layer << ", B "
            << o.batch << ", T " << o.context << ", " << (o.bf16 ? "bf16" : "fp32") << ", " << o.steps
            << " timed steps) idle, then beside one busy process, then idle again; " << ::sysconf(_SC_NPROCESSORS_ONLN)
            << " cores, OpenMP waiting: " << openmp_wait_policy() << "; " << torch_version_string()
            << blas_kernels_note() << "\n";
  std::cout << std::fixed << std::setprecision(1);
  auto measure = [&](const char* label) {
    const auto r = bench_train_step(o);
    std::cout << "  " << std::left << std::setw(24) << label << std::right << std::setw(9) << r.ms_per_step
              << " ms/step  (" << r.threads << " threads)" << std::endl;
    return r.ms_per_step;
  };
  const double idle_before = measure("idle");
  // The competitor: a process that only spins, as a second training or a compile job would keep one core busy.
  const pid_t busy = ::fork();
  if (busy < 0) throw Error(std::string("cannot start the busy process: ") + std::strerror(errno));
  if (busy == 0) {
    volatile std::uint64_t spin = 0;
    for (;;) spin = spin + 1;
  }
  double beside = 0;
  try {
    beside = measure("beside 1 busy process");
  } catch (...) {
    ::kill(busy, SIGKILL);
    ::waitpid(busy, nullptr, 0);
    throw;
  }
  ::kill(busy, SIGKILL);
  ::waitpid(busy, nullptr, 0);
  const double idle_after = measure("idle again");
  const double idle = 0.5 * (idle_before + idle_after);
  std::cout << std::setprecision(2) << "slowdown beside one busy process: " << beside / idle
            << "x (against the mean of both idle runs)\n";
  return 0;
}

}  // namespace routelab::cli
