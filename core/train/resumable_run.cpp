// The stored run resume() continues, read and checked once (core/train/resumable_run.h).
#include "core/train/resumable_run.h"

#include "core/run/run_config.h"
#include "core/train/data_parallel.h"
#include "core/util/errors.h"

namespace routelab {

ResumableRun resumable_run(const std::string& db, std::int64_t run_id, bool mark_crashed, int threads) {
  RunStore store(db, mark_crashed);
  auto record = store.run(run_id);
  if (!record) throw StoreError(db + ": no run with id " + std::to_string(run_id));
  if (record->status == RunStatus::Finished)
    throw StoreError("run " + std::to_string(run_id) + " already finished all " +
                     std::to_string(record->total_steps) + " steps");
  auto doc = stored_config(*record, db);
  if (threads >= 0 && doc.contains("run") && doc["run"].is_object()) doc["run"]["threads"] = threads;
  auto config = config_from_resolved(doc, record->preset);
  return {*record, store.run_tokenizer(run_id), std::move(config)};
}

void check_resume_over_ranks(const std::string& db, std::int64_t run_id, int ranks) {
  check_data_parallel(resumable_run(db, run_id, /*mark_crashed=*/false, -1).config, ranks);
}

}  // namespace routelab
