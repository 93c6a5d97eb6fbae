-- PostgreSQL only, schema version 2: the leader lease of coordinator replicas
-- (drover-store-postgres, lease.rs). One row per lease; the fencing token rises with every change of
-- holder; the expiry is on the database's clock (milliseconds since the epoch), so replicas
-- with skewed clocks still agree on who leads.
CREATE TABLE leader_lease (
    name          TEXT PRIMARY KEY,
    holder        TEXT NOT NULL,
    token         BIGINT NOT NULL CHECK (token > 0),
    expires_at_ms BIGINT NOT NULL
);
