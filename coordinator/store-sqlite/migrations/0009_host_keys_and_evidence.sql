-- Drover coordinator store, schema version 9: the keys a host registers at enrollment and the
-- evidence it signs with one of them.
-- seal_key: the host's X25519 public key (base64); task secrets are sealed to it, so this
-- store never holds them in the clear. evidence_cert: the certificate of its Ed25519 evidence
-- key (PEM), issued by the CA at enrollment; replaced when the host enrolls again.
ALTER TABLE hosts ADD COLUMN seal_key TEXT;
ALTER TABLE hosts ADD COLUMN evidence_cert TEXT;

-- Host-signed statements, stored as the host sent them (the document verifies offline with
-- the CA certificate alone). task_id/job_id are set for task evidence.
CREATE TABLE evidence (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id      TEXT NOT NULL REFERENCES hosts (id),
    task_id      TEXT,
    job_id       TEXT,
    kind         TEXT NOT NULL,
    signed_at    INTEGER NOT NULL,
    received_at  INTEGER NOT NULL,
    document     TEXT NOT NULL
) STRICT;
CREATE INDEX evidence_by_host ON evidence (host_id, seq);
CREATE INDEX evidence_by_job ON evidence (job_id, seq) WHERE job_id IS NOT NULL;
