-- Record files' outcomes exactly once and keep the counters equal to the outcomes.
-- KEYS[1] batch hash, KEYS[2] outcomes hash (file index -> outcome)
-- ARGV[1] ttl seconds, ARGV[2] now (ISO 8601), then pairs: file index, outcome (a counter field)
-- Returns {status, code per pair}: code 0 already recorded, 1 recorded, 2 recorded and this file
-- completed the batch. Returns {''} alone when the batch state is missing (expired).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {''}
end
local total = tonumber(redis.call('HGET', KEYS[1], 'total_files') or '-1')
local status = redis.call('HGET', KEYS[1], 'status')
local result = {status}
for i = 3, #ARGV, 2 do
  local code = 0
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1], 1)
    local processed = redis.call('HINCRBY', KEYS[1], 'processed', 1)
    code = 1
    if status == 'PROCESSING' and total >= 0 and processed >= total then
      status = 'COMPLETED'
      redis.call('HSET', KEYS[1], 'status', status, 'completed_at', ARGV[2])
      code = 2
    end
  end
  result[#result + 1] = code
end
result[1] = status
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return result
