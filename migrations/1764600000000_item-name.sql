-- Up Migration

-- The product's name as buyers read it on the sale page; items made before it are named by their product id.
ALTER TABLE items ADD COLUMN name text;
UPDATE items SET name = product_id;
ALTER TABLE items ALTER COLUMN name SET NOT NULL, ADD CONSTRAINT items_name_length CHECK (length(name) BETWEEN 1 AND 200);

-- Down Migration

ALTER TABLE items DROP COLUMN name;
