#!lua
-- Returns the unit of one order to stock, only if that very order still holds it (I2, I4, I5).
-- KEYS[1] stock of the item        {<tag>}:stock:<itemId>
-- KEYS[2] live order per buyer     {<tag>}:buyers
-- KEYS[3] reservations per order   {<tag>}:reservations
-- KEYS[4] units returned           {<tag>}:returns:<itemId>
-- KEYS[5] released orders          {<tag>}:released          hash orderId -> 1, expires a day after the last
-- KEYS[6] the shard is loaded      {<tag>}:loaded
-- ARGV    orderId, itemId
-- Returns nothing: a repeated or stale release finds no reservation, changes nothing and answers the same (a
-- client may have resent it after its reply was lost). The buyer's entry is cleared only while it still names
-- this order, so a newer order of the same buyer stays intact.
-- On a shard that lost its data (neither its loaded mark nor the item's stock is there) it answers the error
-- SHARD_NOT_LOADED and writes nothing: the release is tried again (the activity's retries) once the rebuild
-- restored the reservation, which it then releases.
-- The one place Lua reads a reservation value: `itemId|userId|…`, src/reservation/formats.ts.
if redis.call('EXISTS', KEYS[6]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('SHARD_NOT_LOADED')
end
local reservation = redis.call('HGET', KEYS[3], ARGV[1])
if not reservation then
  return
end
local itemId, userId = string.match(reservation, '^([^|]+)|([^|]+)|')
if itemId ~= ARGV[2] then
  return redis.error_reply('ITEM_MISMATCH reservation ' .. ARGV[1] .. ' is for item ' .. tostring(itemId))
end
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[2], userId) == ARGV[1] then
  redis.call('HDEL', KEYS[2], userId)
end
redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[5], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[5], 86400000)
