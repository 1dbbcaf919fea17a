// A training run's checkpoints (core/train/run_checkpoints.h).
#include "core/train/run_checkpoints.h"

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "core/train/eval_records.h"
#include "core/util/paths.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void remove_checkpoint_file(const std::string& path, std::int64_t run_id, spdlog::logger& log) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) log.warn("run {}: could not delete the checkpoint {}: {}", run_id, path, ec.message());
}

}  // namespace

void rewind_run(RunStore& store, std::int64_t run_id, std::int64_t step, spdlog::logger& log) {
  std::vector<std::string> dropped;
  for (const auto& row : store.checkpoints(run_id))
    if (row.step > step) dropped.push_back(row.path);
  store.truncate_after(run_id, step);  // committed first: no row names a file deleted below
  for (const auto& path : dropped) {
    remove_checkpoint_file(path, run_id, log);
    log.debug("run {}: checkpoint {} deleted (after step {}, where the run resumes)", run_id, path, step);
  }
}

void RunCheckpoints::open(const std::string& db_path, std::int64_t run_id, RankWriter& writer,
                          std::shared_ptr<spdlog::logger> log) {
  db_path_ = db_path;
  run_id_ = run_id;
  writer_ = &writer;
  log_ = std::move(log);
  if (keep_ > 0) kept_ = RunStore(db_path_, false).checkpoints(run_id_);
}

void RunCheckpoints::write(torch::nn::Module& model, torch::optim::AdamW& optimizer, const CheckpointMeta& meta) {
  if (meta.step == last_step_) return;
  std::ostringstream name;
  name << "step-" << std::setw(8) << std::setfill('0') << meta.step << ".pt";
  const auto path = (fs::path(checkpoint_dir(db_path_, run_id_)) / name.str()).string();
  finish();  // one snapshot in memory at a time, and the disk's room counted after the last write
  const auto t0 = std::chrono::steady_clock::now();
  if (async_) {
    auto snapshot = checkpoint_snapshot(path, model, optimizer, meta);
    log_->debug("run {}: checkpoint of step {}: {} MiB copied in {:.2f} s, written on its own thread", run_id_,
                meta.step, snapshot.bytes >> 20, seconds_since(t0));
    background_.start(std::move(snapshot));
  } else {
    const auto saved = save_checkpoint(path, model, optimizer, meta);
    record({path, meta.step, saved, seconds_since(t0)});
  }
  last_step_ = meta.step;
}

void RunCheckpoints::poll() {
  if (const auto written = background_.poll()) record(*written);
}

void RunCheckpoints::finish() {
  if (const auto written = background_.finish()) record(*written);
}

void RunCheckpoints::record(const WrittenCheckpoint& written) {
  const CheckpointRow row{written.step, written.path, written.saved.bytes, record_wall_s(), written.saved.crc32};
  (*writer_)->add_checkpoint(row);
  (*writer_)->flush();
  log_->debug("run {}: checkpoint of step {} written ({} MiB in {:.2f} s)", run_id_, written.step,
              written.saved.bytes >> 20, written.write_s);
  if (keep_ <= 0) return;
  kept_.push_back(row);
  while (static_cast<std::int64_t>(kept_.size()) > keep_) {
    // Its row first (committed: resume no longer looks for it), then its file.
    const auto old = kept_.front();
    kept_.erase(kept_.begin());
    (*writer_)->retire_checkpoint(old.step);
    (*writer_)->flush();
    remove_checkpoint_file(old.path, run_id_, *log_);
  }
}

}  // namespace routelab
