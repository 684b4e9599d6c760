-- Drop a batch's pending work (cancellation); the dispatcher forgets the batch when it next
-- meets it. ARGV: key prefix, batch id. Returns how many jobs were dropped.
local pending = ARGV[1] .. 'b:' .. ARGV[2] .. ':pending'
local n = redis.call('LLEN', pending)
redis.call('DEL', pending)
return n
