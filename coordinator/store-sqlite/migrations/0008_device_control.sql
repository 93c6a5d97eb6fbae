-- Drover coordinator store, schema version 8: what the device controllers need.
-- A power shelf's data as its controller last fetched it from the PMC (identity, firmware,
-- outlets); a host's BMC (endpoint and credentials by secret-store path, never values), which
-- a rack's power sequence drives; and the firmware records a rack's firmware upgrade resolves
-- (rack-on-demand-maintenance.md: a default per hardware type, or one named by id).
ALTER TABLE rack_devices ADD COLUMN facts TEXT;

CREATE TABLE host_bmcs (
    host_id           TEXT PRIMARY KEY REFERENCES hosts (id),
    endpoint          TEXT NOT NULL,
    credentials_path  TEXT NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;

CREATE TABLE rack_firmware (
    firmware_id    TEXT PRIMARY KEY,
    hardware_type  TEXT NOT NULL,
    image_uri      TEXT NOT NULL,
    available      INTEGER NOT NULL,
    is_default     INTEGER NOT NULL,
    created_at     INTEGER NOT NULL
) STRICT;
-- At most one default per hardware type.
CREATE UNIQUE INDEX rack_firmware_default ON rack_firmware (hardware_type) WHERE is_default = 1;
