-- fencelock acquire: take the lock and issue a fence, atomically.
-- KEYS[1] lock key   KEYS[2] fence key (same hash slot)
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns {fence, 0} when granted, {0, PTTL of the holder} when held.
--
-- Read the fence first so that a fence key of the wrong type fails the
-- script before it writes anything.
local stored = redis.call('GET', KEYS[2])
if stored and not tonumber(stored) then
  return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: rename the lock or remove that key')
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- Granted to this very token by an earlier try whose reply was lost
  -- (a client retry): answer the same grant again.
  if redis.pcall('GET', KEYS[1]) == ARGV[1] then
    return {tonumber(stored), 0}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- fence = max(stored + 1, server time in microseconds): it keeps rising even
-- when the counter was lost (restart without persistence, failover to a
-- replica that missed the last writes), as long as the clock did not go back
-- by more than the outage lasted. Microseconds since 1970 stay below 2^53
-- until the year 2255, so Lua's doubles hold them exactly.
local t = redis.call('TIME')
local fence = (tonumber(stored) or 0) + 1
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now > fence then
  fence = now
end
redis.call('SET', KEYS[2], string.format('%d', fence))
return {fence, 0}
