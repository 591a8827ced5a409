-- fencelock grant library: prepended to acquire.lua, release.lua and
-- abandon.lua (one source of truth for the fence and the waiter queue).
--
-- The waiter queue of a lock (see the package doc, Fair hand-off) is a
-- sorted set <base>:queue of waiting tokens, scored by arrival (server TIME
-- in µs), and, per waiting token, a liveness key <base>:wait:<token>
-- holding "<TTL in ms to grant it with>:<its Client's id>" (or the TTL
-- alone: the grant then goes to the release channel itself); the key
-- expires unless the waiter refreshes it, so a waiter that died drops out
-- of line by itself.
-- Liveness keys are named here, not passed in KEYS: they share the lock's
-- hash tag, hence its Cluster slot.

-- now_us is the server's time in µs (exact in a double until 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

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
  local fence = now_us()
  if fence <= stored then
    fence = stored + 1
  end
  redis.call('SET', fence_key, string.format('%d', fence))
  return fence
end

-- live_head drops waiters whose liveness key expired from the head of the
-- queue and returns the first live one and its liveness key's value, or
-- false. h, if given, is the queue's first token, already read.
local function live_head(queue, base, h)
  while true do
    h = h or redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then
      return false
    end
    local w = redis.call('GET', base .. ':wait:' .. h)
    if w then
      return h, w
    end
    redis.call('ZREM', queue, h)
    h = nil
  end
end

-- enqueue puts token in line (keeping its place if it is already there)
-- and (re)starts its liveness: live ms, after which it drops out unless
-- refreshed. cid is the waiter's Client id (hex; '' for none): its grant
-- is published on <channel>:<cid>, which only that Client subscribes to.
-- The queue itself expires when no waiter refreshes it.
local function enqueue(queue, wait_key, token, ttl, live, cid)
  if cid ~= '' then
    ttl = ttl .. ':' .. cid
  end
  redis.call('SET', wait_key, ttl, 'PX', live)
  -- NX: a new waiter joins at the end; one already in line keeps its place.
  redis.call('ZADD', queue, 'NX', string.format('%d', now_us()), token)
  local keep = 2 * tonumber(live)
  if redis.call('PTTL', queue) < keep then
    redis.call('PEXPIRE', queue, keep)
  end
end

-- hand_off runs after the lock key was deleted: it grants the lock to the
-- first live waiter in the queue, under that waiter's token and TTL, with
-- a new fence, and publishes 'grant <token> <fence>' on its Client's grant
-- channel, <channel>:<cid> (one subscriber, not every waiting Client); with
-- no live waiter it publishes the lock key on the channel (a plain release
-- notice, heard by every waiting Client). first, if given, is the queue's
-- first token, already read.
local function hand_off(lock, fence_key, queue, channel, base, first)
  local h, ttl = live_head(queue, base, first)
  local stored = h and fence_of(redis.call('GET', fence_key))
  if not h or not stored then
    redis.call('PUBLISH', channel, lock)
    return
  end
  local t, cid = string.match(ttl, '^(%d+):(%x+)$')
  if t then
    ttl, channel = t, channel .. ':' .. cid
  end
  redis.call('ZREM', queue, h)
  redis.call('DEL', base .. ':wait:' .. h)
  redis.call('SET', lock, h, 'PX', ttl)
  local fence = grant_fence(fence_key, stored)
  redis.call('PUBLISH', channel, 'grant ' .. h .. ' ' .. string.format('%d', fence))
end
