-- Drover coordinator store, schema version 7: racks and their devices
-- (rack-on-demand-maintenance.md, power-shelf-state-machine.md). A rack groups machines (hosts
-- placed in it), switches and power shelves. Device credentials are secret-store paths, never
-- values. A power shelf carries its lifecycle state, the operation a maintenance shelf performs,
-- the pending maintenance request (JSON) and the deletion mark its controller acts on.
CREATE TABLE racks (
    rack_id        TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    hardware_type  TEXT NOT NULL,
    labels         TEXT NOT NULL DEFAULT '{}',
    state          TEXT NOT NULL,
    maintenance    TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

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
    marked_for_deletion    INTEGER NOT NULL DEFAULT 0,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    UNIQUE (kind, name)
) STRICT;
CREATE INDEX rack_devices_by_rack ON rack_devices (rack_id, kind);

-- A host's rack is data, not a label.
ALTER TABLE hosts ADD COLUMN rack_id TEXT REFERENCES racks (rack_id);
