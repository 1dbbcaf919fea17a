// XDG locations: the run store, checkpoints, the cached default corpus and logs live under the user's dirs.
#pragma once
#include <string>

namespace routelab {

/// $XDG_DATA_HOME/routelab (default ~/.local/share/routelab); $ROUTELAB_HOME overrides every dir below.
std::string data_dir();
/// $XDG_STATE_HOME/routelab (default ~/.local/state/routelab): logs.
std::string state_dir();
/// data_dir()/runs.sqlite
std::string default_db_path();
/// <folder of db_path>/checkpoints/<db file stem>/run-<id>, e.g. data_dir()/checkpoints/runs/run-3
std::string checkpoint_dir(const std::string& db_path, long long run_id);
/// The folder holding the preset JSON files: $ROUTELAB_EXPERIMENTS, else the installed or source experiments/.
std::string experiments_dir();

}  // namespace routelab
