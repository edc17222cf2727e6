-- Up Migration

-- Each stock shard's epoch: how many times its stock was put in Redis (0: never). A load puts epoch 1, each
-- rebuild the next; the loaded mark in Redis carries it, and so does every reservation and start queue entry
-- made there. An order is stored live only under the epoch its unit was taken in (src/order/store.ts), so an
-- order a rebuild could not know (read by a starter before the rebuild, stored after it) cannot take a unit the
-- rebuild listed free. The row is also the lock that orders those stores against a rebuild's read of the live
-- orders: they read it FOR SHARE, the rebuild updates it.
CREATE TABLE stock_shards (
  sale_id integer  NOT NULL REFERENCES sale_events (id),
  shard   smallint NOT NULL CHECK (shard >= 0),
  epoch   integer  NOT NULL DEFAULT 0 CHECK (epoch >= 0),
  PRIMARY KEY (sale_id, shard)
);
-- Sales made before: their shards are taken as loaded once (their loaded marks say '1'). Their reservations,
-- entries and workflows of orders in flight carry no epoch, which this version refuses: deploy it between sales.
INSERT INTO stock_shards (sale_id, shard, epoch)
SELECT s.id, k, 1
FROM sale_events s, generate_series(0, coalesce(cardinality(s.shard_tags), 1) - 1) AS k;

-- Down Migration

DROP TABLE stock_shards;
