-- Drover coordinator store, schema version 1.
--
-- Conventions: times are INTEGER unix seconds; ids are TEXT UUIDs (lowercase, hyphenated);
-- states are the stable strings of drover_proto::states (checked in code, not here, so a new
-- state never needs a table rebuild); signed payloads are BLOBs kept byte-exact. Tables are
-- STRICT so a wrongly typed bind fails loudly instead of being coerced.

CREATE TABLE hosts (
    id                 TEXT PRIMARY KEY,
    hostname           TEXT NOT NULL,
    state              TEXT NOT NULL,
    schedulable        INTEGER NOT NULL DEFAULT 1 CHECK (schedulable IN (0, 1)),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    last_checkin_at    INTEGER,
    agent_version      TEXT,
    boot_id            TEXT,
    current_generation TEXT
) STRICT;
-- A hostname names one live host; deleted hosts keep their rows (and ids) forever, so the
-- name is free again once its host is deleted.
CREATE UNIQUE INDEX hosts_live_hostname ON hosts (hostname) WHERE state <> 'deleted';
CREATE INDEX hosts_by_name ON hosts (hostname, id);
CREATE INDEX hosts_by_state ON hosts (state, hostname, id);

CREATE TABLE enrollment_tokens (
    id         TEXT PRIMARY KEY,
    host_id    TEXT NOT NULL REFERENCES hosts (id),
    token_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
) STRICT;
CREATE INDEX enrollment_tokens_by_host ON enrollment_tokens (host_id);

CREATE TABLE certificates (
    serial        TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('host', 'operator', 'server')),
    host_id       TEXT REFERENCES hosts (id),
    subject       TEXT NOT NULL,
    not_before    INTEGER NOT NULL,
    not_after     INTEGER NOT NULL,
    revoked_at    INTEGER,
    revoke_reason TEXT
) STRICT;
CREATE INDEX certificates_by_host ON certificates (host_id);
CREATE INDEX certificates_revoked ON certificates (serial) WHERE revoked_at IS NOT NULL;

CREATE TABLE releases (
    version   INTEGER PRIMARY KEY,
    signed_at INTEGER NOT NULL
) STRICT;

CREATE TABLE release_files (
    version INTEGER NOT NULL REFERENCES releases (version),
    path    TEXT NOT NULL,
    bytes   BLOB NOT NULL,
    PRIMARY KEY (version, path)
) STRICT;

CREATE TABLE manifests (
    rollout_id    TEXT PRIMARY KEY,
    bytes         BLOB NOT NULL,
    sig           BLOB NOT NULL,
    sha256        TEXT NOT NULL,
    first_version INTEGER NOT NULL REFERENCES releases (version)
) STRICT;

CREATE TABLE rollouts (
    rollout_id      TEXT PRIMARY KEY,
    channel         TEXT NOT NULL,
    state           TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    opened_at       INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX rollouts_by_channel ON rollouts (channel, opened_at);

CREATE TABLE host_rollouts (
    rollout_id TEXT NOT NULL REFERENCES rollouts (rollout_id),
    host_id    TEXT NOT NULL REFERENCES hosts (id),
    state      TEXT NOT NULL,
    wave_index INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (rollout_id, host_id)
) STRICT;
CREATE INDEX host_rollouts_by_host ON host_rollouts (host_id);

CREATE TABLE intents (
    intent_id        TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id),
    rollout_id       TEXT NOT NULL,
    envelope         BLOB NOT NULL,
    status           TEXT NOT NULL,
    is_current       INTEGER NOT NULL CHECK (is_current IN (0, 1)),
    confirm_deadline INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT;
-- At most one current intent per host, enforced by the schema rather than by care.
CREATE UNIQUE INDEX intents_current ON intents (host_id) WHERE is_current = 1;

CREATE TABLE jobs (
    job_id     TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    host_id    TEXT REFERENCES hosts (id),
    state      TEXT NOT NULL,
    input      TEXT NOT NULL,
    progress   TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX jobs_by_host ON jobs (host_id, state);

CREATE TABLE tasks (
    task_id          TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id),
    job_id           TEXT REFERENCES jobs (job_id),
    envelope         BLOB NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'completed')),
    created_at       INTEGER NOT NULL,
    lease_expires_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    completed_at     INTEGER,
    -- One lease column per task: a second live lease cannot even be represented.
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL))
) STRICT;
CREATE INDEX tasks_by_host ON tasks (host_id, state, created_at, task_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE state = 'leased';

-- AUTOINCREMENT: ids are paging cursors and must never be reused, even after pruning.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    host_id    TEXT,
    rollout_id TEXT,
    job_id     TEXT,
    message    TEXT NOT NULL,
    data       TEXT NOT NULL
) STRICT;
CREATE INDEX events_by_host ON events (host_id, id) WHERE host_id IS NOT NULL;
CREATE INDEX events_by_rollout ON events (rollout_id, id) WHERE rollout_id IS NOT NULL;
CREATE INDEX events_by_job ON events (job_id, id) WHERE job_id IS NOT NULL;

CREATE TABLE audit (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    at             INTEGER NOT NULL,
    actor          TEXT NOT NULL,
    role           TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    reason         TEXT NOT NULL,
    prior_state    TEXT,
    expected_state TEXT
) STRICT;
CREATE INDEX audit_by_target ON audit (target, id);
