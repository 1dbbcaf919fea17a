// RunStore's persisted run queue (schema v2): items in execution order, their states and requests.
#include "core/store/run_store.h"
#include "core/store/sqlite_detail.h"

namespace routelab {
using namespace store_detail;
namespace {

constexpr const char* kQueueColumns = "id, position, request_json, state, run_id, created_at, message";

QueueItem read_queue_item(const Statement& s) {
  QueueItem q;
  q.id = s.int64(0);
  q.position = s.int64(1);
  q.request_json = s.text(2);
  q.state = parse_queue_state(s.text(3));
  q.run_id = s.optional_int64(4);
  q.created_at = s.real(5);
  q.message = s.text(6);
  return q;
}

}  // namespace

std::string to_string(QueueState state) {
  switch (state) {
    case QueueState::Pending: return "pending";
    case QueueState::Running: return "running";
    case QueueState::Done: return "done";
    case QueueState::Failed: return "failed";
    case QueueState::Cancelled: return "cancelled";
  }
  return "unknown";
}

QueueState parse_queue_state(const std::string& text) {
  for (QueueState s : {QueueState::Pending, QueueState::Running, QueueState::Done, QueueState::Failed,
                       QueueState::Cancelled})
    if (to_string(s) == text) return s;
  throw StoreError("unknown queue state '" + text + "'");
}

std::int64_t RunStore::enqueue(const std::string& request_json, QueueState state) {
  Statement s(db_, path_,
              "INSERT INTO queue (position, request_json, state, created_at) "
              "VALUES ((SELECT COALESCE(MAX(position), -1) + 1 FROM queue), ?1, ?2, ?3)");
  s.bind(1, request_json).bind(2, to_string(state)).bind(3, now_seconds()).run();
  return sqlite3_last_insert_rowid(db_);
}

std::vector<QueueItem> RunStore::queue_items() const {
  const std::string sql = std::string("SELECT ") + kQueueColumns + " FROM queue ORDER BY position, id";
  Statement s(db_, path_, sql.c_str());
  std::vector<QueueItem> out;
  while (s.step()) out.push_back(read_queue_item(s));
  return out;
}

std::optional<QueueItem> RunStore::queue_item(std::int64_t id) const {
  const std::string sql = std::string("SELECT ") + kQueueColumns + " FROM queue WHERE id = ?1";
  Statement s(db_, path_, sql.c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_queue_item(s);
}

void RunStore::update_queue_item(std::int64_t id, QueueState state, std::optional<std::int64_t> run_id,
                                 const std::string& message, const std::optional<std::string>& request_json) {
  Statement s(db_, path_,
              "UPDATE queue SET state = ?1, run_id = COALESCE(?2, run_id), message = ?3, "
              "request_json = COALESCE(?4, request_json) WHERE id = ?5");
  s.bind(1, to_string(state)).bind(2, run_id).bind(3, message).bind(4, request_json).bind(5, id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
}

void RunStore::reorder_queue(const std::vector<std::int64_t>& ids) {
  transaction([&] {
    Statement s(db_, path_, "UPDATE queue SET position = ?1 WHERE id = ?2");
    std::int64_t position = 0;
    for (std::int64_t id : ids) {
      s.bind(1, position++).bind(2, id).run();
      if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
    }
  });
}

void RunStore::remove_queue_item(std::int64_t id) {
  Statement s(db_, path_, "DELETE FROM queue WHERE id = ?1");
  s.bind(1, id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
}

int RunStore::clear_finished_queue_items() {
  Statement s(db_, path_, "DELETE FROM queue WHERE state IN ('done', 'failed', 'cancelled')");
  s.run();
  return sqlite3_changes(db_);
}

int RunStore::fail_interrupted_queue_items(const std::string& message) {
  Statement s(db_, path_, "UPDATE queue SET state = 'failed', message = ?1 WHERE state = 'running'");
  s.bind(1, message).run();
  return sqlite3_changes(db_);
}

}  // namespace routelab
