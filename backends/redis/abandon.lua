-- fencelock abandon: undo an acquire attempt whose outcome the client
-- could not learn (its ctx ended or its connection broke after sending),
-- or a blocked waiter's place in line when its wait ends without a grant.
-- KEYS[1] lock key   KEYS[2] void key of the token   KEYS[3] fence key
-- KEYS[4] waiter line   KEYS[5] liveness key of the token (one hash slot)
-- ARGV[1] owner token   ARGV[2] release channel   ARGV[3] void lifetime, ms
-- ARGV[4] the keys' base
-- Leave the line (every entry of the token, and its liveness key). If the
-- token was granted (by its own attempt, or handed the lock by a release),
-- delete its label key and release it to the next waiter. Either way mark
-- the token void, so that the attempt, if it reaches the server only now
-- (it was stuck in a stalled server's buffer, or a client retry follows),
-- grants and queues nothing. Returns 1 if a grant was released, else 0.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('DEL', KEYS[5])
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', ARGV[4] .. ':label:' .. ARGV[1])
--[[grant.lua]]

hand_off(KEYS[1], KEYS[3], KEYS[4], ARGV[2], ARGV[4], fence_of(redis.call('GET', KEYS[3])))
return 1
