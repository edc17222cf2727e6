#!lua
-- Reserves one unit of a stock shard for one order and queues the order's workflow start, in one atomic step
-- (I1, I2, I4). Two callers (src/reservation/store.ts), told apart by the number of keys:
-- - 8 keys, `reserve`: the buyer's home shard holds stock of the item; the buyer check (I3) runs here too.
-- - 7 keys, `take`: the buyer was claimed on their home shard first (claim.lua); the claim's lease is checked.
-- The value formats are src/reservation/formats.ts's; this script completes them with the unit and the epoch,
-- and reads those two back from an existing reservation.
-- KEYS[1] free units of the item   {<tag>}:stock:<itemId>     list of unit numbers (absent when none is left)
-- KEYS[2] reservations per order   {<tag>}:reservations       hash orderId -> reservation value
-- KEYS[3] start queue              {<tag>}:accepted           stream of orders whose workflow is to be started
-- KEYS[4] units returned           {<tag>}:returns:<itemId>   integer, counted by release.lua
-- KEYS[5] released orders          {<tag>}:released           hash orderId -> 1, written by release.lua
-- KEYS[6] the shard is loaded      {<tag>}:loaded
-- KEYS[7] the sale's state         {<tag>}:closed             `OPEN:v`, `PAUSED:v` or `ENDED:v` (sale controls, v
--                                                             the control's number: lua/mark.lua)
-- KEYS[8] live order per buyer     {<tag>}:buyers             hash userId -> orderId (`reserve` only)
-- ARGV    orderId, the reservation's terms (formats.ts reservationTerms), then
--         `reserve`: userId;  `take`: claimedAtMs, leaseMs;
--         then the start queue entry's field/value pairs without the last value, which is the reservation value
-- The unit taken is the first of the list; the reservation value is the terms, `|<unit>` and `|<epoch>`
-- (formats.ts): the unit PostgreSQL stores with the order (orders.unit, I1: one live order per unit), and the
-- shard's epoch, the value of its loaded mark, under which alone PostgreSQL stores the order live
-- (migrations/…_stock-epochs.sql).
-- Returns, named by their first element:
--   {'RESERVED', stockLeft, nodeId, unit, epoch}
--                                          unit and epoch absent on a rerun after the order gave its unit back; nodeId names
--                                          the cluster node that holds the write ('' on a single Redis), for the
--                                          replication barrier (src/reservation/replication.ts)
--   {'ALREADY_PURCHASED', heldOrderId}     `reserve` only
--   {'SOLD_OUT', returns}                  none here; returns lets a buyer tell whether a unit came back since
--                                          (src/reservation/store.ts, SOLD_OUT across shards)
--   {'NOT_LOADED'}                         the shard lost its data: nothing is written until the rebuild
--   {'CLOSED', state}                      the sale is paused or ended (its closed mark): nothing written; the
--                                          mark is on every shard before a control answers, so no unit is
--                                          taken after that answer (src/sale/controls.ts)
--   {'LEASE_OVER'}                         `take` only: the claim is older than its lease (nothing written)
-- Idempotent per orderId (I5): run again for an order that holds a reservation here (for `reserve`, with the
-- buyer's entry naming it) because a client resent it after its reply was lost, or that held one and gave its unit
-- back already (released), it writes nothing and answers as the first run did. A refusal writes nothing. The buyer check comes first so a holder is told 409, not 410.
-- The lease: a claim older than leaseMs (by this node's clock against the home node's, claimedAtMs) takes no
-- unit, so that claim repair, which undoes only claims older than twice that (src/reservation/claims.ts), never
-- undoes a claim whose take could still land (the buyer would hold two reservations).
-- The queue entry is written first: it is the one write that can fail (wrong key type, out of memory), and a
-- script is not rolled back, so a failure must come before the reservation exists, never after.
local stockKey, reservations, queue, returns, released, loaded, closed, buyers = unpack(KEYS)
local orderId, terms = ARGV[1], ARGV[2]
local userId, claimedAtMs, leaseMs, entryFrom
if buyers then
  userId, entryFrom = ARGV[3], 4
else
  claimedAtMs, leaseMs, entryFrom = tonumber(ARGV[3]), tonumber(ARGV[4]), 5
  -- Without them the lease could not be checked: refuse, writing nothing, rather than take a unit.
  if not (claimedAtMs and leaseMs) then
    return redis.error_reply('BAD_ARGUMENTS take needs claimedAtMs and leaseMs (ms)')
  end
end

local function node()
  local id = redis.pcall('CLUSTER', 'MYID')
  return type(id) == 'string' and id or ''
end
-- The unit and epoch an existing reservation holds: the last two fields of its value (formats.ts).
local function heldBy(value)
  local unit, epoch = string.match(value, '|(%d+)|(%d+)$')
  return tonumber(unit), tonumber(epoch)
end

if buyers and redis.call('EXISTS', loaded) == 0 then
  return {'NOT_LOADED'}
end
local stock = redis.call('LLEN', stockKey)
-- `take`: no buyer here (false); `reserve`: the buyer's live order, false when none.
local held = buyers and redis.call('HGET', buyers, userId) or false
if not buyers or held == orderId then
  local own = redis.call('HGET', reservations, orderId)
  if own then
    local unit, epoch = heldBy(own)
    return {'RESERVED', stock, node(), unit, epoch}
  end
end
if redis.call('HEXISTS', released, orderId) == 1 then
  return {'RESERVED', stock, node()}
end
if held and held ~= orderId then
  return {'ALREADY_PURCHASED', held}
end
if not buyers then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - claimedAtMs > leaseMs then
    return {'LEASE_OVER'}
  end
  if redis.call('EXISTS', loaded) == 0 then
    return {'NOT_LOADED'}
  end
end
-- Without a unit here, or claimed here for a unit sought on another shard (held by this order, not reserved
-- here): none for this order on this shard.
if stock == 0 or held then
  return {'SOLD_OUT', tonumber(redis.call('GET', returns) or '0')}
end
-- After the sold-out answer, which stays true (and cheap to repeat from memory) whatever the sale's state.
local closedAs = redis.call('GET', closed)
if closedAs and string.sub(closedAs, 1, 4) ~= 'OPEN' then
  return {'CLOSED', string.match(closedAs, '^%u+')}
end
local unit = redis.call('LINDEX', stockKey, 0)
local epoch = redis.call('GET', loaded)
local value = terms .. '|' .. unit .. '|' .. epoch
local entry = {unpack(ARGV, entryFrom)}
entry[#entry + 1] = value
redis.call('XADD', queue, '*', unpack(entry))
redis.call('LPOP', stockKey)
if buyers then
  redis.call('HSET', buyers, userId, orderId)
end
redis.call('HSET', reservations, orderId, value)
return {'RESERVED', stock - 1, node(), tonumber(unit), tonumber(epoch)}
