#!lua
-- Sets a sale's closed mark on one stock shard unless the mark in place is newer (sale controls, I7: a control
-- that lost a race changes nothing): each control takes the next number of its sale in PostgreSQL, and the mark
-- carries it (`STATE:version`, src/reservation/closing.ts). An ENDED mark stays whatever lands after it.
-- KEYS[1] the sale's state           {<tag>}:closed
-- ARGV    the mark, `OPEN:7`, `PAUSED:8` or `ENDED:9` (a mark without a number, from before numbers, counts as 0)
-- Returns {nodeId, the mark now in place}: nodeId names the cluster node that holds the write ('' on a single
-- Redis), for the replication barrier (src/reservation/replication.ts).
local current = redis.call('GET', KEYS[1])
local function version(mark)
  return tonumber(string.match(mark, ':(%d+)$') or '0')
end
if not (current and (string.sub(current, 1, 5) == 'ENDED' or version(current) >= version(ARGV[1]))) then
  redis.call('SET', KEYS[1], ARGV[1])
  current = ARGV[1]
end
local id = redis.pcall('CLUSTER', 'MYID')
return {type(id) == 'string' and id or '', current}
