-- fencelock extend: reset the lock's expiry only if it is still held under
-- our token.
-- KEYS[1] lock key   KEYS[2] the token's label key (label.lua), if any
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns 1 when extended, 0 when the lock was no longer ours.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if KEYS[2] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
