-- Register one chunk of a batch's process jobs as pending work (fair dispatch), at most once.
-- KEYS[1] is the batch's live-state hash (a CANCELLED batch registers nothing), KEYS[2] the
-- erasure tombstones (an erased batch registers nothing either, whatever its live state).
-- ARGV: key prefix, batch id, tenant, chunk number, expiry in ms, then entries
-- "job id\ncost\nserialized job". Chunks are numbered from 0 and taken only in order, so a
-- rerun ingest that replays its chunks adds nothing twice. Returns how many entries were added.
local P, batch, tenant, chunk, expires_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('HGET', KEYS[1], 'status') == 'CANCELLED' or redis.call('ZSCORE', KEYS[2], batch) then
  return 0
end
local meta = P .. 'b:' .. batch .. ':meta'
local done = tonumber(redis.call('HGET', meta, 'chunks') or '0')
if chunk ~= done then
  return 0
end
local pending = P .. 'b:' .. batch .. ':pending'
for i = 6, #ARGV do
  redis.call('RPUSH', pending, ARGV[i])
end
redis.call('HSET', meta, 'chunks', done + 1, 'tenant', tenant)
redis.call('PEXPIRE', meta, expires_ms)
if #ARGV >= 6 then
  redis.call('PEXPIRE', pending, expires_ms)
end
local batches = P .. 't:' .. tenant
if not redis.call('LPOS', batches, batch) then
  redis.call('RPUSH', batches, batch)
end
if not redis.call('LPOS', P .. 'tenants', tenant) then
  redis.call('RPUSH', P .. 'tenants', tenant)
end
return #ARGV - 5
