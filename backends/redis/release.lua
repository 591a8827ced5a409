-- fencelock release: delete the lock only if it is still held under our
-- token, then hand it to the first live waiter in line (or tell waiters).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] waiter queue
-- ARGV[1] owner token   ARGV[2] release channel   ARGV[3] the keys' base
-- Returns 1 when released, 0 when the lock was no longer ours.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- Nobody in line (the queue exists only while someone waits): nobody to
-- hand to or to tell. A Client that waits is in line before it sleeps: its
-- queued attempt ran either before this script (it is in the queue) or
-- after it (it found the lock free). So the common case publishes nothing
-- and defines none of the shared functions below.
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if not first then
  return 1
end

--[[grant.lua]]

hand_off(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], first)
return 1
