-- One ZSCAN step over KEYS[1] from cursor ARGV[1], keeping only the members that start with
-- ARGV[2]: a plain string comparison, so no character of the prefix can act as a glob.
-- ARGV[3] is the COUNT hint. Returns {next cursor, matching members}.
local page = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[3])
local prefix, items, found = ARGV[2], page[2], {}
for i = 1, #items, 2 do
    if string.sub(items[i], 1, #prefix) == prefix then
        found[#found + 1] = items[i]
    end
end
return {page[1], found}
