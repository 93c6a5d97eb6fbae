-- Drover coordinator store, schema version 10: each host's latest health report and probe
-- results as its agent last sent them, so `GET /v1/hosts/{id}` and
-- `drover describe host` show them. One row per host, replaced in the check-in flush's batch:
-- a routine check-in still writes nothing on its own.
CREATE TABLE host_health (
    host_id      TEXT PRIMARY KEY REFERENCES hosts (id),
    reported_at  INTEGER NOT NULL,
    report       TEXT NOT NULL
) STRICT;
