-- fencelock redlock label, run on each primary: store a held lease's label
-- beside the lock key, only while the lock holds our token, expiring with
-- the lock.
-- KEYS[1] lock key   KEYS[2] the token's label key
-- ARGV[1] owner token   ARGV[2] label
-- Returns 1 when stored, 0 when the lock did not hold our token.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', pttl)
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
