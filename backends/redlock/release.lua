-- fencelock redlock release, run on each primary: delete the lock only if
-- it holds our token, and tell waiters.
-- KEYS[1] lock key   KEYS[2] void key of the token
-- ARGV[1] owner token   ARGV[2] release channel   ARGV[3] void lifetime in
-- ms, or 0   ARGV[4] the notice's message
-- With a void lifetime (the acquire request to this primary may still be
-- in flight: its reply never came) the token is first marked void, so that
-- the acquire script, if it only runs now, grants nothing.
-- With KEYS[3] and KEYS[4] (the lead primary): the waiters' queue and
-- its deadlines (see acquire.lua), from which ARGV[5], the lease's waiter
-- id ('' for a TryAcquire's lease), is removed first: it kept its place
-- at the head while it held the lock. With ARGV[6] as well (the
-- abandon of a blocked Acquire's failed attempt) the waiter keeps its
-- place instead, if it has one, for ARGV[6] ms from now: it asks again
-- within that.
-- The notice is ARGV[4]; a release (not an abandon) on the lead primary
-- appends a newline and the id of the first live waiter in the queue, if
-- any: the one waiter to wake. That notice also goes to the waiter's
-- Client's own channel, ARGV[2] .. ':' .. the id up to its first dot.
-- With KEYS[5] as well (a hand-off release on the lead: see Hand-off in
-- lease.go), when a live waiter is named, the lock is handed to it: the
-- lock key goes here, KEYS[5] keeps our token (expiring with our key) for
-- the waiter's attempts, which take over our keys on the other primaries
-- (acquire.lua), the notice names our token after the waiter's id, and the
-- script returns 2; the caller then leaves the other primaries to the
-- waiter.
-- Freeing the lock here deletes our label key here too (acquire.lua): a
-- released grant's label key does not linger on to its TTL.
-- Returns 1 when released, 0 when the lock did not hold our token.
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
if #KEYS >= 4 and ARGV[6] then
  if redis.call('ZSCORE', KEYS[3], ARGV[5]) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[4], ARGV[5], now + tonumber(ARGV[6]))
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
    redis.call('PEXPIRE', KEYS[4], ARGV[6])
  end
elseif #KEYS >= 4 then
  redis.call('ZREM', KEYS[3], ARGV[5])
  redis.call('HDEL', KEYS[4], ARGV[5])
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local gone = 0
if #KEYS == 5 then
  gone = redis.call('PTTL', KEYS[1])
end
redis.call('DEL', KEYS[1], KEYS[1] .. '\255:label:' .. ARGV[1])
local msg = ARGV[4]
local ret = 1
if #KEYS >= 4 and not ARGV[6] then
  -- Name the first live waiter in the queue (dropping those past their
  -- deadline, as acquire.lua does): only it can be granted next, so the
  -- others need not wake (see Waiting, atop waiter.go).
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head then
      break
    end
    if tonumber(redis.call('HGET', KEYS[4], head) or '0') >= now then
      msg = msg .. '\n' .. head
      if #KEYS == 5 then
        redis.call('SET', KEYS[5], ARGV[1], 'PX', math.max(gone, 1))
        msg = msg .. '\n' .. ARGV[1]
        ret = 2
      end
      local dot = string.find(head, '.', 1, true)
      if dot then
        redis.call('PUBLISH', ARGV[2] .. ':' .. string.sub(head, 1, dot - 1), msg)
      end
      break
    end
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
end
redis.call('PUBLISH', ARGV[2], msg)
return ret
