-- Up Migration

-- With tracing on (src/tracing/index.ts), the W3C traceparent of the span that stored the order (its workflow's
-- placeOrder activity), so that the payment request's span links to the order's trace. Null with tracing off.
ALTER TABLE orders ADD COLUMN trace_parent text;

-- Down Migration

ALTER TABLE orders DROP COLUMN trace_parent;
