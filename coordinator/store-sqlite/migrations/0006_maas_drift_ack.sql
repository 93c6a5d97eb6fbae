-- Drover coordinator store, schema version 6: drift reconciliation (bare-metal-lifecycle.md
-- §6.5). When an operator resolves a drift whose condition still holds, the resolved details
-- are kept here so the next reconciler pass does not open the same drift again; the column
-- clears once the pair is seen healthy, so a recurrence opens a new drift.
ALTER TABLE maas_bindings ADD COLUMN acknowledged_drift TEXT;
