-- Up Migration

-- CANCELLED: a final state beside EXPIRED, reached while the order is PENDING and its payment window open, by
-- its buyer, the payment service (a declined charge) or an operator; `reason` says which (BUYER,
-- PAYMENT_FAILED, OPERATOR). Not live: its unit is free in PostgreSQL at once (orders_live_unit and
-- orders_one_live_per_buyer cover PENDING and PAID only) and goes back to Redis in the compensation.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('PENDING', 'PAID', 'EXPIRED', 'REJECTED', 'CANCELLED'));
ALTER TABLE orders ADD CONSTRAINT orders_cancel_reason CHECK (status <> 'CANCELLED' OR reason IN ('BUYER', 'PAYMENT_FAILED', 'OPERATOR'));

-- Down Migration

ALTER TABLE orders DROP CONSTRAINT orders_cancel_reason;
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('PENDING', 'PAID', 'EXPIRED', 'REJECTED'));
