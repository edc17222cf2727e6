-- Reserves one unit of a stock shard for a buyer claimed on their home shard (claim.lua), and queues the order's
-- workflow start, in one atomic step (I1, I2, I4). The buyer check already ran on the home shard.
-- KEYS[1] stock of the item on this shard   {<tag>}:stock:<itemId>
-- KEYS[2] reservations per order            {<tag>}:reservations
-- KEYS[3] start queue of this shard         {<tag>}:accepted
-- ARGV    userId, orderId, itemId, reservedAtMs, priceMinor, paymentWindowMs
-- Returns {1, stockLeft} reserved | {3} sold out on this shard | {4} stock not loaded. A refusal writes nothing.
-- The queue entry is written first, as in reserve.lua: a failure must come before the reservation exists.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {4}
end
stock = tonumber(stock)
if stock <= 0 then
  return {3}
end
redis.call('XADD', KEYS[3], '*', 'orderId', ARGV[2], 'itemId', ARGV[3], 'userId', ARGV[1], 'reservedAtMs', ARGV[4],
  'priceMinor', ARGV[5], 'paymentWindowMs', ARGV[6])
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
return {1, stock - 1}
