-- Up Migration

-- A hot item's stock split over shards, each its own Redis hash tag on its own cluster master
-- (src/reservation/layout.ts). shard_tags[k+1] is shard k's tag; NULL: one shard, '{sale:<id>}', as before.
ALTER TABLE sale_events ADD COLUMN shard_tags text[];
ALTER TABLE sale_events ADD CONSTRAINT sale_events_shard_tags CHECK (shard_tags IS NULL OR cardinality(shard_tags) BETWEEN 1 AND 64);
ALTER TABLE items ADD COLUMN stock_shards smallint NOT NULL DEFAULT 1 CHECK (stock_shards BETWEEN 1 AND 64);
-- The shard whose stock the order's unit came from, and goes back to (I2 per shard).
ALTER TABLE orders ADD COLUMN stock_shard smallint NOT NULL DEFAULT 0 CHECK (stock_shard >= 0);

-- Down Migration

ALTER TABLE orders DROP COLUMN stock_shard;
ALTER TABLE items DROP COLUMN stock_shards;
ALTER TABLE sale_events DROP COLUMN shard_tags;
