// StoreWriter: the trainer's rows are queued under a mutex and written by one thread, with its own connection,
// in one transaction per flush interval that also proves the lease and beats the heartbeat. A failed transaction
// puts its rows back in front of the queue and is tried again, with a growing pause, until it succeeds or has
// failed for retry_for_s; then the writer stops for good and the error reaches the caller through check(),
// flush() or set_status(). Rows are committed in the order they were added, so no later row is ever stored after
// one that was lost.
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
constexpr auto kFirstRetryPause = std::chrono::milliseconds(100);
constexpr auto kLongestRetryPause = std::chrono::seconds(2);

struct Batch {
  std::vector<MetricRow> metrics;
  std::vector<RoutingRow> routing;
  std::vector<EvalRow> evals;
  std::vector<CheckpointRow> checkpoints;
  std::vector<std::int64_t> retired_checkpoints;  ///< steps whose checkpoint rows go, after the rows above
  std::vector<ProbeRow> probes;

  std::size_t size() const {
    return metrics.size() + routing.size() + evals.size() + checkpoints.size() + retired_checkpoints.size() +
           probes.size();
  }
  bool empty() const { return size() == 0; }

  /// Puts `earlier` (rows that failed to commit) in front of these.
  void prepend(Batch&& earlier) {
    auto front = [](auto& to, auto&& from) {
      from.insert(from.end(), std::make_move_iterator(to.begin()), std::make_move_iterator(to.end()));
      to = std::move(from);
    };
    front(metrics, std::move(earlier.metrics));
    front(routing, std::move(earlier.routing));
    front(evals, std::move(earlier.evals));
    front(checkpoints, std::move(earlier.checkpoints));
    front(retired_checkpoints, std::move(earlier.retired_checkpoints));
    front(probes, std::move(earlier.probes));
  }
};

struct StatusRequest {
  RunStatus status;
  std::string message;
};

}  // namespace

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(s, 0.0)));
}

struct StoreWriter::State {
  State(const std::string& db_path, std::int64_t run_id, std::string lease_token, double flush_interval_s,
        double retry_for_s)
      : store(db_path, /*mark_crashed=*/false),
        run_id(run_id),
        lease_token(std::move(lease_token)),
        interval(seconds(flush_interval_s)),
        retry_for(seconds(retry_for_s)) {}

