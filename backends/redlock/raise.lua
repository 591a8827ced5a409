-- fencelock redlock admin: raise this primary's fence counter (see
-- QuorumAdmin.RaiseFence in admin.go).
-- KEYS[1] fence key   ARGV[1] how much to raise it by
-- The counter becomes max(stored, server TIME in microseconds) + ARGV[1]:
-- raised above what this primary's next grant would return without it
-- (the stored counter or its time floor, whichever is higher). Returns
-- the new counter. Counters stay below 2^53, exact in Lua's doubles.
local s = redis.call('GET', KEYS[1])
local stored = 0
if s then
  stored = tonumber(s)
  if not stored then
    return redis.error_reply('fence key ' .. KEYS[1] .. ' holds a non-integer; it is not fencelock\'s: remove that key')
  end
end
local t = redis.call('TIME')
local c = tonumber(t[1]) * 1000000 + tonumber(t[2])
if stored > c then
  c = stored
end
c = c + tonumber(ARGV[1])
if c >= 9007199254740992 then
  return redis.error_reply('raising fence key ' .. KEYS[1] .. ' by ' .. ARGV[1] .. ' would pass 2^53')
end
redis.call('SET', KEYS[1], string.format('%d', c))
return c
