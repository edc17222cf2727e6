-- Up Migration

-- A paymentId names one payment: the same money pays at most one order, by whatever path (the payment route,
-- the `paid` signal, the `pay` update). Every payment PostgreSQL takes is recorded here in the statement that
-- marks its order PAID, so a second order paid with the same paymentId fails that statement as a whole.
CREATE TABLE payments (
  payment_id   text        PRIMARY KEY,
  order_id     uuid        NOT NULL UNIQUE REFERENCES orders (id),
  amount_minor bigint      NOT NULL CHECK (amount_minor >= 0),
  taken_at     timestamptz NOT NULL DEFAULT now()
);

-- Payments taken before this table existed; where one paymentId paid several orders, the first stays recorded.
INSERT INTO payments (payment_id, order_id, amount_minor, taken_at)
SELECT DISTINCT ON (payment_id) payment_id, id, price_minor, updated_at
FROM orders WHERE status = 'PAID' AND payment_id IS NOT NULL
ORDER BY payment_id, updated_at
ON CONFLICT DO NOTHING;

-- Down Migration

DROP TABLE payments;