  template <class Push>
  void add(Push&& push) {
    std::lock_guard lock(mutex);
    if (stopped_for_good) {  // nothing after a lost row is stored: the run ends at its last stored step
      ++enqueued;
      ++handled;
      return;
    }
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
  const std::string lease_token;
  const Clock::duration interval, retry_for;

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
  bool stopped_for_good = false;  // a write failed for retry_for, or the lease was lost: nothing more is written
  bool lease_lost = false;
  bool stop = false;
  std::thread thread;
};

void StoreWriter::State::write(const Batch& batch, bool beat) {
  store.transaction([&] {
    // First, in the same transaction: the lease is still this writer's (LeaseLostError otherwise) and the run alive.
    if (beat) store.heartbeat(run_id, lease_token);
    store.insert_metrics(run_id, batch.metrics);
    store.insert_routing(run_id, batch.routing);
    for (const EvalRow& row : batch.evals) store.insert_eval(run_id, row);
    for (const CheckpointRow& row : batch.checkpoints) store.insert_checkpoint(run_id, row);
    for (const std::int64_t step : batch.retired_checkpoints) store.delete_checkpoint(run_id, step);
    for (const ProbeRow& row : batch.probes) store.insert_probe(run_id, row);
  });
}

void StoreWriter::State::run() {
  auto log = logger("store");
  bool heartbeat_on = true;  // off after a terminal status: a finished run needs no proof of life
  Clock::time_point last_write = Clock::now();
  Clock::time_point next_beat = last_write + kHeartbeatInterval;
  bool failing = false;                // rows wait for a retry
  Clock::time_point failing_since{};  // their first failure
  Clock::time_point retry_at;
  Clock::duration retry_pause = kFirstRetryPause;

  std::unique_lock lock(mutex);
  for (;;) {
    auto rows_due = [&](Clock::time_point now) {
      if (failing && now < retry_at) return false;
      return stop || status_request || flush_wanted > handled || pending.size() > kMaxPendingRows ||
             (!pending.empty() && now >= last_write + interval);
    };
    auto beat_due = [&](Clock::time_point now) {
      return heartbeat_on && !stopped_for_good && now >= next_beat && !(failing && now < retry_at);
    };
    for (auto now = Clock::now(); !rows_due(now) && !beat_due(now); now = Clock::now()) {
      Clock::time_point deadline = Clock::time_point::max();
      if (heartbeat_on && !stopped_for_good) deadline = next_beat;
      if (!pending.empty()) deadline = std::min(deadline, last_write + interval);
      if (failing) deadline = retry_at;  // nothing is written before
      if (deadline == Clock::time_point::max())
        wake.wait(lock);
      else
        wake.wait_until(lock, deadline);
    }
    const bool beat = beat_due(Clock::now());
    Batch batch = std::exchange(pending, Batch{});
    const std::uint64_t batch_end = enqueued;
    std::optional<StatusRequest> status = std::exchange(status_request, std::nullopt);
    const std::uint64_t status_id = statuses_requested;
    const bool stopping = stop;
    const bool write_rows = !stopped_for_good && (!batch.empty() || beat);
    const bool write_status = status && !lease_lost;
    lock.unlock();

    std::string failure;  // this pass's error
    bool committed = true, lost = false;
    if (write_rows) {
      try {
        // Every batch of a live run proves the lease; rows after the terminal status (none expected) go without.
        write(batch, heartbeat_on);
      } catch (const LeaseLostError& e) {
        failure = e.what();
        committed = false;
        lost = true;
      } catch (const std::exception& e) {
        failure = e.what();
        committed = false;
      }
      const auto now = Clock::now();
      last_write = now;
      next_beat = now + kHeartbeatInterval;
    }
    // A status after rows that could not be stored: only once the rows are stored, or the writer gave up on them.
    const bool status_now = write_status && (committed || lost);
    std::string status_failure;
    if (status_now) {
      try {
        store.set_status(run_id, status->status, status->message, lease_token);
        heartbeat_on = status->status == RunStatus::Running;
      } catch (const std::exception& e) {
        status_failure = e.what();
        log->error("run {}: cannot record status {}: {}", run_id, to_string(status->status), e.what());
      }
    }

    lock.lock();
    if (committed) {
      handled = batch_end;
      failing = false;
      retry_pause = kFirstRetryPause;
    } else {
      const auto now = Clock::now();
      if (!failing) failing_since = now;
      failing = true;
      const bool give_up = lost || now - failing_since >= retry_for;
      if (give_up) {
        const std::size_t dropped = batch.size() + pending.size();
        stopped_for_good = true;
        lease_lost = lease_lost || lost;
        pending = Batch{};
        handled = enqueued;
        failing = false;
        const std::string what =
            lost ? failure
                 : "cannot write to the run store (" + failure + "); " + std::to_string(dropped) +
                       " rows were not stored and nothing after them will be: the run ends at its last stored step";
        log->error("run {}: {}", run_id, what);
        if (error.empty()) error = what;
      } else {
        if (retry_pause == kFirstRetryPause)
          log->warn("run {}: store write failed, retrying for up to {:g} s: {}", run_id,
                    std::chrono::duration<double>(retry_for).count(), failure);
        pending.prepend(std::move(batch));
        retry_at = now + retry_pause;
        retry_pause = std::min<Clock::duration>(retry_pause * 2, kLongestRetryPause);
      }
    }
    if (status) {
      if (status_now || !write_status)
        statuses_written = status_id;
      else
        status_request = status;  // waits for its rows
      if (!status_failure.empty() && error.empty()) error = status_failure;
    }
    done.notify_all();
    if (stopping && pending.empty() && !status_request) break;
  }
}

StoreWriter::StoreWriter(const std::string& db_path, std::int64_t run_id, std::string lease_token,
                         double flush_interval_s, double retry_for_s)
    : state_(std::make_unique<State>(db_path, run_id, std::move(lease_token), flush_interval_s, retry_for_s)) {
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

void StoreWriter::retire_checkpoint(std::int64_t step) {
  state_->add([&](Batch& b) { b.retired_checkpoints.push_back(step); });
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

void StoreWriter::check() {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (s.stopped_for_good && !s.error.empty()) throw StoreError(std::exchange(s.error, std::string()));
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
