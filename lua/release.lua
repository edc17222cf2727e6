#!lua
-- Returns the unit of one order to stock, only if that very order still holds it (I2, I4, I5).
-- KEYS[1] free units of the item   {<tag>}:stock:<itemId>     list of unit numbers
-- KEYS[2] live order per buyer     {<tag>}:buyers
-- KEYS[3] reservations per order   {<tag>}:reservations
-- KEYS[4] units returned           {<tag>}:returns:<itemId>
-- KEYS[5] released orders          {<tag>}:released          hash orderId -> 1, expires a day after the last
-- KEYS[6] the shard is loaded      {<tag>}:loaded
-- ARGV    orderId, itemId, '1' to give the unit back | '0' when another live order holds it (PostgreSQL refused
--         this order for it: Redis had handed out a unit it should not have, which must not go round again)
-- Returns nothing: a repeated or stale release finds no reservation, changes nothing and answers the same (a
-- client may have resent it after its reply was lost). The buyer's entry is cleared only while it still names
-- this order, so a newer order of the same buyer stays intact.
-- The unit goes to the end of the list: the one the reservation value names, so that no unit is ever both free and
-- held by a live order (I2; PostgreSQL's orders_live_unit refuses two live orders of one unit, I1).
-- On a shard that lost its data (its loaded mark is not there) it answers the error
-- SHARD_NOT_LOADED and writes nothing: the release is tried again (the activity's retries) once the rebuild
-- restored the reservation, which it then releases.
-- The one place Lua reads a reservation value but reserve.lua: `itemId|userId|…|unit|epoch`, src/reservation/formats.ts.
if redis.call('EXISTS', KEYS[6]) == 0 then
  return redis.error_reply('SHARD_NOT_LOADED')
end
local reservation = redis.call('HGET', KEYS[3], ARGV[1])
if not reservation then
  return
end
local itemId, userId, unit = string.match(reservation, '^([^|]+)|([^|]+)|[^|]+|[^|]+|[^|]+|(%d+)|%d+$')
if itemId ~= ARGV[2] then
  return redis.error_reply('ITEM_MISMATCH reservation ' .. ARGV[1] .. ' is for item ' .. tostring(itemId))
end
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[2], userId) == ARGV[1] then
  redis.call('HDEL', KEYS[2], userId)
end
if ARGV[3] == '1' then
  -- A unit back in an empty free list: API processes that flagged the item sold out clear the flag (the shard's
  -- restocked channel, named beside the loaded mark: a channel declared among KEYS, existing on neither side of
  -- a migrating slot, would make the script TRYAGAIN). pcall: an ACL without the channel must not fail a release.
  if redis.call('RPUSH', KEYS[1], unit) == 1 then
    redis.pcall('SPUBLISH', string.gsub(KEYS[6], ':loaded$', ':restocked'), ARGV[2])
  end
  redis.call('INCR', KEYS[4])
end
redis.call('HSET', KEYS[5], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[5], 86400000)
