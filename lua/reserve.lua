-- Reserves one unit for one buyer and queues the order's workflow start, in one atomic step (I1, I2, I3, I4).
-- KEYS[1] stock of the item        {sale:<id>}:stock:<itemId>   integer
-- KEYS[2] live order per buyer     {sale:<id>}:buyers           hash userId -> orderId
-- KEYS[3] reservations per order   {sale:<id>}:reservations     hash orderId -> itemId|userId|reservedAtMs|priceMinor|paymentWindowMs
-- KEYS[4] start queue              {sale:<id>}:accepted         stream of orders whose workflow is to be started
-- ARGV    userId, orderId, itemId, reservedAtMs, priceMinor, paymentWindowMs
-- Returns {1, stockLeft} reserved | {2, heldOrderId} already purchased | {3} sold out | {4} stock not loaded.
-- A refusal writes nothing. The buyer check comes first so a holder is told 409, not 410.
-- The queue entry is written first: it is the one write that can fail (wrong key type, out of memory), and a
-- script is not rolled back, so a failure must come before the reservation exists, never after.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {4}
end
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  return {2, held}
end
stock = tonumber(stock)
if stock <= 0 then
  return {3}
end
redis.call('XADD', KEYS[4], '*', 'orderId', ARGV[2], 'itemId', ARGV[3], 'userId', ARGV[1], 'reservedAtMs', ARGV[4],
  'priceMinor', ARGV[5], 'paymentWindowMs', ARGV[6])
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
return {1, stock - 1}
