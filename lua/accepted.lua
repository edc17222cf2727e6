#!lua
-- How many orders a stock shard has ever accepted into its start queue: the stream's own count of appended
-- entries (XINFO STREAM `entries-added`, Redis 7.0), which deletes and trims leave alone. The starter reads it
-- for the pace of acceptance across every API process (src/starter/gates.ts); a script so that a cluster
-- routes it by its key, as it does not XINFO.
-- KEYS[1] the shard's start queue           {<tag>}:accepted
-- Returns the count, 0 when the stream does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then
    return info[i + 1]
  end
end
return redis.error_reply('ERR XINFO STREAM has no entries-added: Redis 7.0 or later is required')
