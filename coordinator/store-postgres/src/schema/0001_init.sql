-- Drover coordinator store on PostgreSQL, schema version 1: the SQLite schema as of its
-- version 11 (coordinator/src/store/migrations), translated. Column for column the same, so
-- both backends hold the same facts and the conformance suite reads them alike:
-- times are Unix seconds in BIGINT, ids and states TEXT, JSON documents TEXT, byte strings
-- BYTEA, flags 0/1 in BIGINT with the same CHECKs; AUTOINCREMENT ids are identity columns.
-- Later changes get their own numbered file here, beside SQLite's.

CREATE TABLE hosts (
    id                 TEXT PRIMARY KEY,
    hostname           TEXT NOT NULL,
    state              TEXT NOT NULL,
    schedulable        BIGINT NOT NULL DEFAULT 1 CHECK (schedulable IN (0, 1)),
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    last_checkin_at    BIGINT,
    agent_version      TEXT,
    boot_id            TEXT,
    current_generation TEXT,
    -- References racks (rack_id): the constraint is added once that table exists, below.
    rack_id            TEXT,
    seal_key           TEXT,
    evidence_cert      TEXT
);
CREATE UNIQUE INDEX hosts_live_hostname ON hosts (hostname) WHERE state <> 'deleted';
CREATE INDEX hosts_by_name ON hosts (hostname, id);
CREATE INDEX hosts_by_state ON hosts (state, hostname, id);
CREATE TABLE enrollment_tokens (
    id         TEXT PRIMARY KEY,
    host_id    TEXT NOT NULL REFERENCES hosts (id),
    token_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at    BIGINT,
    revoked_at BIGINT
);
CREATE INDEX enrollment_tokens_by_host ON enrollment_tokens (host_id);
CREATE TABLE certificates (
    serial        TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('host', 'operator', 'server')),
    host_id       TEXT REFERENCES hosts (id),
    subject       TEXT NOT NULL,
    not_before    BIGINT NOT NULL,
    not_after     BIGINT NOT NULL,
    revoked_at    BIGINT,
    revoke_reason TEXT
);
CREATE INDEX certificates_by_host ON certificates (host_id);
CREATE INDEX certificates_revoked ON certificates (serial) WHERE revoked_at IS NOT NULL;
CREATE TABLE releases (
    version   BIGINT PRIMARY KEY,
    signed_at BIGINT NOT NULL
);
CREATE TABLE release_files (
    version BIGINT NOT NULL REFERENCES releases (version),
    path    TEXT NOT NULL,
    bytes   BYTEA NOT NULL,
    PRIMARY KEY (version, path)
);
CREATE TABLE manifests (
    rollout_id    TEXT PRIMARY KEY,
    bytes         BYTEA NOT NULL,
    sig           BYTEA NOT NULL,
    sha256        TEXT NOT NULL,
    first_version BIGINT NOT NULL REFERENCES releases (version)
);
CREATE TABLE rollouts (
    rollout_id      TEXT PRIMARY KEY,
    channel         TEXT NOT NULL,
    state           TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    opened_at       BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX rollouts_by_channel ON rollouts (channel, opened_at);
CREATE TABLE intents (
    intent_id        TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id),
    rollout_id       TEXT NOT NULL,
    envelope         BYTEA NOT NULL,
    status           TEXT NOT NULL,
    is_current       BIGINT NOT NULL CHECK (is_current IN (0, 1)),
    confirm_deadline BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX intents_current ON intents (host_id) WHERE is_current = 1;
CREATE TABLE jobs (
    job_id     TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    host_id    TEXT REFERENCES hosts (id),
    state      TEXT NOT NULL,
    input      TEXT NOT NULL,
    progress   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    -- References maintenance_requests (request_id): added below, once that table exists.
    request_id TEXT
);
CREATE INDEX jobs_by_host ON jobs (host_id, state);
CREATE TABLE tasks (
    task_id          TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id),
    job_id           TEXT REFERENCES jobs (job_id),
    envelope         BYTEA NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'completed')),
    created_at       BIGINT NOT NULL,
    lease_expires_at BIGINT,
    attempts         BIGINT NOT NULL DEFAULT 0,
    result           TEXT,
    completed_at     BIGINT,
    -- One lease column per task: a second live lease cannot even be represented.
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL))
);
CREATE INDEX tasks_by_host ON tasks (host_id, state, created_at, task_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE state = 'leased';
CREATE TABLE events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    host_id    TEXT,
    rollout_id TEXT,
    job_id     TEXT,
    message    TEXT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_host ON events (host_id, id) WHERE host_id IS NOT NULL;
CREATE INDEX events_by_rollout ON events (rollout_id, id) WHERE rollout_id IS NOT NULL;
CREATE INDEX events_by_job ON events (job_id, id) WHERE job_id IS NOT NULL;
CREATE TABLE audit (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             BIGINT NOT NULL,
    actor          TEXT NOT NULL,
    role           TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    reason         TEXT NOT NULL,
    prior_state    TEXT,
    expected_state TEXT
);
CREATE INDEX audit_by_target ON audit (target, id);
CREATE TABLE host_rollouts (
    rollout_id    TEXT NOT NULL REFERENCES rollouts (rollout_id),
    hostname      TEXT NOT NULL,
    state         TEXT NOT NULL,
    wave_index    BIGINT NOT NULL,
    since         BIGINT NOT NULL,
    -- The closure of the last intent issued to the host for this rollout (dispatch or revert).
    intent_target TEXT,
    PRIMARY KEY (rollout_id, hostname)
);
CREATE INDEX host_rollouts_by_host ON host_rollouts (hostname);
CREATE TABLE channels (
    channel         TEXT PRIMARY KEY,
    last_rolled_ref TEXT,
    deferral        TEXT,
    stale_alert     BIGINT,
    updated_at      BIGINT NOT NULL
);
CREATE TABLE host_reports (
    host_id      TEXT PRIMARY KEY REFERENCES hosts (id),
    failed_units BIGINT NOT NULL,
    probes       TEXT NOT NULL,
    activation   TEXT,
    updated_at   BIGINT NOT NULL
);
CREATE TABLE maintenance_requests (
    request_id TEXT PRIMARY KEY,
    initiator  TEXT NOT NULL,
    reason     TEXT NOT NULL,
    -- JSON: the hosts (or selector) the request named, as the operator gave it.
    scope      TEXT NOT NULL,
    -- JSON: the activities (scrub, cleanup, reseed, …) each job runs.
    activities TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX jobs_by_request ON jobs (request_id);
ALTER TABLE jobs ADD FOREIGN KEY (request_id) REFERENCES maintenance_requests (request_id);
CREATE TABLE maas_sites (
    site_id            TEXT PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE,
    status             TEXT NOT NULL,
    config             TEXT NOT NULL,
    -- Not a foreign key: the site and its default profile are created in one transaction,
    -- each pointing at the other.
    default_profile_id TEXT NOT NULL,
    secrets            TEXT NOT NULL,
    revision           BIGINT NOT NULL,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);
CREATE TABLE maas_site_profiles (
    profile_id  TEXT PRIMARY KEY,
    site_id     TEXT NOT NULL REFERENCES maas_sites (site_id),
    name        TEXT NOT NULL,
    description TEXT,
    status      TEXT NOT NULL,
    policy      TEXT NOT NULL,
    revision    BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (site_id, name)
);
CREATE TABLE maas_power_overrides (
    override_id    TEXT PRIMARY KEY,
    site_id        TEXT NOT NULL REFERENCES maas_sites (site_id),
    selector_type  TEXT NOT NULL,
    selector_value TEXT NOT NULL,
    secret_path    TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    UNIQUE (site_id, selector_type, selector_value)
);
CREATE TABLE maas_roce_assignments (
    assignment_id TEXT PRIMARY KEY,
    site_id       TEXT NOT NULL REFERENCES maas_sites (site_id),
    hostname      TEXT NOT NULL,
    interface     TEXT NOT NULL,
    ipv4_cidr     TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (site_id, hostname, interface)
);
CREATE TABLE maas_bindings (
    host_id            TEXT PRIMARY KEY REFERENCES hosts (id),
    site_id            TEXT NOT NULL REFERENCES maas_sites (site_id),
    system_id          TEXT NOT NULL,
    ipmi_ip            TEXT,
    pxe_mac            TEXT,
    -- What MAAS last reported: its status name, power state and addresses (JSON array).
    last_status        TEXT,
    last_power_state   TEXT,
    last_ips           TEXT NOT NULL DEFAULT '[]',
    last_observed_at   BIGINT,
    -- JSON drift details while a drift is open; NULL when none.
    drift              TEXT,
    drift_detected_at  BIGINT,
    drift_resolved_at  BIGINT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    acknowledged_drift TEXT,
    UNIQUE (site_id, system_id)
);
CREATE TABLE racks (
    rack_id        TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    hardware_type  TEXT NOT NULL,
    labels         TEXT NOT NULL DEFAULT '{}',
    state          TEXT NOT NULL,
    maintenance    TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE TABLE rack_devices (
    device_id              TEXT PRIMARY KEY,
    kind                   TEXT NOT NULL CHECK (kind IN ('switch', 'power_shelf')),
    rack_id                TEXT NOT NULL REFERENCES racks (rack_id),
    name                   TEXT NOT NULL,
    endpoint               TEXT NOT NULL,
    credentials_path       TEXT NOT NULL,
    state                  TEXT,
    operation              TEXT,
    maintenance_requested  TEXT,
    marked_for_deletion    BIGINT NOT NULL DEFAULT 0,
    created_at             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL,
    facts                  TEXT,
    UNIQUE (kind, name)
);
ALTER TABLE hosts ADD FOREIGN KEY (rack_id) REFERENCES racks (rack_id);
CREATE INDEX rack_devices_by_rack ON rack_devices (rack_id, kind);
CREATE TABLE host_bmcs (
    host_id           TEXT PRIMARY KEY REFERENCES hosts (id),
    endpoint          TEXT NOT NULL,
    credentials_path  TEXT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE TABLE rack_firmware (
    firmware_id    TEXT PRIMARY KEY,
    hardware_type  TEXT NOT NULL,
    image_uri      TEXT NOT NULL,
    available      BIGINT NOT NULL,
    is_default     BIGINT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX rack_firmware_default ON rack_firmware (hardware_type) WHERE is_default = 1;
CREATE TABLE evidence (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host_id      TEXT NOT NULL REFERENCES hosts (id),
    task_id      TEXT,
    job_id       TEXT,
    kind         TEXT NOT NULL,
    signed_at    BIGINT NOT NULL,
    received_at  BIGINT NOT NULL,
    document     TEXT NOT NULL
);
CREATE INDEX evidence_by_host ON evidence (host_id, seq);
CREATE INDEX evidence_by_job ON evidence (job_id, seq) WHERE job_id IS NOT NULL;
CREATE TABLE host_health (
    host_id      TEXT PRIMARY KEY REFERENCES hosts (id),
    reported_at  BIGINT NOT NULL,
    report       TEXT NOT NULL
);
