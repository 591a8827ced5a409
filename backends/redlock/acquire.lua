-- fencelock redlock acquire, run on each primary: take the lock and bump
-- this primary's fence counter, atomically.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] void key of this token
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns {1, counter} when granted: counter = max(stored + 1, server TIME
-- truncated to the millisecond, in microseconds), stored back;
-- {0, PTTL of the holder} when held (-1: the key has no expiry);
-- {0, -3} when this attempt was abandoned (see release.lua).
local v = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
if v[3] then
  return {0, -3}
end
local stored = 0
if v[2] then
  stored = tonumber(v[2])
  if not stored then
    return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: remove that key')
  end
end
if v[1] == ARGV[1] then
  -- Granted to this very token by an earlier run whose reply was lost.
  return {1, stored}
end
if v[1] or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- The time floor keeps the counter above every earlier fence when this
-- primary lost its data (restarted empty or from an old snapshot). It is
-- truncated to the millisecond so that primaries whose counters agree
-- usually compute the same value, which saves the client a write-back
-- round trip (see the package doc). Microseconds since 1970 stay below
-- 2^53 until 2255: exact in Lua's doubles; %d prints every digit.
local t = redis.call('TIME')
local c = tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000
if c <= stored then
  c = stored + 1
end
redis.call('SET', KEYS[2], string.format('%d', c))
return {1, c}
