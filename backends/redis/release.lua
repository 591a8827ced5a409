-- fencelock release: free the lock only if it is still held under our
-- token: hand it to the first live waiter in line (or tell waiters).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] waiter line
-- ARGV[1] owner token   ARGV[2] release channel   ARGV[3] the keys' base
-- Returns 1 when released, 0 when the lock was no longer ours.
-- Every path that frees our grant deletes our label key (acquire.lua)
-- with it: a label key lives while its grant is held, not on to its TTL
-- (a key per grant left to expire costs the server more than the DEL).
--
-- One MGET reads the lock and the fence. (MGET reads a key that is not a
-- string as nil: a lock key of another kind is not ours.)
local v = redis.call('MGET', KEYS[1], KEYS[2])
if v[1] ~= ARGV[1] then
  return 0
end
local stored = tonumber(v[2] or 0)
if stored then
  local h = redis.call('LPOP', KEYS[3])
  if not h then
    -- Nobody in line (the line exists only while someone waits): nobody
    -- to hand to or to tell. A Client that waits is in line before it
    -- sleeps: its queued attempt ran either before this script (it is in
    -- line) or after it (it found the lock free). So the common case
    -- publishes nothing.
    redis.call('DEL', KEYS[1], ARGV[3] .. ':label:' .. ARGV[1])
    return 1
  end
  local w = redis.call('GETDEL', ARGV[3] .. ':wait:' .. h)
  if w then
    -- The contended case: the head is live. This is grant.lua's hand_off
    -- inlined (no function is defined on this path): the lock key is
    -- overwritten with the waiter's token and TTL, no DEL first.
    local channel = ARGV[2]
    local ttl, cid, lab = string.match(w, '^(%d+):?(%x*) ?(.*)$')
    if cid ~= '' then
      channel = channel .. ':' .. cid
    end
    redis.call('SET', KEYS[1], h, 'PX', ttl)
    redis.call('DEL', ARGV[3] .. ':label:' .. ARGV[1])
    local t = redis.call('TIME')
    local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if fence <= stored then
      fence = stored + 1
    end
    fence = string.format('%d', fence)
    redis.call('SET', KEYS[2], fence)
    -- The waiter's label, kept in its liveness key (see acquire.lua).
    if lab ~= '' then
      redis.call('SET', ARGV[3] .. ':label:' .. h, fence .. ' ' .. lab, 'PX', ttl)
    end
    redis.call('PUBLISH', channel, 'grant ' .. h .. ' ' .. fence)
    return 1
  end
end

-- Rare: the head's liveness lapsed (its entry is dropped; look further),
-- or the fence key is not an integer (tell the waiters, whose attempts
-- then report it).
redis.call('DEL', ARGV[3] .. ':label:' .. ARGV[1])
--[[grant.lua]]

hand_off(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], stored)
return 1
