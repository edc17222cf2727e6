#!lua
-- Lists the claims of a home shard older than a given age, by this node's clock (claim.lua stamps them with it).
-- KEYS[1] claims in progress       {<home tag>}:claims
-- ARGV    olderThanMs, limit
-- Returns up to limit claim members (src/reservation/formats.ts), oldest first.
local now = redis.call('TIME')
local nowMs = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowMs - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
