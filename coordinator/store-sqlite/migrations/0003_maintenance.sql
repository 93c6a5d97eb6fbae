-- Drover coordinator store, schema version 3: maintenance requests and the jobs they start.
--
-- A maintenance request is what an operator asked for once (initiator, reason, which hosts,
-- which activities); it fans out into one job per host, created all-or-nothing with it. The
-- request row is the audit anchor that ties those jobs together, so it is never updated.
CREATE TABLE maintenance_requests (
    request_id TEXT PRIMARY KEY,
    initiator  TEXT NOT NULL,
    reason     TEXT NOT NULL,
    -- JSON: the hosts (or selector) the request named, as the operator gave it.
    scope      TEXT NOT NULL,
    -- JSON: the activities (scrub, cleanup, reseed, …) each job runs.
    activities TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- NULL for jobs that belong to no request (decommission, a single storage cleanup).
ALTER TABLE jobs ADD COLUMN request_id TEXT REFERENCES maintenance_requests (request_id);
CREATE INDEX jobs_by_request ON jobs (request_id);
