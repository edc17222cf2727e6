-- Up Migration

-- A sale event: one time window, one payment window, several items. Times are UTC.
CREATE TABLE sale_events (
  id                 integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name               text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  starts_at          timestamptz NOT NULL,
  ends_at            timestamptz NOT NULL,
  payment_window_ms  integer     NOT NULL CHECK (payment_window_ms > 0),
  created_at         timestamptz NOT NULL DEFAULT now(),
  CHECK (ends_at > starts_at)
);

-- I1: sold counts PENDING + PAID orders and can never pass quantity, even if Redis drifts.
CREATE TABLE items (
  id           integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sale_id      integer NOT NULL REFERENCES sale_events (id),
  product_id   text    NOT NULL CHECK (length(product_id) BETWEEN 1 AND 100),
  quantity     integer NOT NULL CHECK (quantity >= 0),
  sold         integer NOT NULL DEFAULT 0 CHECK (sold >= 0),
  price_minor  bigint  NOT NULL CHECK (price_minor >= 0),
  currency     char(3) NOT NULL DEFAULT 'EUR',
  CONSTRAINT items_sold_within_quantity CHECK (sold <= quantity),
  UNIQUE (sale_id, product_id)
);
CREATE INDEX items_sale_id ON items (sale_id);

CREATE TABLE orders (
  id           uuid        PRIMARY KEY,
  sale_id      integer     NOT NULL REFERENCES sale_events (id),
  item_id      integer     NOT NULL REFERENCES items (id),
  user_id      text        NOT NULL,
  status       text        NOT NULL CHECK (status IN ('PENDING', 'PAID', 'EXPIRED', 'REJECTED')),
  price_minor  bigint      NOT NULL CHECK (price_minor >= 0),
  reason       text,
  payment_id   text,
  reserved_at  timestamptz NOT NULL,
  deadline_at  timestamptz NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);
-- I3: one live (PENDING or PAID) order per buyer per sale event; EXPIRED/REJECTED ones do not block buying again.
CREATE UNIQUE INDEX orders_one_live_per_buyer ON orders (sale_id, user_id) WHERE status IN ('PENDING', 'PAID');
CREATE INDEX orders_item_status ON orders (item_id, status);

-- Downstream ledger of order events: the primary key on event_id turns a redelivery into a no-op (I5).
CREATE TABLE order_events (
  event_id     text        PRIMARY KEY,
  type         text        NOT NULL,
  order_id     uuid        NOT NULL,
  sale_id      integer     NOT NULL,
  item_id      integer     NOT NULL,
  user_id      text        NOT NULL,
  occurred_at  timestamptz NOT NULL,
  received_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_events_order_id ON order_events (order_id);

-- Down Migration

DROP TABLE order_events;
DROP TABLE orders;
DROP TABLE items;
DROP TABLE sale_events;
