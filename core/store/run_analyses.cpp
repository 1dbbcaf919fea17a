// RunStore's analyses (schema v6): results computed from a run's checkpoint, stored by kind and key.
#include "core/store/run_store.h"
#include "core/store/sqlite_detail.h"

namespace routelab {
using namespace store_detail;

std::optional<std::string> RunStore::analysis(std::int64_t run_id, const std::string& kind,
                                              const std::string& key) const {
  Statement s(db_, path_, "SELECT document FROM analyses WHERE run_id = ?1 AND kind = ?2 AND key = ?3");
  s.bind(1, run_id).bind(2, kind).bind(3, key);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

bool RunStore::put_analysis(std::int64_t run_id, const std::string& kind, const std::string& key, std::int64_t step,
                            const std::string& document) {
  if (read_only_) return false;
  Statement s(db_, path_,
              "INSERT OR REPLACE INTO analyses (run_id, kind, key, step, document, created_at) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  s.bind(1, run_id).bind(2, kind).bind(3, key).bind(4, step).bind(5, document).bind(6, now_seconds()).run();
  return true;
}

std::vector<AnalysisRow> RunStore::analyses(std::int64_t run_id, const std::string& kind) const {
  Statement s(db_, path_, "SELECT key, step, document FROM analyses WHERE run_id = ?1 AND kind = ?2 ORDER BY key");
  s.bind(1, run_id).bind(2, kind);
  std::vector<AnalysisRow> rows;
  while (s.step()) rows.push_back({s.text(0), s.int64(1), s.text(2)});
  return rows;
}

}  // namespace routelab
