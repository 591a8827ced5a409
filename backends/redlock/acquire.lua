-- fencelock redlock acquire, run on each primary: take the lock and bump
-- this primary's fence counter, atomically.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] void key of this token
-- ARGV[1] owner token   ARGV[2] TTL in milliseconds
-- Returns {1, counter} when granted: counter = max(stored + 1, server TIME
-- in microseconds, truncated to the millisecond if a counter is stored),
-- stored back;
-- {0, PTTL of the holder} when held (-1: the key has no expiry);
-- {0, -3} when this attempt was abandoned (see release.lua).
-- With KEYS[4] and KEYS[5] (on the lead primary, for a blocked Acquire):
-- the waiters' queue, a sorted set of waiter ids scored by arrival order,
-- and a hash of each waiter's deadline (ms); ARGV[3] the waiter id,
-- ARGV[4] how long (ms) an entry outlives its waiter's last attempt,
-- ARGV[5] '1' for an ordered attempt, '0' for a plain one. In an ordered
-- attempt, waiters past their deadline are dropped from the head, and a
-- waiter behind others is refused and queued (kept in place if it was
-- already) with {0, -4, ms until the head's place ends}. The first in
-- line, a waiter that finds nobody queued, and a plain attempt try the
-- lock, and the waiter is queued if it is held. A waiter granted in an
-- ordered attempt, or already queued, is put at the head (score 0: the
-- holder) and stays there, so that nobody passes it while it holds the
-- lock, nor if its attempt fails elsewhere (its abandon keeps the place:
-- release.lua), until its release takes it out, or until its lock key
-- here expires (its deadline is the grant plus the smaller of ARGV[4] and
-- the TTL): a holder that stopped renewing (a stall, a crash) holds up
-- the queue no longer than its lock.
-- With KEYS[6] (on the lead, with the queue): the key that keeps the token
-- of the last lease handed off by its release (release.lua); a grant
-- returns its value as a third element ('' if none), for the attempt's
-- calls to the other primaries. Without the queue, ARGV[4], if given and
-- not '', is such a token: the lock key holding it is taken over as if
-- free (its holder released it and handed the lock on).
-- The label (ARGV[3] without the queue, ARGV[6] with it), if
-- given, is the lease's label as '<version> <label>' (version 0 at the
-- grant; see label.lua): a grant stores it in KEYS[1]..'\255:label:'..
-- token, expiring with the lock (the lock key keeps the bare token); the
-- release that frees the grant, or the take-over of a handed-off token's
-- key, deletes it.
local v = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
if v[3] then
  return {0, -3}
end
local function enqueue(now)
  -- Scored by arrival: one more than the last in line (ms could tie).
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  local seq = 1
  if last[2] then
    seq = tonumber(last[2]) + 1
  end
  redis.call('ZADD', KEYS[4], 'NX', seq, ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[3], now + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
end
local queued = #KEYS >= 5
local now = 0
if queued then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if queued and ARGV[5] == '1' then
  while true do
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not head or head == ARGV[3] then
      break
    end
    local deadline = tonumber(redis.call('HGET', KEYS[5], head) or '0')
    if deadline >= now then
      enqueue(now)
      return {0, -4, deadline - now}
    end
    redis.call('ZREM', KEYS[4], head)
    redis.call('HDEL', KEYS[5], head)
  end
end
local stored = 0
if v[2] then
  stored = tonumber(v[2])
  if not stored then
    return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: remove that key')
  end
end
if v[1] == ARGV[1] then
  -- Granted to this very token by an earlier run whose reply was lost.
  return {1, stored}
end
local gone = not queued and ARGV[4] and ARGV[4] ~= '' and v[1] == ARGV[4]
if gone then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[1] .. '\255:label:' .. ARGV[4])
elseif v[1] or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if queued then
    enqueue(now)
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if queued and (ARGV[5] == '1' or redis.call('ZSCORE', KEYS[4], ARGV[3])) then
  redis.call('ZADD', KEYS[4], 0, ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[3], now + math.min(tonumber(ARGV[4]), tonumber(ARGV[2])))
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
end
-- The time floor keeps the counter above every earlier fence when this
-- primary lost its data (restarted empty or from an old snapshot). While
-- a counter is stored, the floor is truncated to the millisecond so that
-- primaries whose counters agree usually compute the same value, which
-- saves the client a write-back round trip (see the package doc). Without
-- one (a new name, or the counter was lost) it is the full microsecond:
-- fences issued earlier in this same millisecond (from its truncated
-- floor, plus one per grant) are below it, while a truncated floor would
-- repeat them. Microseconds since 1970 stay below 2^53 until 2255: exact
-- in Lua's doubles; %d prints every digit.
local t = redis.call('TIME')
local c = tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000
if not v[2] then
  c = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if c <= stored then
  c = stored + 1
end
redis.call('SET', KEYS[2], string.format('%d', c))
local label = nil
if queued then
  label = ARGV[6]
else
  label = ARGV[3]
end
if label and label ~= '' then
  redis.call('SET', KEYS[1] .. '\255:label:' .. ARGV[1], label, 'PX', ARGV[2])
end
if #KEYS == 6 then
  return {1, c, redis.call('GET', KEYS[6]) or ''}
end
return {1, c}
