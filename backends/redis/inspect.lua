-- fencelock inspect: read a lock's holder, without changing anything.
-- KEYS[1] lock key   ARGV[1] the keys' base
-- Returns {0} when free, else {1, PTTL in ms (-1: no expiry), the
-- holder's '<fence> <label>' or false (a holder that is not fencelock's,
-- such as redis-py, stores none)}.
local tok = redis.pcall('GET', KEYS[1])
if type(tok) ~= 'string' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {1, redis.call('PTTL', KEYS[1]), false}
  end
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
local lab = false
if string.match(tok, '^%x+$') and #tok == 32 then
  lab = redis.call('GET', ARGV[1] .. ':label:' .. tok)
end
return {1, pttl, lab}
