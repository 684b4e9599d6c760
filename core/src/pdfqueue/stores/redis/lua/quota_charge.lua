-- Count bytes an upload has streamed against the tenant's day, and renew the upload's hold.
-- KEYS[1] bytes streamed today (integer), KEYS[2] uploads in flight (zset ticket -> hold end)
-- ARGV[1] bytes, ARGV[2] bytes per day (0: no limit), ARGV[3] TTL of the day's counter (s),
-- ARGV[4] ticket, ARGV[5] time the hold ends
-- Returns 1 while within the quota, 0 once these bytes went over it (they stay counted).
local used = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], 'XX', ARGV[5], ARGV[4])
local limit = tonumber(ARGV[2])
if limit > 0 and used > limit then
  return 0
end
return 1
