-- fencelock redlock label, run on each primary: store a held lease's label
-- beside the lock key, only while the lock holds our token, expiring with
-- the lock, and only over an older version: a relabel that reaches this
-- primary after a later one (or after a later Inspect-visible write) does
-- not undo it.
-- KEYS[1] lock key   KEYS[2] the token's label key
-- ARGV[1] owner token   ARGV[2] '<version> <label>'   ARGV[3] version
-- Returns 1 when stored (or a newer version is there), 0 when the lock did
-- not hold our token.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local old = redis.pcall('GET', KEYS[2])
if type(old) == 'string' then
  local v = tonumber(string.match(old, '^(%d+) '))
  if v and v >= tonumber(ARGV[3]) then
    return 1
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', pttl)
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
