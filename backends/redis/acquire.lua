-- fencelock acquire: take the lock and issue a fence, atomically; for a
-- blocked waiter, also take or keep a place in the lock's waiter line.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] waiter line
-- (one hash slot; the token's void key <base>:void:<token> and liveness
-- key <base>:wait:<token> are named here and share it)
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- ARGV[3] liveness in ms: 0 for TryAcquire (never queue), else a blocked
--         waiter queues (or refreshes its place) when refused
-- ARGV[4] the keys' base
-- ARGV[5] a queued waiter's Client id, hex: its grant channel's suffix
--         (the liveness key holds '<TTL>:<id>'); '' for none
-- ARGV[6] the lease's label ('' or absent: none): a grant writes
--         '<fence> <label>' to the label key <base>:label:<token> with the
--         lock's TTL; a queued waiter keeps it in its liveness key
--         ('<TTL>[:<id>] <label>'), from which the release that hands it
--         the lock writes that key (see grant.lua)
-- Returns {fence, 0} when granted, {0, PTTL of the holder} when held
-- (-1: the key has no expiry), {0, -3} when this attempt was abandoned
-- (see abandon.lua), {0, -4} when the lock is free but a live waiter is
-- first in line (see grant.lua).
--
-- One MGET reads everything first, so that the common paths cost few calls
-- and a fence key of the wrong kind fails the script before it writes.
-- (MGET reads a lock key that is not a string as nil; SET NX then refuses.)
local void = ARGV[4] .. ':void:' .. ARGV[1]
local v = redis.call('MGET', KEYS[1], KEYS[2], void)

-- The common case first, before the shared functions of grant.lua are even
-- defined (each costs the server a closure per run): the lock is free, the
-- token not void, nobody in line (the line exists only while someone
-- waits) and the fence key an integer. This is grant_fence inlined.
if not v[1] and not v[3] and redis.call('EXISTS', KEYS[3]) == 0 then
  local stored = tonumber(v[2] or 0)
  if stored and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local t = redis.call('TIME')
    local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if fence <= stored then
      fence = stored + 1
    end
    redis.call('SET', KEYS[2], string.format('%d', fence))
    if ARGV[6] and ARGV[6] ~= '' then
      redis.call('SET', ARGV[4] .. ':label:' .. ARGV[1], string.format('%d', fence) .. ' ' .. ARGV[6], 'PX', ARGV[2])
    end
    return {fence, 0}
  end
end
local label_key = ARGV[4] .. ':label:' .. ARGV[1]
local labelled = ARGV[6] and ARGV[6] ~= ''

local wait
if v[1] and v[1] ~= ARGV[1] and not v[3] and tonumber(v[2] or 0) then
  -- The contended case, also without grant.lua: another token holds the
  -- lock. Refuse with its PTTL; a blocked waiter joins the line below.
  wait = redis.call('PTTL', KEYS[1])
else
  --[[grant.lua]]

  if v[3] then
    return {0, -3}
  end
  local stored = fence_of(v[2])
  if not stored then
    return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: rename the lock or remove that key')
  end
  if v[1] == ARGV[1] then
    -- Granted to this very token by an earlier run whose reply was lost (a
    -- client retry), or handed to this waiter by a release: answer the
    -- same grant again, its TTL restarted now (the caller counts it from
    -- when this attempt was sent, which may be later than the grant).
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    if labelled then
      redis.call('SET', label_key, string.format('%d', stored) .. ' ' .. ARGV[6], 'PX', ARGV[2])
    end
    return {stored, 0}
  end
  -- The lock is free (or a key of another kind), and the line not empty.
  wait = -4
  local head = live_head(KEYS[3], ARGV[4])
  if not head or head == ARGV[1] then
    if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
      if head then
        -- Leave the line: the head entry, and the liveness key, which
        -- makes any later entry of this token stale (see grant.lua).
        redis.call('LPOP', KEYS[3])
        redis.call('DEL', ARGV[4] .. ':wait:' .. ARGV[1])
      end
      local fence = grant_fence(KEYS[2], stored)
      if labelled then
        redis.call('SET', label_key, string.format('%d', fence) .. ' ' .. ARGV[6], 'PX', ARGV[2])
      end
      return {fence, 0}
    end
    wait = redis.call('PTTL', KEYS[1])
  end
end
if ARGV[3] == '0' then
  return {0, wait}
end

-- Join the line, or keep the place in it: (re)start the liveness key, for
-- ARGV[3] ms, after which the waiter drops out unless it refreshes. SET ...
-- GET returns the key's old value: none means this token is not in line
-- (a new waiter, or one whose liveness lapsed, whose stale entry a
-- hand-off will drop), so it joins at the end. A refresh (an old value)
-- keeps its place, and rejoins only if its entry is gone (LPOS; the line
-- was deleted by hand, or expired: refreshes are rare, so this costs
-- nothing in the contended loop).
local wait_key = ARGV[4] .. ':wait:' .. ARGV[1]
local ttl = ARGV[2]
if ARGV[5] ~= '' then
  ttl = ttl .. ':' .. ARGV[5]
end
if labelled then
  ttl = ttl .. ' ' .. ARGV[6]
end
if not redis.call('SET', wait_key, ttl, 'PX', ARGV[3], 'GET') or
    not redis.call('LPOS', KEYS[3], ARGV[1]) then
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
-- The line expires when nobody joins or refreshes for keep ms, so that a
-- line of dead waiters goes away; it must not expire under a live waiter.
-- Every join and refresh sets keep from now: at least twice this waiter's
-- liveness, and at least 6 s, twice the longest liveness a Client gives its
-- waiters (3 refreshes of at most a second, see blocker.go), so that a
-- waiter with a short TTL does not cut the line's life below that of a
-- waiter with a long one, which refreshes (at most every second) long
-- before. One PEXPIRE, no PTTL to compare first. (Setting it only when
-- RPUSH creates the line, and on refreshes, is not enough: under steady
-- contention the line never empties and each waiter is served long
-- before its first refresh, so nothing would renew the line.)
redis.call('PEXPIRE', KEYS[3], math.max(2 * tonumber(ARGV[3]), 6000))
return {0, wait}
