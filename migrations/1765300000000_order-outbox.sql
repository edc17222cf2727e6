-- Up Migration

-- The events of order transitions, written by the statement that makes each transition (src/order/rows.ts), so
-- that no order waits for Kafka: a relay publishes them in id order and deletes what the broker took
-- (src/order/outbox.ts). Per order, a later transition waits for the earlier one's row lock, so its event takes a
-- higher id and is visible only after the earlier one's: the relay publishes each order's events in their order.
CREATE TABLE order_outbox (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  type         text        NOT NULL,
  order_id     uuid        NOT NULL,
  -- The partition key (itemId) and, for a refund, the payment it names: the relay drops a refund whose payment
  -- paid an order by the time it is published (a payment id no payment can have, e.g. with a NUL byte: none).
  item_id      integer     NOT NULL,
  payment_id   text,
  -- The event's JSON, eventId included (which may carry the payment id as the payment service sent it).
  payload      text        NOT NULL,
  -- With tracing on, the W3C traceparent of the span that wrote it: the publish span is its child.
  trace_parent text,
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- Down Migration

DROP TABLE order_outbox;
