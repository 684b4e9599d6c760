-- Start retry round ARGV[2] of a COMPLETED batch, once: each listed file whose outcome is
-- `failed` loses it (and the counters give it back), and the batch is PROCESSING again.
-- KEYS[1] batch hash, KEYS[2] outcomes hash; ARGV[1] ttl, ARGV[2] round, then file indexes.
-- Returns 'missing' (no live state), 'started' (this call started the round), 'running'
-- (the round was started already) or the batch's status when it cannot be retried.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'missing'
end
local round = tonumber(ARGV[2])
if tonumber(redis.call('HGET', KEYS[1], 'retries') or '0') >= round then
  return 'running'
end
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'COMPLETED' then
  return status
end
local reset = 0
for i = 3, #ARGV do
  if redis.call('HGET', KEYS[2], ARGV[i]) == 'failed' then
    redis.call('HDEL', KEYS[2], ARGV[i])
    reset = reset + 1
  end
end
redis.call('HINCRBY', KEYS[1], 'failed', -reset)
redis.call('HINCRBY', KEYS[1], 'processed', -reset)
redis.call('HSET', KEYS[1], 'status', 'PROCESSING', 'retries', round)
redis.call('HDEL', KEYS[1], 'completed_at', 'error', 'reason')
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 'started'
