-- Admit one upload or retry of a tenant against its quotas, checked and taken in one atomic
-- step.
-- KEYS[1] the tenant's recent uploads or retries (zset ticket -> start time), KEYS[2] bytes
-- streamed today (integer), KEYS[3] uploads and retries in flight (zset ticket -> time their
-- hold ends)
-- ARGV[1] now (s), ARGV[2] ticket (an upload's: the batch id it will get; a retry's: the
-- batch id, ':' and a random part), ARGV[3] most starts per rate window, ARGV[4] bytes per
-- day, ARGV[5] bytes the request declares, ARGV[6] seconds left in the day, ARGV[7] concurrent
-- batches, ARGV[8] hold (s), ARGV[9] retry hint for concurrent batches (s), ARGV[10] the rate
-- window (s), ARGV[11] the rate quota's name. A limit of 0 is no limit.
-- Returns {'ok', tickets in flight (this one included)} when admitted, else
-- {quota, limit, seconds until a retry may pass}. In-flight work here is only that without an
-- unfinished batch row yet: the caller adds the tenant's unfinished batches from PostgreSQL.
local now = tonumber(ARGV[1])
local rate, window = tonumber(ARGV[3]), tonumber(ARGV[10])
if rate > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  if redis.call('ZCARD', KEYS[1]) >= rate then
    local oldest = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
    return {ARGV[11], rate, math.max(1, math.ceil(oldest + window - now))}
  end
end
local per_day = tonumber(ARGV[4])
if per_day > 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used >= per_day or used + tonumber(ARGV[5]) > per_day then
    return {'bytes_per_day', per_day, math.max(1, tonumber(ARGV[6]))}
  end
end
local concurrent = tonumber(ARGV[7])
local holds = {}
if concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= concurrent then
    return {'concurrent_batches', concurrent, tonumber(ARGV[9])}
  end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[8]), ARGV[2])
  redis.call('EXPIRE', KEYS[3], math.ceil(tonumber(ARGV[8])) + 60)
  holds = redis.call('ZRANGE', KEYS[3], 0, -1)
end
if rate > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
end
table.insert(holds, 1, 'ok')
return holds
