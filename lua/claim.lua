#!lua
-- Records a buyer's live order on their home shard before its unit is sought on another shard (I3 across shards).
-- KEYS[1] live order per buyer     {<home tag>}:buyers   hash userId -> orderId
-- KEYS[2] claims in progress       {<home tag>}:claims   sorted set of claim members by claim time (ms, Redis' clock)
-- KEYS[3] the shard is loaded      {<home tag>}:loaded
-- ARGV    userId, orderId, claim member (src/reservation/formats.ts)
-- Returns {'CLAIMED', claimedAtMs, nodeId} | {'ALREADY_PURCHASED', heldOrderId} | {'NOT_LOADED'}: the home shard
-- lost its data (its loaded mark is not there), nothing is written there until the rebuild.
-- Idempotent per orderId (I5): run again for the same order, it finds its own claim, writes nothing and answers
-- the same claim time (a claim already settled is made again, and settled again by the take that follows).
-- The claim is settled (ZREM) once reserve.lua (`take`) reserved the unit on some shard, or undone by unclaim.lua when no
-- shard had one; a claim left by a crash in between is repaired by src/reservation/claims.ts. Its time is
-- Redis' (TIME), so that every judge of its age reads one clock, whatever the API host's.
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {'NOT_LOADED'}
end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and held ~= ARGV[2] then
  return {'ALREADY_PURCHASED', held}
end
local id = redis.pcall('CLUSTER', 'MYID')
local node = type(id) == 'string' and id or ''
local claimedAt = redis.call('ZSCORE', KEYS[2], ARGV[3])
if claimedAt then
  return {'CLAIMED', tonumber(claimedAt), node}
end
local now = redis.call('TIME')
claimedAt = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[2], claimedAt, ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'CLAIMED', claimedAt, node}
