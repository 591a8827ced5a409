-- fencelock redlock extend, run on each primary: reset the lock's expiry
-- only if it still holds our token.
-- KEYS[1] lock key   KEYS[2] the token's label key, if any
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns 1 when extended, 0 when the lock did not hold our token.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if KEYS[2] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
