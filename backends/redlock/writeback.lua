-- fencelock redlock write-back: raise this primary's fence counter to the
-- lease's fence, only while the lock still holds our token here.
-- KEYS[1] lock key   KEYS[2] fence key   ARGV[1] owner token   ARGV[2] fence
-- Returns 1 when the counter is now at least the fence, 0 when the lock
-- no longer holds our token here (nothing written).
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local f = tonumber(ARGV[2])
local s = redis.call('GET', KEYS[2])
if s then
  s = tonumber(s)
  if not s then
    return redis.error_reply('fence key ' .. KEYS[2] .. ' holds a non-integer; it is not fencelock\'s: remove that key')
  end
end
if not s or s < f then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
