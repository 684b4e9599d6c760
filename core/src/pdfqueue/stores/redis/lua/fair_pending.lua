-- Pending (registered, not yet released) process jobs of every tenant's active batches.
-- ARGV[1] is the key prefix. Returns the total.
local P = ARGV[1]
local total = 0
for _, t in ipairs(redis.call('LRANGE', P .. 'tenants', 0, -1)) do
  for _, b in ipairs(redis.call('LRANGE', P .. 't:' .. t, 0, -1)) do
    total = total + redis.call('LLEN', P .. 'b:' .. b .. ':pending')
  end
end
return total
