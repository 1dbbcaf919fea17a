// StoreWriter: the trainer's rows are queued under a mutex and written by one thread, with its own connection,
// in one transaction per flush interval; the same thread keeps the run's heartbeat fresh. Errors on the thread
// are kept and rethrown to the caller by the next flush() or set_status().
#include "core/store/run_store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxPendingRows = 2000;  // above this the thread writes at once, whatever the interval
constexpr auto kHeartbeatInterval = std::chrono::seconds(2);

struct Batch {
  std::vector<MetricRow> metrics;
  std::vector<RoutingRow> routing;
  std::vector<EvalRow> evals;
  std::vector<CheckpointRow> checkpoints;
  std::vector<ProbeRow> probes;

  std::size_t size() const {
    return metrics.size() + routing.size() + evals.size() + checkpoints.size() + probes.size();
  }
  bool empty() const { return size() == 0; }
};

struct StatusRequest {
  RunStatus status;
  std::string message;
};

}  // namespace

struct StoreWriter::State {
  State(const std::string& db_path, std::int64_t run_id, double flush_interval_s)
      : store(db_path, /*mark_crashed=*/false),
        run_id(run_id),
        interval(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::max(flush_interval_s, 0.0)))) {}

  template <class Push>
  void add(Push&& push) {
    std::lock_guard lock(mutex);
    push(pending);
    ++enqueued;
    // The first row starts the interval clock of an idle thread; one over the limit asks for a write now.
    const std::size_t n = pending.size();
    if (n == 1 || n == kMaxPendingRows + 1) wake.notify_one();
  }

  /// Waits (holding `lock`) until `ready`, then rethrows a kept write error once.
  template <class Ready>
  void wait_and_report(std::unique_lock<std::mutex>& lock, Ready&& ready) {
    wake.notify_one();
    done.wait(lock, ready);
    if (!error.empty()) throw StoreError(std::exchange(error, std::string()));
  }

  void run();
  void write(const Batch& batch, bool beat);

  RunStore store;  // used on the writer thread only (the constructor and destructor aside)
  const std::int64_t run_id;
  const Clock::duration interval;

  std::mutex mutex;
  std::condition_variable wake;  // to the thread: too many rows, a flush, a status or stop
  std::condition_variable done;  // from the thread: a batch or a status was handled
  Batch pending;
  std::uint64_t enqueued = 0;      // rows added so far
  std::uint64_t handled = 0;       // rows committed (or dropped by a failed write) so far
  std::uint64_t flush_wanted = 0;  // the highest `enqueued` a flush() waits for
  std::optional<StatusRequest> status_request;
  std::uint64_t statuses_requested = 0, statuses_written = 0;
  std::string error;  // the first write error not yet reported to the caller
  bool stop = false;
  std::thread thread;
};

void StoreWriter::State::write(const Batch& batch, bool beat) {
  store.transaction([&] {
    store.insert_metrics(run_id, batch.metrics);
    store.insert_routing(run_id, batch.routing);
    for (const EvalRow& row : batch.evals) store.insert_eval(run_id, row);
    for (const CheckpointRow& row : batch.checkpoints) store.insert_checkpoint(run_id, row);
    for (const ProbeRow& row : batch.probes) store.insert_probe(run_id, row);
    if (beat) store.heartbeat(run_id);
  });
}

