-- Records a buyer's live order on their home shard before its unit is sought on another shard (I3 across shards).
-- KEYS[1] live order per buyer     {<home tag>}:buyers   hash userId -> orderId
-- KEYS[2] claims in progress       {<home tag>}:claims   sorted set orderId|itemId|userId by claim time (ms)
-- ARGV    userId, orderId, itemId, nowMs
-- Returns {1} claimed | {2, heldOrderId} already purchased (nothing written).
-- The claim is settled (ZREM) once take.lua reserved the unit on some shard, or undone by unclaim.lua when no
-- shard had one; a claim left by a crash in between is repaired by the starters (ReservationStore.repairClaims).
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  return {2, held}
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1}
