#!lua
-- Reserves one unit of a stock shard for a buyer claimed on their home shard (claim.lua), and queues the order's
-- workflow start, in one atomic step (I1, I2, I4). The buyer check already ran on the home shard. The value
-- formats are src/reservation/formats.ts's; this script stores them as given.
-- KEYS[1] stock of the item on this shard   {<tag>}:stock:<itemId>
-- KEYS[2] reservations per order            {<tag>}:reservations
-- KEYS[3] start queue of this shard         {<tag>}:accepted
-- KEYS[4] units returned to this shard      {<tag>}:returns:<itemId>
-- KEYS[5] released orders                   {<tag>}:released
-- ARGV    orderId, claimedAtMs, leaseMs, reservation value, then the start queue entry's field/value pairs
-- Returns {1, stockLeft, nodeId} reserved | {3, returns} sold out on this shard | {4} stock not loaded |
-- {5} the claim's lease has run out (nothing written).
-- Idempotent per orderId (I5): run again for an order that holds a reservation here, or held one and gave its
-- unit back already (released), it writes nothing and answers as the first run did.
-- The lease: a claim older than leaseMs (by this node's clock against the home node's, claimedAtMs) takes no
-- unit, so that claim repair, which undoes only claims older than twice that (src/reservation/claims.ts), never
-- undoes a claim whose take could still land (the buyer would hold two reservations).
-- The queue entry is written first, as in reserve.lua: a failure must come before the reservation exists.
local function node()
  local id = redis.pcall('CLUSTER', 'MYID')
  return type(id) == 'string' and id or ''
end
local stock = redis.call('GET', KEYS[1])
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
  return {1, tonumber(stock or '0'), node()}
end
local now = redis.call('TIME')
if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[2]) > tonumber(ARGV[3]) then
  return {5}
end
if not stock then
  return {4}
end
stock = tonumber(stock)
if stock <= 0 then
  return {3, tonumber(redis.call('GET', KEYS[4]) or '0')}
end
redis.call('XADD', KEYS[3], '*', unpack(ARGV, 5))
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
return {1, stock - 1, node()}