void StoreWriter::State::run() {
  auto log = logger("store");
  bool heartbeat_on = true;  // off after a terminal status: a finished run needs no proof of life
  Clock::time_point last_write = Clock::now();
  Clock::time_point next_beat = last_write + kHeartbeatInterval;
  std::string last_logged;

  std::unique_lock lock(mutex);
  for (;;) {
    auto rows_due = [&](Clock::time_point now) {
      return stop || status_request || flush_wanted > handled || pending.size() > kMaxPendingRows ||
             (!pending.empty() && now >= last_write + interval);
    };
    auto beat_due = [&](Clock::time_point now) { return heartbeat_on && now >= next_beat; };
    for (auto now = Clock::now(); !rows_due(now) && !beat_due(now); now = Clock::now()) {
      if (!heartbeat_on && pending.empty()) {
        wake.wait(lock);
        continue;
      }
      Clock::time_point deadline = heartbeat_on ? next_beat : Clock::time_point::max();
      if (!pending.empty()) deadline = std::min(deadline, last_write + interval);
      wake.wait_until(lock, deadline);
    }
    const auto now = Clock::now();
    const bool take = rows_due(now);  // a heartbeat alone leaves the rows for their own interval
    const bool beat = beat_due(now);
    Batch batch;
    std::uint64_t batch_end = handled;
    std::optional<StatusRequest> status;
    const std::uint64_t status_id = statuses_requested;
    if (take) {
      batch = std::exchange(pending, Batch{});
      batch_end = enqueued;
      status = std::exchange(status_request, std::nullopt);
    }
    const bool stopping = stop;
    lock.unlock();

    std::string failure;
    auto keep = [&](const std::string& what, std::size_t dropped) {
      if (failure.empty()) failure = what;
      if (what != last_logged) {
        log->error("run {}: store write failed{}: {}", run_id,
                   dropped ? " (" + std::to_string(dropped) + " rows dropped)" : std::string(), what);
        last_logged = what;
      }
    };
    if (!batch.empty() || beat) {
      try {
        write(batch, beat);
      } catch (const std::exception& e) {
        keep(e.what(), batch.size());
      }
      if (!batch.empty()) last_write = Clock::now();
      if (beat) next_beat = Clock::now() + kHeartbeatInterval;
    }
    if (status) {
      try {
        store.set_status(run_id, status->status, status->message);
        heartbeat_on = status->status == RunStatus::Running;
        next_beat = Clock::now() + kHeartbeatInterval;
      } catch (const std::exception& e) {
        keep(e.what(), 0);
      }
    }

    lock.lock();
    handled = batch_end;
    if (status) statuses_written = status_id;
    if (!failure.empty() && error.empty()) error = failure;
    done.notify_all();
    if (stopping && pending.empty() && !status_request) break;
  }
}

StoreWriter::StoreWriter(const std::string& db_path, std::int64_t run_id, double flush_interval_s)
    : state_(std::make_unique<State>(db_path, run_id, flush_interval_s)) {
  if (!state_->store.run(run_id)) throw StoreError(db_path + ": no run " + std::to_string(run_id));
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

StoreWriter::~StoreWriter() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_one();
  if (state_->thread.joinable()) state_->thread.join();  // the thread writes what is pending before it ends
  if (!state_->error.empty())
    logger("store")->error("run {}: a store write error was never reported: {}", state_->run_id, state_->error);
}

void StoreWriter::add_metric(const MetricRow& row) {
  state_->add([&](Batch& b) { b.metrics.push_back(row); });
}

void StoreWriter::add_routing(const RoutingRow& row) {
  state_->add([&](Batch& b) { b.routing.push_back(row); });
}

void StoreWriter::add_eval(const EvalRow& row) {
  state_->add([&](Batch& b) { b.evals.push_back(row); });
}

void StoreWriter::add_checkpoint(const CheckpointRow& row) {
  state_->add([&](Batch& b) { b.checkpoints.push_back(row); });
}

void StoreWriter::add_probe(const ProbeRow& row) {
  state_->add([&](Batch& b) { b.probes.push_back(row); });
}

void StoreWriter::flush() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  const std::uint64_t target = s.enqueued;
  s.flush_wanted = std::max(s.flush_wanted, target);
  s.wait_and_report(lock, [&] { return s.handled >= target; });
}

void StoreWriter::set_status(RunStatus status, const std::string& message) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  // The thread writes the rows pending so far first, then the status, in the same pass.
  s.status_request = StatusRequest{status, message};
  const std::uint64_t id = ++s.statuses_requested;
  s.wait_and_report(lock, [&] { return s.statuses_written >= id; });
}

}  // namespace routelab
