-- Drover coordinator store, schema version 2: what the rollout executor keeps.
--
-- host_rollouts is keyed by hostname, not host id: a rollout's manifest names hosts by
-- hostname, and a host listed there that never enrolled (or was deleted) still has a state
-- in the rollout (Skipped). The table held no rows in version 1 (nothing wrote it yet).
DROP TABLE host_rollouts;
CREATE TABLE host_rollouts (
    rollout_id    TEXT NOT NULL REFERENCES rollouts (rollout_id),
    hostname      TEXT NOT NULL,
    state         TEXT NOT NULL,
    wave_index    INTEGER NOT NULL,
    since         INTEGER NOT NULL,
    -- The closure of the last intent issued to the host for this rollout (dispatch or revert).
    intent_target TEXT,
    PRIMARY KEY (rollout_id, hostname)
) STRICT;
CREATE INDEX host_rollouts_by_host ON host_rollouts (hostname);

-- Per channel: the last rolled ref, the deferred ref (queue depth one) and the timestamp
-- signing time a staleness alert was last raised for (so it is raised once).
CREATE TABLE channels (
    channel         TEXT PRIMARY KEY,
    last_rolled_ref TEXT,
    deferral        TEXT,
    stale_alert     INTEGER,
    updated_at      INTEGER NOT NULL
) STRICT;

-- What each host last reported that the planner decides on: failed units, latest outcome
-- per probe, and the activation status of its current intent. Written only when it changes.
CREATE TABLE host_reports (
    host_id      TEXT PRIMARY KEY REFERENCES hosts (id),
    failed_units INTEGER NOT NULL,
    probes       TEXT NOT NULL,
    activation   TEXT,
    updated_at   INTEGER NOT NULL
) STRICT;
