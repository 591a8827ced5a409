-- fencelock abandon: undo an acquire attempt whose outcome the client
-- could not learn (its ctx ended or its connection broke after sending).
-- KEYS[1] lock key   KEYS[2] void key of the token (same hash slot)
-- ARGV[1] owner token   ARGV[2] release channel   ARGV[3] void lifetime, ms
-- If the attempt was granted, release it. Either way mark the token void,
-- so that the attempt, if it reaches the server only now (it was stuck in
-- a stalled server's buffer, or a client retry follows), grants nothing.
-- Returns 1 if a grant was released, else 0.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
