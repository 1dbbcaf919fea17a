// The stored run resume() continues: its record, stored tokenizer and config, read once and refused where it cannot
// continue; and the check a data-parallel launcher makes with it before starting any rank.
#pragma once
#include <cstdint>
#include <string>

#include "core/config/experiment_config.h"
#include "core/store/run_store.h"

namespace routelab {

/// The run resume() continues, with its stored tokenizer and config.
struct ResumableRun {
  RunRecord record;
  std::string tokenizer;
  ExperimentConfig config;
};

/// Run `run_id` of the store `db` (`threads` >= 0 replacing run.threads); a StoreError where there is no such run or
/// it already finished. `mark_crashed` as RunStore's.
ResumableRun resumable_run(const std::string& db, std::int64_t run_id, bool mark_crashed, int threads);

/// What every rank of resume(`run_id`) over `ranks` processes would refuse, refused once by their launcher before
/// it starts them: no such run, a finished run, a stored config the ranks cannot train (check_data_parallel). `db` is
/// the store's path, resolved.
void check_resume_over_ranks(const std::string& db, std::int64_t run_id, int ranks);

}  // namespace routelab
