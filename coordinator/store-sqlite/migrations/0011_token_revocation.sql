-- Drover coordinator store, schema version 11: an operator can end one enrollment token
-- (`POST /v1/tokens/{id}/revoke`, `drover tokens revoke`). The token stays
-- listed with when it was revoked, and enrollment refuses it from then on. A host's own
-- revocation still ends its unused tokens by cutting their expiry, as before.
ALTER TABLE enrollment_tokens ADD COLUMN revoked_at INTEGER;
