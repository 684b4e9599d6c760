-- Enqueue many arq jobs in one round trip, each only if its id is new (arq's own rule:
-- no job key and no result key). KEYS[1] is the queue; ARGV holds, after the job-key and
-- result-key prefixes and the expiry in ms, triples of (job id, score, serialized job).
-- Returns how many jobs were added.
local job_prefix, result_prefix, expires_ms = ARGV[1], ARGV[2], ARGV[3]
local added = 0
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('EXISTS', job_prefix .. id, result_prefix .. id) == 0 then
    redis.call('PSETEX', job_prefix .. id, expires_ms, ARGV[i + 2])
    redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
    added = added + 1
  end
end
return added
