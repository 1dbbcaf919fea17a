// The run store's schema: one migration step per version, applied in order by RunStore::migrate (run_store.cpp, the
// one file that includes this). A released step is never edited; a new version appends one.
#pragma once
#include <iterator>

#include "core/store/run_store.h"

namespace routelab::store_detail {

/// One schema step: the SQL that takes a v(to_version - 1) store to v(to_version). Append a step for a new
/// version; never edit a released one.
struct Migration {
  int to_version;
  const char* sql;
};

inline constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE runs (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids are never reused: checkpoint dirs are named after them
  name              TEXT    NOT NULL,
  arch              TEXT    NOT NULL,
  preset            TEXT    NOT NULL DEFAULT '',
  config_json       TEXT    NOT NULL DEFAULT '{}',
  config_hash       TEXT    NOT NULL DEFAULT '',
  seed              INTEGER NOT NULL DEFAULT 0,
  device            TEXT    NOT NULL DEFAULT 'cpu',
  routelab_version  TEXT    NOT NULL DEFAULT '',
  torch_version     TEXT    NOT NULL DEFAULT '',
  qt_version        TEXT    NOT NULL DEFAULT '',
  status            TEXT    NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'finished', 'failed', 'stopped', 'crashed')),
  message           TEXT    NOT NULL DEFAULT '',
  created_at        REAL    NOT NULL,                   -- unix seconds
  ended_at          REAL,
  heartbeat_at      REAL,
  parent_run_id     INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  resumed_from_step INTEGER,
  total_steps       INTEGER NOT NULL DEFAULT 0,
  rank              INTEGER NOT NULL DEFAULT 0,
  world_size        INTEGER NOT NULL DEFAULT 1,
  tags              TEXT    NOT NULL DEFAULT '',
  notes             TEXT    NOT NULL DEFAULT '',
  archived          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_status ON runs(status);

-- REAL value columns hold the text 'nan' for NaN.
CREATE TABLE metrics (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key       TEXT    NOT NULL,
  step      INTEGER NOT NULL,
  wall_time REAL    NOT NULL,
  value     REAL    NOT NULL
);
CREATE INDEX metrics_run_key_step ON metrics(run_id, key, step);

CREATE TABLE routing (
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step            INTEGER NOT NULL,
  layer           INTEGER NOT NULL,
  routed_fraction REAL    NOT NULL,
  gate_mean       REAL    NOT NULL,
  aux_loss        REAL    NOT NULL,
  tokens_attn     INTEGER NOT NULL,
  tokens_mlp      INTEGER NOT NULL
);
CREATE INDEX routing_run_step ON routing(run_id, step, layer);

CREATE TABLE evals (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  split      TEXT    NOT NULL,
  loss       REAL    NOT NULL,
  ppl        REAL    NOT NULL,
  bpc        REAL    NOT NULL,
  extra_json TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX evals_run_step ON evals(run_id, step);

CREATE TABLE checkpoints (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  path       TEXT    NOT NULL,
  bytes      INTEGER NOT NULL,
  created_at REAL    NOT NULL
);
CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);

CREATE TABLE probes (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step   INTEGER NOT NULL,
  json   TEXT    NOT NULL
);
CREATE INDEX probes_run_step ON probes(run_id, step);
)sql";

// v2: the persisted run queue of the GUI. Runs are untouched; a v1 store keeps every row.
inline constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE queue (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  position     INTEGER NOT NULL,
  request_json TEXT    NOT NULL DEFAULT '{}',
  state        TEXT    NOT NULL DEFAULT 'pending'
               CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
  run_id       INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  created_at   REAL    NOT NULL,
  message      TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX queue_position ON queue(position, id);
)sql";

// v3: one writer per run (the lease: who writes it, taken atomically, given back with the terminal status) and a
// content hash per checkpoint. Rows of v2 stay; their runs have no lease and their checkpoints no hash.
inline constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE runs ADD COLUMN lease_token TEXT;                      -- NULL: no process writes the run
ALTER TABLE runs ADD COLUMN lease_pid   INTEGER;
ALTER TABLE runs ADD COLUMN lease_host  TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_boot  TEXT NOT NULL DEFAULT '';  -- the holder's boot id
ALTER TABLE runs ADD COLUMN lease_start TEXT NOT NULL DEFAULT '';  -- the holder's start time (ticks after boot)
ALTER TABLE runs ADD COLUMN lease_at    REAL;
ALTER TABLE checkpoints ADD COLUMN crc32 INTEGER;                  -- of the file's bytes as written
)sql";

// v4: the tokenizer each run trained with, stored once per content (a SentencePiece model is hundreds of KB) and
// named by its hash from the run, so a run decodes as it trained wherever its tokenizer file went. Runs of v3 name
// none and rebuild theirs from the config.
inline constexpr const char* kSchemaV4 = R"sql(
CREATE TABLE tokenizers (
  hash        TEXT PRIMARY KEY,  -- content_hash of the document
  kind        TEXT NOT NULL,
  document    TEXT NOT NULL,     -- Tokenizer::to_json
  created_at  REAL NOT NULL
);
ALTER TABLE runs ADD COLUMN tokenizer_hash TEXT NOT NULL DEFAULT '';  -- '' for none
)sql";

// v5: the c10d backend a data-parallel run's ranks talked over ('' for a run of one process).
inline constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE runs ADD COLUMN backend TEXT NOT NULL DEFAULT '';
)sql";

// v6: what analyses of a run computed from a checkpoint (a routing breakdown), kept so that asking again reads them.
// `key` is a content hash of everything the result depends on (the checkpoint, the overrides, the options).
inline constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE analyses (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind       TEXT    NOT NULL,  -- 'routing-breakdown'
  key        TEXT    NOT NULL,
  step       INTEGER NOT NULL,  -- the checkpoint's
  document   TEXT    NOT NULL,  -- the result's JSON
  created_at REAL    NOT NULL,
  PRIMARY KEY (run_id, kind, key)
);
)sql";

inline constexpr Migration kMigrations[] = {
    {1, kSchemaV1},
    {2, kSchemaV2},
    {3, kSchemaV3},
    {4, kSchemaV4},
    {5, kSchemaV5},
    {6, kSchemaV6},
};
static_assert(std::size(kMigrations) == RunStore::kSchemaVersion, "one migration step per schema version");

}  // namespace routelab::store_detail
