/**
 * I1 without a row that every order writes (docs/design.md, "Unit slots"): each live order holds one numbered unit
 * of its item, 1..quantity (the order carries its item's quantity, which a foreign key ties to the item), unique
 * among the item's live orders, so PostgreSQL refuses an oversell with no shared counter; `items.sold` goes.
 *
 * Outside a transaction (noTransaction), one statement at a time, so that no lock outlives its statement on a
 * live database: ADD COLUMN (nullable, no default) and the NOT VALID constraints take ACCESS EXCLUSIVE on orders
 * for a catalog change only; the index is built CONCURRENTLY and the constraints validated under SHARE UPDATE
 * EXCLUSIVE, while orders are written. Every step can run again after a failure (IF NOT EXISTS, a check before each
 * constraint); a failed CONCURRENTLY build leaves an invalid index, which the step drops and builds again.
 * How a running sale crosses it: docs/operations.md, "Upgrading to unit slots".
 */

const addConstraint = (name, sql) => `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = '${name}') THEN ${sql}; END IF;
END $$`;

export const up = (pgm) => {
  pgm.noTransaction();
  // The key the orders' foreign key names: an item's id with its quantity, which orders copy (items are small).
  pgm.sql(addConstraint('items_id_quantity', 'ALTER TABLE items ADD CONSTRAINT items_id_quantity UNIQUE (id, quantity)'));
  pgm.sql(`ALTER TABLE orders ADD COLUMN IF NOT EXISTS unit integer, ADD COLUMN IF NOT EXISTS item_quantity integer`);
  // Live orders from before (none when the upgrade runs between sales): numbered within their stock shard's run of
  // units, as src/reservation/layout.ts shardUnits numbers them (shard k's run starts after k·⌊q/s⌋ + min(k, q mod s)).
  pgm.sql(`UPDATE orders o SET unit = n.unit FROM (
      SELECT o.id, (o.stock_shard * (i.quantity / i.stock_shards) + least(o.stock_shard, i.quantity % i.stock_shards)
               + row_number() OVER (PARTITION BY o.item_id, o.stock_shard ORDER BY o.reserved_at, o.id))::int AS unit
      FROM orders o JOIN items i ON i.id = o.item_id
      WHERE o.status IN ('PENDING', 'PAID') AND o.unit IS NULL
    ) n WHERE o.id = n.id`);
  pgm.sql(`UPDATE orders o SET item_quantity = i.quantity FROM items i
    WHERE i.id = o.item_id AND o.status IN ('PENDING', 'PAID') AND o.item_quantity IS NULL`);
  pgm.sql(`DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid WHERE c.relname = 'orders_live_unit' AND NOT x.indisvalid) THEN
      DROP INDEX orders_live_unit;
    END IF;
  END $$`);
  pgm.sql(`CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS orders_live_unit ON orders (item_id, unit) WHERE status IN ('PENDING', 'PAID')`);
  pgm.sql(addConstraint('orders_item_quantity', 'ALTER TABLE orders ADD CONSTRAINT orders_item_quantity FOREIGN KEY (item_id, item_quantity) REFERENCES items (id, quantity) NOT VALID'));
  pgm.sql(`ALTER TABLE orders VALIDATE CONSTRAINT orders_item_quantity`);
  // coalesce: a CHECK passes on NULL, and a live order without a unit or a quantity holds no unit.
  pgm.sql(addConstraint('orders_live_unit_of_item', `ALTER TABLE orders ADD CONSTRAINT orders_live_unit_of_item
    CHECK (status NOT IN ('PENDING', 'PAID') OR coalesce(unit BETWEEN 1 AND item_quantity, false)) NOT VALID`));
  pgm.sql(`ALTER TABLE orders VALIDATE CONSTRAINT orders_live_unit_of_item`);
  pgm.sql(`ALTER TABLE items DROP COLUMN IF EXISTS sold`);
};

export const down = (pgm) => {
  pgm.noTransaction();
  pgm.sql(`ALTER TABLE items ADD COLUMN IF NOT EXISTS sold integer NOT NULL DEFAULT 0 CHECK (sold >= 0)`);
  pgm.sql(`UPDATE items i SET sold = (SELECT count(*) FROM orders o WHERE o.item_id = i.id AND o.status IN ('PENDING', 'PAID'))`);
  pgm.sql(`ALTER TABLE items ADD CONSTRAINT items_sold_within_quantity CHECK (sold <= quantity)`);
  pgm.sql(`ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_live_unit_of_item, DROP CONSTRAINT IF EXISTS orders_item_quantity`);
  pgm.sql(`DROP INDEX CONCURRENTLY IF EXISTS orders_live_unit`);
  pgm.sql(`ALTER TABLE orders DROP COLUMN IF EXISTS unit, DROP COLUMN IF EXISTS item_quantity`);
  pgm.sql(`ALTER TABLE items DROP CONSTRAINT IF EXISTS items_id_quantity`);
};
