#!lua
-- Reserves one unit of a stock shard for a buyer claimed on their home shard (claim.lua), and queues the order's
-- workflow start, in one atomic step (I1, I2, I4). The buyer check already ran on the home shard. The value
-- formats are src/reservation/formats.ts's; this script completes them with the unit, as reserve.lua does.
-- KEYS[1] free units of the item on this shard   {<tag>}:stock:<itemId>     list of unit numbers
-- KEYS[2] reservations per order                 {<tag>}:reservations
-- KEYS[3] start queue of this shard              {<tag>}:accepted
-- KEYS[4] units returned to this shard           {<tag>}:returns:<itemId>
-- KEYS[5] released orders                        {<tag>}:released
-- KEYS[6] the shard is loaded                    {<tag>}:loaded
-- ARGV    orderId, claimedAtMs, leaseMs, the reservation's terms, then the start queue entry's field/value pairs
--         without the last value, which is the reservation value
-- Returns {1, stockLeft, nodeId, unit} reserved (unit absent on a rerun after the order gave its unit back) | {3, returns} sold out on this shard | {4} stock not loaded |
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
-- The unit an existing reservation holds: the last field of its value (formats.ts), or nil when there is none.
local function unitOf(orderId)
  local value = redis.call('HGET', KEYS[2], orderId)
  return value and tonumber(string.match(value, '|(%d+)$')) or nil
end
local stock = redis.call('LLEN', KEYS[1])
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {1, stock, node(), unitOf(ARGV[1])}
end
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
  return {1, stock, node()}
end
local now = redis.call('TIME')
if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[2]) > tonumber(ARGV[3]) then
  return {5}
end
if redis.call('EXISTS', KEYS[6]) == 0 then
  return {4}
end
if stock == 0 then
  return {3, tonumber(redis.call('GET', KEYS[4]) or '0')}
end
local unit = redis.call('LINDEX', KEYS[1], 0)
local value = ARGV[4] .. '|' .. unit
local entry = {unpack(ARGV, 5)}
entry[#entry + 1] = value
redis.call('XADD', KEYS[3], '*', unpack(entry))
redis.call('LPOP', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], value)
return {1, stock - 1, node(), tonumber(unit)}
