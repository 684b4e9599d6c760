-- Ingest found the batch's files: set the total once and move PENDING to PROCESSING,
-- or straight to COMPLETED when there is nothing to process (or everything is already done).
-- KEYS[1] batch hash; ARGV[1] total files, ARGV[2] ignored members, ARGV[3] ttl, ARGV[4] now
-- Returns the batch status afterwards ('' when the batch state is missing).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return ''
end
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'PENDING' and status ~= 'PROCESSING' then
  return status
end
redis.call('HSET', KEYS[1], 'total_files', ARGV[1], 'ignored', ARGV[2])
local processed = tonumber(redis.call('HGET', KEYS[1], 'processed') or '0')
if processed >= tonumber(ARGV[1]) then
  status = 'COMPLETED'
  redis.call('HSET', KEYS[1], 'status', status, 'completed_at', ARGV[4])
else
  status = 'PROCESSING'
  redis.call('HSET', KEYS[1], 'status', status)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return status
