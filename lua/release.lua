-- Returns the unit of one order to stock, only if that very order still holds it (I2, I4, I5).
-- KEYS[1] stock of the item        {sale:<id>}:stock:<itemId>
-- KEYS[2] live order per buyer     {sale:<id>}:buyers
-- KEYS[3] reservations per order   {sale:<id>}:reservations
-- ARGV    orderId, itemId
-- Returns 1 released | 0 nothing held by this order (already released, or never reserved).
-- A repeated or stale release finds no reservation and changes nothing; the buyer's entry is cleared
-- only while it still names this order, so a newer order of the same buyer stays intact.
local reservation = redis.call('HGET', KEYS[3], ARGV[1])
if not reservation then
  return 0
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
return 1
