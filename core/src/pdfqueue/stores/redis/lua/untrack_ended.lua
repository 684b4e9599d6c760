-- The operator showed a batch's end: stop following it, unless a retry round runs already.
-- One step against the round's own (retry_batch.lua): a round that starts after it finds the
-- reference the operator left and tracks the batch again; one that started before keeps it.
-- KEYS[1] batch hash, KEYS[2] the operator's tracking hash; ARGV[1] the batch id,
-- ARGV[2..] the terminal statuses. Returns 1 when dropped, 0 when kept (a round runs).
local status = redis.call('HGET', KEYS[1], 'status')
if status then
  local ended = false
  for i = 2, #ARGV do
    if ARGV[i] == status then
      ended = true
    end
  end
  if not ended then
    return 0
  end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
