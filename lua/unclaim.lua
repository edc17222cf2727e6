#!lua
-- Clears a buyer's live order on their home shard, only while it still names this order, and drops its claim
-- (I3, I5: a repeated or stale call leaves a newer order of the same buyer intact, and answers the same).
-- KEYS[1] live order per buyer     {<home tag>}:buyers
-- KEYS[2] claims in progress       {<home tag>}:claims
-- KEYS[3] the shard is loaded      {<home tag>}:loaded
-- ARGV    userId, orderId, claim member (src/reservation/formats.ts)
-- Returns nothing; the error SHARD_NOT_LOADED, writing nothing, on a shard that lost its data (its loaded mark is
-- not there): its caller tries again once it is rebuilt, and then clears what the
-- rebuild restored.
if redis.call('EXISTS', KEYS[3]) == 0 then
  return redis.error_reply('SHARD_NOT_LOADED')
end
redis.call('ZREM', KEYS[2], ARGV[3])
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
