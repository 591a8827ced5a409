-- fencelock redlock drop, run on a primary other than the lead after the
-- lead handed our lease off (see Hand-off in lease.go), where our acquire
-- request's reply never came: void our token, so that the request, if it
-- only runs now, grants nothing, and delete the lock key if it holds our
-- token or the token our acquire was to take over (that lease was
-- released and handed off too: nobody else will take its key over).
-- KEYS[1] lock key   KEYS[2] void key of our token
-- ARGV[1] our token   ARGV[2] void lifetime in ms   ARGV[3] the token our
-- acquire was to take over, or ''
-- Deleting the lock key deletes that token's label key with it.
-- Returns 1 when it deleted the lock key, else 0.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] or (ARGV[3] ~= '' and v == ARGV[3]) then
  redis.call('DEL', KEYS[1], KEYS[1] .. '\255:label:' .. v)
  return 1
end
return 0
