-- Drover coordinator store, schema version 4: MAAS sites (bare-metal-lifecycle.md §3).
--
-- No table here holds a secret value: a site keeps the *paths* of its secrets in the secret
-- store (JSON column `secrets`), an override the path of its credentials. The site's
-- connectivity and a profile's policy are JSON documents read and written whole; `revision`
-- is the compare-and-set token of every update.
CREATE TABLE maas_sites (
    site_id            TEXT PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE,
    status             TEXT NOT NULL,
    config             TEXT NOT NULL,
    -- Not a foreign key: the site and its default profile are created in one transaction,
    -- each pointing at the other.
    default_profile_id TEXT NOT NULL,
    secrets            TEXT NOT NULL,
    revision           INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
) STRICT;

CREATE TABLE maas_site_profiles (
    profile_id  TEXT PRIMARY KEY,
    site_id     TEXT NOT NULL REFERENCES maas_sites (site_id),
    name        TEXT NOT NULL,
    description TEXT,
    status      TEXT NOT NULL,
    policy      TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (site_id, name)
) STRICT;

CREATE TABLE maas_power_overrides (
    override_id    TEXT PRIMARY KEY,
    site_id        TEXT NOT NULL REFERENCES maas_sites (site_id),
    selector_type  TEXT NOT NULL,
    selector_value TEXT NOT NULL,
    secret_path    TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    UNIQUE (site_id, selector_type, selector_value)
) STRICT;

CREATE TABLE maas_roce_assignments (
    assignment_id TEXT PRIMARY KEY,
    site_id       TEXT NOT NULL REFERENCES maas_sites (site_id),
    hostname      TEXT NOT NULL,
    interface     TEXT NOT NULL,
    ipv4_cidr     TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    UNIQUE (site_id, hostname, interface)
) STRICT;
