-- Record one file's outcome exactly once and keep the counters equal to the outcomes.
-- KEYS[1] batch hash, KEYS[2] outcomes hash (file index -> outcome)
-- ARGV[1] file index, ARGV[2] outcome (a counter field), ARGV[3] ttl seconds, ARGV[4] now (ISO 8601)
-- Returns {code, status}: code -1 batch state missing (expired), 0 already recorded, 1 recorded,
-- 2 recorded and this file completed the batch.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, ''}
end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  return {0, redis.call('HGET', KEYS[1], 'status')}
end
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
local processed = redis.call('HINCRBY', KEYS[1], 'processed', 1)
local total = tonumber(redis.call('HGET', KEYS[1], 'total_files') or '-1')
local status = redis.call('HGET', KEYS[1], 'status')
local code = 1
if status == 'PROCESSING' and total >= 0 and processed >= total then
  status = 'COMPLETED'
  redis.call('HSET', KEYS[1], 'status', status, 'completed_at', ARGV[4])
  code = 2
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {code, status}
