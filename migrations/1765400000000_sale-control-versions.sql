-- Up Migration

-- Sale controls are numbered (docs/design.md, "Sale controls"): each change of a sale's state takes the next
-- version, and each stock shard's closed mark carries it (lua/mark.lua), so that a control's mark landing after a
-- later control's changes nothing.
ALTER TABLE sale_events ADD COLUMN state_version integer NOT NULL DEFAULT 1 CHECK (state_version >= 1);

-- Down Migration

ALTER TABLE sale_events DROP COLUMN state_version;
