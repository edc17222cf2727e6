-- Up Migration

-- An operator's controls of a live sale (src/sale/controls.ts): OPEN, PAUSED (purchases refused until resumed),
-- ENDED (purchases refused for good; orders already accepted keep their payment windows). The truth a load or
-- a rebuild puts on every stock shard as its closed mark, which reserve.lua reads.
ALTER TABLE sale_events ADD COLUMN state text NOT NULL DEFAULT 'OPEN' CHECK (state IN ('OPEN', 'PAUSED', 'ENDED'));

-- Down Migration

ALTER TABLE sale_events DROP COLUMN state;
