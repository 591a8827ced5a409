-- fencelock redlock inspect, run on each primary: the lock's holder here,
-- without changing anything.
-- KEYS[1] lock key
-- Returns {token or false, PTTL, label or false}.
local tok = redis.pcall('GET', KEYS[1])
if type(tok) ~= 'string' then
  return {false, 0, false}
end
return {tok, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1] .. '\255:label:' .. tok)}
