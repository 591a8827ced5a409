-- fencelock release: delete the lock only if it is still held under our
-- token, and tell waiters.
-- KEYS[1] lock key   ARGV[1] owner token   ARGV[2] release channel
-- Returns 1 when released, 0 when the lock was no longer ours.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
