-- Release pending process jobs into arq's queue: weighted deficit round robin across tenants
-- (cost in PDFs), round robin across each tenant's batches, within windows of ready plus
-- running jobs (overall, per tenant, per batch).
--
-- What is in flight is derived from arq's own state, never counted up and down: a released
-- job stays in the queue's sorted set while it is ready, running or waiting for a retry, and
-- arq removes it when it finishes. So each call first forgets released jobs no longer in the
-- set; a job whose worker was killed keeps its slot until arq reruns and finishes it. A retry
-- waiting out its backoff (scored in the future) holds no slot until it is due again, unless
-- the caller says it holds its tenant's and its batch's (deliveries: a tenant whose receiver
-- fails would otherwise release all its deliveries, and their retries all fall due together).
--
-- KEYS[1] the arq queue. ARGV: key prefix, job-key prefix, result-key prefix, job expiry ms,
-- now ms, window, tenant window, batch window, quantum (PDFs), a job id that is finishing
-- right now ('' for none), a live worker "id:max_jobs" ('' for none) and when its entry
-- expires (ms), the floor of an automatic window, 1 if retries waiting out their backoff hold
-- their tenant's and batch's slots (else 0), then n and n (tenant, weight) pairs,
-- then m and m (tenant, cap) pairs.
-- A window of 0 means twice the max_jobs of the live workers: enough ready jobs to keep
-- them busy between refills, few enough that a new batch is not queued behind much; never
-- less than the floor (the caller's own share: it is a live worker, even before its tick).
-- A tenant or batch window of 0 means the overall window. Returns how many were released.
local queue = KEYS[1]
local P, job_prefix, result_prefix = ARGV[1], ARGV[2], ARGV[3]
local expires_ms, now_ms = ARGV[4], ARGV[5]
local window, tenant_window, batch_window = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local quantum, finishing = tonumber(ARGV[9]), ARGV[10]
local worker, worker_expires_ms, floor = ARGV[11], ARGV[12], tonumber(ARGV[13])
local deferred_hold = ARGV[14] == '1'
local weights, caps = {}, {}
local at = 15
for _ = 1, tonumber(ARGV[at]) do
  weights[ARGV[at + 1]] = tonumber(ARGV[at + 2])
  at = at + 2
end
at = at + 1
for _ = 1, tonumber(ARGV[at]) do
  caps[ARGV[at + 1]] = tonumber(ARGV[at + 2])
  at = at + 2
end

local tenants, deficit, head = P .. 'tenants', P .. 'deficit', P .. 'head'
local inflight, owner = P .. 'inflight', P .. 'owner'

-- 0. the window, from the workers that ticked lately
local workers = P .. 'workers'
if worker ~= '' then
  redis.call('ZADD', workers, worker_expires_ms, worker)
  -- the set goes with the last lease (leases are equally long), not with the queue
  redis.call('PEXPIREAT', workers, worker_expires_ms)
end
redis.call('ZREMRANGEBYSCORE', workers, '-inf', now_ms)
if window == 0 then
  for _, w in ipairs(redis.call('ZRANGE', workers, 0, -1)) do
    window = window + 2 * tonumber(string.match(w, ':(%d+)$'))
  end
  window = math.max(window, floor)
end
if tenant_window == 0 then
  tenant_window = window
end
if batch_window == 0 then
  batch_window = tenant_window
end

-- 1. what is in flight now, per batch and per tenant
local in_batch, in_tenant, total = {}, {}, 0
for _, b in ipairs(redis.call('SMEMBERS', inflight)) do
  local set = P .. 'b:' .. b .. ':inflight'
  local n, waiting = 0, 0
  for _, j in ipairs(redis.call('SMEMBERS', set)) do
    local score = redis.call('ZSCORE', queue, j)
    if j == finishing or not score then
      redis.call('SREM', set, j)
    elseif tonumber(score) <= tonumber(now_ms) then
      n = n + 1
    elseif deferred_hold then
      waiting = waiting + 1
    end  -- else a retry waiting out its backoff: kept, but it holds no slot meanwhile
  end
  if redis.call('SCARD', set) == 0 then
    redis.call('SREM', inflight, b)
    redis.call('HDEL', owner, b)
  elseif n + waiting > 0 then
    local t = redis.call('HGET', owner, b) or ''
    in_batch[b] = n + waiting
    in_tenant[t] = (in_tenant[t] or 0) + n + waiting
    total = total + n  -- a waiting retry never holds the window: other tenants go on
  end
end

-- 2. the tenant's next batch that may release: 'empty' when it has none left
local function next_batch(t)
  local list = P .. 't:' .. t
  for _ = 1, redis.call('LLEN', list) do
    local b = redis.call('LINDEX', list, 0)
    if redis.call('LLEN', P .. 'b:' .. b .. ':pending') == 0 then
      redis.call('LPOP', list)
    elseif (in_batch[b] or 0) >= batch_window then
      redis.call('LMOVE', list, list, 'LEFT', 'RIGHT')
    else
      return b
    end
  end
  if redis.call('LLEN', list) == 0 then
    return 'empty'
  end
  return nil
end

local function release(t, b)
  local entry = redis.call('LPOP', P .. 'b:' .. b .. ':pending')
  local first = string.find(entry, '\n', 1, true)
  local second = string.find(entry, '\n', first + 1, true)
  local id = string.sub(entry, 1, first - 1)
  local cost = tonumber(string.sub(entry, first + 1, second - 1))
  if redis.call('EXISTS', job_prefix .. id, result_prefix .. id) == 0 then
    redis.call('PSETEX', job_prefix .. id, expires_ms, string.sub(entry, second + 1))
    redis.call('ZADD', queue, now_ms, id)
  end
  if redis.call('ZSCORE', queue, id) then
    redis.call('SADD', P .. 'b:' .. b .. ':inflight', id)
    redis.call('SADD', inflight, b)
    redis.call('HSET', owner, b, t)
    in_batch[b] = (in_batch[b] or 0) + 1
    in_tenant[t] = (in_tenant[t] or 0) + 1
    total = total + 1
  end
  local list = P .. 't:' .. t
  if redis.call('LINDEX', list, 0) == b then  -- the tenant's next release is its next batch
    redis.call('LMOVE', list, list, 'LEFT', 'RIGHT')
  end
  return cost
end

local function rotate(t)
  redis.call('LMOVE', tenants, tenants, 'LEFT', 'RIGHT')
  redis.call('DEL', head)
end

-- 3. deficit round robin: the tenant at the head gets its quantum once per visit
local released, stuck = 0, 0
while total < window do
  local n = redis.call('LLEN', tenants)
  if n == 0 or stuck >= n then
    break
  end
  local t = redis.call('LINDEX', tenants, 0)
  local b = nil
  if (in_tenant[t] or 0) < (caps[t] or tenant_window) then
    b = next_batch(t)
  end
  if b == 'empty' then
    redis.call('LPOP', tenants)
    redis.call('HDEL', deficit, t)
    redis.call('DEL', head)
  elseif b == nil then  -- capped: an idle turn, and no credit saved for later
    redis.call('HDEL', deficit, t)
    rotate(t)
    stuck = stuck + 1
  else
    if redis.call('GET', head) ~= t then
      redis.call('HINCRBY', deficit, t, quantum * (weights[t] or 1))
      redis.call('SET', head, t)
    end
    local entry = redis.call('LINDEX', P .. 'b:' .. b .. ':pending', 0)
    local first = string.find(entry, '\n', 1, true)
    local second = string.find(entry, '\n', first + 1, true)
    local cost = tonumber(string.sub(entry, first + 1, second - 1))
    if cost > tonumber(redis.call('HGET', deficit, t) or '0') then
      rotate(t)
    else
      redis.call('HINCRBY', deficit, t, -release(t, b))
      released = released + 1
      stuck = 0
    end
  end
end
return released
