// What a queued run asks for, as the run queue table stores it (QueueItem::request_json): a preset or a config
// document with overrides, or a stored run to continue. The one reader and writer of that document (Torch-free).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct QueuedRequest {
  std::string preset;                ///< the preset, or where a config document came from
  std::string config_json;           ///< overrides ({model, data, train, run}); replaces the preset when set
  std::vector<std::string> sets;     ///< further "section.key=value" overrides
  std::int64_t steps = 0;            ///< train.steps override; 0 = the config's
  std::string name;                  ///< run name; "" = the trainer's default
  std::string tags;                  ///< comma-separated tags given to the run when it starts
  std::int64_t resume_run = 0;       ///< > 0: continue this stored run (the other fields are ignored)
  int processes = 1;                 ///< > 1: data-parallel ranks on this machine (resumes too)

  /// The stored document: {"resume": id} for a resume, else the fields that are set.
  std::string to_json() const;
};

/// Reads a stored request; a document that is not an object, or a field of the wrong type, is a DataError naming
/// `where` and the key ("queue item 7: sets[1]: expected a string"). Unknown keys are ignored.
QueuedRequest read_queued_request(const std::string& json, const std::string& where);

}  // namespace routelab
