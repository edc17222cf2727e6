#!lua
-- Reserves one unit for one buyer on their home shard and queues the order's workflow start, in one atomic step
-- (I1, I2, I3, I4). The value formats are src/reservation/formats.ts's; this script completes them with the unit.
-- KEYS[1] free units of the item   {<tag>}:stock:<itemId>     list of unit numbers (absent when none is left)
-- KEYS[2] live order per buyer     {<tag>}:buyers             hash userId -> orderId
-- KEYS[3] reservations per order   {<tag>}:reservations       hash orderId -> reservation value
-- KEYS[4] start queue              {<tag>}:accepted           stream of orders whose workflow is to be started
-- KEYS[5] units returned           {<tag>}:returns:<itemId>   integer, counted by release.lua
-- KEYS[6] released orders          {<tag>}:released           hash orderId -> 1, written by release.lua
-- KEYS[7] the shard is loaded      {<tag>}:loaded
-- ARGV    userId, orderId, the reservation's terms (formats.ts reservationTerms), then the start queue entry's
--         field/value pairs without the last value, which is the reservation value
-- The unit taken is the first of the list; the reservation value is the terms and `|<unit>` (formats.ts), the
-- unit PostgreSQL stores with the order (orders.unit, I1: one live order per unit).
-- Returns {1, stockLeft, nodeId, unit} reserved (unit absent on a rerun after the order gave its unit back) | {2, heldOrderId} already purchased | {3, returns} sold out here |
-- {4} stock not loaded. nodeId names the cluster node that holds the write ('' on a single Redis), for the
-- replication barrier (src/reservation/replication.ts); returns lets a buyer tell whether a unit came back
-- since (src/reservation/store.ts, SOLD_OUT across shards).
-- Idempotent per orderId (I5): run again for the same order (a client resent it after its reply was lost), it
-- finds the order's reservation and the buyer's entry naming it, writes nothing and answers as the first run did;
-- run after the order already ended and gave its unit back (released), it writes nothing and answers the same.
-- A refusal writes nothing. The buyer check comes first so a holder is told 409, not 410. The queue entry is
-- written first: it is the one write that can fail (wrong key type, out of memory), and a script is not rolled
-- back, so a failure must come before the reservation exists, never after.
local function node()
  local id = redis.pcall('CLUSTER', 'MYID')
  return type(id) == 'string' and id or ''
end
-- The unit an existing reservation holds: the last field of its value (formats.ts), or nil when there is none.
local function unitOf(orderId)
  local value = redis.call('HGET', KEYS[3], orderId)
  return value and tonumber(string.match(value, '|(%d+)$')) or nil
end
if redis.call('EXISTS', KEYS[7]) == 0 then
  return {4}
end
local stock = redis.call('LLEN', KEYS[1])
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held == ARGV[2] and redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return {1, stock, node(), unitOf(ARGV[2])}
end
if redis.call('HEXISTS', KEYS[6], ARGV[2]) == 1 then
  return {1, stock, node()}
end
if held and held ~= ARGV[2] then
  return {2, held}
end
-- Without a unit here, or claimed here for a unit sought on another shard (held by this order, not reserved
-- here): none for this order on this shard.
if stock == 0 or held then
  return {3, tonumber(redis.call('GET', KEYS[5]) or '0')}
end
local unit = redis.call('LINDEX', KEYS[1], 0)
local value = ARGV[3] .. '|' .. unit
local entry = {unpack(ARGV, 4)}
entry[#entry + 1] = value
redis.call('XADD', KEYS[4], '*', unpack(entry))
redis.call('LPOP', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], value)
return {1, stock - 1, node(), tonumber(unit)}
