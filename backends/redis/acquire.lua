-- fencelock acquire: take the lock and issue a fence, atomically.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] void key of this token
-- (all in one hash slot)
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns {fence, 0} when granted, {0, PTTL of the holder} when held
-- (-1: the key has no expiry), {0, -3} when this attempt was abandoned
-- (see abandon.lua).
--
-- One MGET reads everything first, so that the common paths cost few calls
-- and a fence key of the wrong kind fails the script before it writes.
-- (MGET reads a lock key that is not a string as nil; SET NX then refuses.)
local v = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
if v[3] then
  return {0, -3}
end
local stored = 0
if v[2] then
  stored = tonumber(v[2])
  if not stored then
    return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: rename the lock or remove that key')
  end
end
if v[1] == ARGV[1] then
  -- Granted to this very token by an earlier run whose reply was lost (a
  -- client retry): answer the same grant again.
  return {stored, 0}
end
if v[1] or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- fence = max(stored + 1, server time in microseconds): it keeps rising even
-- when the counter was lost (restart without persistence, failover to a
-- replica that missed the last writes), as long as the clock did not go back
-- by more than the outage lasted. Microseconds since 1970 stay below 2^53
-- until the year 2255, so Lua's doubles hold them exactly; string.format
-- writes all the digits (Lua's tostring would round to 14).
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
if fence <= stored then
  fence = stored + 1
end
redis.call('SET', KEYS[2], string.format('%d', fence))
return {fence, 0}
