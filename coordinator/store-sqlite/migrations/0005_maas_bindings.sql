-- Drover coordinator store, schema version 5: the binding of a host to its MAAS machine
-- (bare-metal-lifecycle.md §6.5, node_maas_state). The binding is the current truth about
-- which MAAS machine a host is and what MAAS last said about it; onboarding and decommission
-- jobs are the history. One binding per host, and one host per machine of a site.
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
    last_observed_at   INTEGER,
    -- JSON drift details while a drift is open; NULL when none.
    drift              TEXT,
    drift_detected_at  INTEGER,
    drift_resolved_at  INTEGER,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    UNIQUE (site_id, system_id)
) STRICT;
