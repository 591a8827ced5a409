-- fencelock grant library: inserted into acquire.lua, release.lua and
-- abandon.lua (one source of truth for the fence and the waiter line),
-- after their hot paths, which inline what they need of it: Lua defines a
-- script's local functions each time it runs, so a path that returns
-- before them does not pay for them.
--
-- The waiter line of a lock (see the package doc, Waiting) is a list
-- (<base>:waiters:fencelock, or <base>:waiters:k:fencelock, see keys.go)
-- of waiting tokens in arrival order, and, per waiting token, a liveness
-- key <base>:wait:<token> holding "<TTL in ms to grant it with>:<its
-- Client's id> <its label>" (without ":<id>", the grant goes to the release
-- channel itself; without " <label>", the lease has none); the key expires
-- unless the waiter refreshes it, so a waiter that died drops out of line
-- by itself. The label rides in the liveness key so that a hand-off writes
-- the new holder's label key with no read of its own.
-- Liveness keys are named here, not passed in KEYS: they share the lock's
-- hash tag, hence its Cluster slot.
--
-- The line may hold a token more than once, or a token whose liveness key
-- is gone: entries are removed only at the head (or by abandon.lua's LREM),
-- and a waiter whose liveness lapsed (it stalled) joins again at the end
-- when it refreshes (acquire.lua: SET ... GET found no liveness key).
-- Such entries are harmless, because a hand-off grants the head's token
-- only if GETDEL of its liveness key returns a value, and that same GETDEL
-- deletes the key: each liveness key created (one queued attempt that
-- found none) lets at most one grant through, and a stale entry reached
-- later finds no key and is dropped. A token granted is never handed the
-- lock again unless its own attempt, refused after that grant ended,
-- queued it anew. The converse holds too, so that a live waiter is never
-- out of line: every script that removes a token's entry deletes its
-- liveness key in the same run (hand-offs and live_head's drops find it
-- gone already), and acquire.lua keeps the line from expiring before any
-- liveness key (and puts a refreshing waiter back in line if it is not).

-- fence_of parses the fence key's value (nil: 0); false if not an integer.
local function fence_of(v)
  if not v then
    return 0
  end
  return tonumber(v) or false
end

-- grant_fence stores and returns max(stored + 1, server time in µs): it
-- keeps rising even when the counter was lost (restart without persistence,
-- failover to a replica that missed the last writes), as long as the clock
-- did not go back by more than the outage lasted. Microseconds since 1970
-- stay below 2^53 until the year 2255, so Lua's doubles hold them exactly;
-- string.format writes all the digits (tostring would round to 14).
local function grant_fence(fence_key, stored)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence <= stored then
    fence = stored + 1
  end
  redis.call('SET', fence_key, string.format('%d', fence))
  return fence
end

-- live_head drops waiters whose liveness key is gone from the head of the
-- line and returns the first live one, or false.
local function live_head(line, base)
  while true do
    local h = redis.call('LINDEX', line, 0)
    if not h then
      return false
    end
    if redis.call('EXISTS', base .. ':wait:' .. h) == 1 then
      return h
    end
    redis.call('LPOP', line)
  end
end

-- hand_off gives the lock, which the calling script found held under the
-- token it releases, to the first live waiter in line: it pops entries
-- until GETDEL returns one's liveness key (see above), overwrites the lock
-- key with that waiter's token and TTL, issues a new fence, writes the
-- waiter's label key ('<fence> <label>') if it has a label, and publishes
-- 'grant <token> <fence>' on its Client's grant channel, <channel>:<cid>
-- (one subscriber, not every waiting Client). With no live waiter, or a
-- fence key that is not an integer (stored false), it deletes the lock key
-- and publishes the lock key on the channel (a plain release notice, heard
-- by every waiting Client). This is release.lua's hot path, generalised.
local function hand_off(lock, fence_key, line, channel, base, stored)
  local h, w
  while stored do
    h = redis.call('LPOP', line)
    if not h then
      break
    end
    w = redis.call('GETDEL', base .. ':wait:' .. h)
    if w then
      break
    end
  end
  if not w then
    redis.call('DEL', lock)
    redis.call('PUBLISH', channel, lock)
    return
  end
  local ttl, cid, lab = string.match(w, '^(%d+):?(%x*) ?(.*)$')
  if cid ~= '' then
    channel = channel .. ':' .. cid
  end
  redis.call('SET', lock, h, 'PX', ttl)
  local fence = string.format('%d', grant_fence(fence_key, stored))
  if lab ~= '' then
    redis.call('SET', base .. ':label:' .. h, fence .. ' ' .. lab, 'PX', ttl)
  end
  redis.call('PUBLISH', channel, 'grant ' .. h .. ' ' .. fence)
end
