-- Up Migration

-- The reconciler's incremental pass (src/reservation/reconciler.ts) reads the orders changed since its last pass,
-- for every sale it looks after at once: every transition sets updated_at.
CREATE INDEX orders_updated ON orders (updated_at);

-- Down Migration

DROP INDEX orders_updated;
