#!lua
-- One repair of the reconciler (src/reservation/reconciler.ts) on one stock shard, compare-and-set: it re-checks
-- here, atomically, what the reconciler read, and writes nothing when that changed (a press, a release, a rebuild
-- got there first), so it never races them (I1, I2, I3, I5).
-- KEYS[1] the shard is loaded      {<tag>}:loaded             its epoch
-- KEYS[2] a load or rebuild        {<tag>}:rebuilding         present while one runs
-- KEYS[3] reservations per order   {<tag>}:reservations
-- KEYS[4] live order per buyer     {<tag>}:buyers
-- KEYS[5] released orders          {<tag>}:released
-- KEYS[6] free units of the item   {<tag>}:stock:<itemId>     (the item the repair is about; any item's otherwise)
-- KEYS[7] units returned           {<tag>}:returns:<itemId>
-- ARGV[1] the repair, ARGV[2] the epoch the reconciler read (the shard was not rebuilt since), then the repair's:
--   RELEASE orderId value unitBack   a final order's reservation, still `value`: dropped, the buyer's entry here
--                                    cleared while it names the order, the unit back (unitBack '1') unless it is
--                                    free already, and the order marked released (as lua/release.lua does)
--   RESTORE orderId value unit       a live order's lost reservation, while the order holds none here and was
--                                    never released: written back, its unit taken out of the free list
--   SET_BUYER userId orderId expected   the buyer's entry set to the order while it still reads `expected`
--                                    ('' for none)
--   CLEAR_BUYER userId orderId       the buyer's entry cleared while it names the order
--   TAKE unit holderId holderValue   a unit both free and held: out of the free list while its holder's
--                                    reservation is still `holderValue`
--   DEDUPE unit                      a unit listed free more than once: listed once
--   FREE unit itemId                 a unit neither free nor held: back to the free list, unless it is free now or
--                                    a reservation here holds it now (a unit can pass through the free list, given
--                                    back and taken again, between the reconciler's read of that list and of the
--                                    reservations; this repair is rare, so it reads every reservation of the shard)
-- Returns 1 when it wrote, 0 when what it re-checked had changed (nothing written), 'SKIPPED' on a shard being
-- loaded or rebuilt, or rebuilt since the read.
local loaded, rebuilding, reservations, buyers, released, stock, returns = unpack(KEYS)
if redis.call('GET', loaded) ~= ARGV[2] or redis.call('EXISTS', rebuilding) == 1 then
  return 'SKIPPED'
end
local op = ARGV[1]
local function free(unit)
  if redis.call('LPOS', stock, unit) then
    return 0
  end
  -- As in release.lua: a unit back in an empty free list is told on the shard's restocked channel (the item id).
  if redis.call('RPUSH', stock, unit) == 1 then
    redis.pcall('SPUBLISH', string.gsub(loaded, ':loaded$', ':restocked'), string.match(stock, ':stock:(%d+)$'))
  end
  redis.call('INCR', returns)
  return 1
end
if op == 'RELEASE' then
  local orderId, value = ARGV[3], ARGV[4]
  if redis.call('HGET', reservations, orderId) ~= value then
    return 0
  end
  redis.call('HDEL', reservations, orderId)
  local userId, unit = string.match(value, '^[^|]+|([^|]+)|[^|]+|[^|]+|[^|]+|(%d+)|%d+$')
  if redis.call('HGET', buyers, userId) == orderId then
    redis.call('HDEL', buyers, userId)
  end
  if ARGV[5] == '1' then
    free(unit)
  end
  redis.call('HSET', released, orderId, 1)
  redis.call('PEXPIRE', released, 86400000)
  return 1
elseif op == 'RESTORE' then
  local orderId, value, unit = ARGV[3], ARGV[4], ARGV[5]
  if redis.call('HEXISTS', reservations, orderId) == 1 or redis.call('HEXISTS', released, orderId) == 1 then
    return 0
  end
  redis.call('HSET', reservations, orderId, value)
  redis.call('LREM', stock, 0, unit)
  return 1
elseif op == 'SET_BUYER' then
  if (redis.call('HGET', buyers, ARGV[3]) or '') ~= ARGV[5] then
    return 0
  end
  redis.call('HSET', buyers, ARGV[3], ARGV[4])
  return 1
elseif op == 'CLEAR_BUYER' then
  if redis.call('HGET', buyers, ARGV[3]) ~= ARGV[4] then
    return 0
  end
  redis.call('HDEL', buyers, ARGV[3])
  return 1
elseif op == 'TAKE' then
  if redis.call('HGET', reservations, ARGV[4]) ~= ARGV[5] then
    return 0
  end
  return redis.call('LREM', stock, 0, ARGV[3]) > 0 and 1 or 0
elseif op == 'DEDUPE' then
  local at = redis.call('LPOS', stock, ARGV[3], 'COUNT', 0)
  if #at < 2 then
    return 0
  end
  redis.call('LREM', stock, #at - 1, ARGV[3])
  return 1
elseif op == 'FREE' then
  for _, value in ipairs(redis.call('HVALS', reservations)) do
    local itemId, unit = string.match(value, '^(%d+)|.*|(%d+)|%d+$')
    if itemId == ARGV[4] and unit == ARGV[3] then
      return 0
    end
  end
  return free(ARGV[3])
end
return redis.error_reply('BAD_ARGUMENTS unknown repair ' .. tostring(op))
