-- One sync of one ClientShare with Redis (http_resilience._fleet.redis_batch
-- documents the keys, the arguments and the answer).
local now = tonumber(ARGV[1])
local token = tonumber(ARGV[2])
local max_hosts = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local ratio = tonumber(ARGV[5])
local per_second = tonumber(ARGV[6])
local break_ms = tonumber(ARGV[7])
local nb = tonumber(ARGV[8])
local nops = tonumber(ARGV[9])
local nq = tonumber(ARGV[10])
local slack = tonumber(ARGV[11])
local replica = ARGV[12]
local seq = tonumber(ARGV[13])
local memory = tonumber(ARGV[14])
local longest_reset = tonumber(ARGV[15])
local FIRST = 16
local BUCKETS = 10
-- A break or a probe claim ends no later than this client's own break from
-- now, whatever a field says (a replica whose clock runs ahead, or a value
-- written by hand); a quota window no later than the local reader allows.
local last_break = now + break_ms
local last_reset = now + longest_reset

local function own(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', key) end
end

-- A hash grown past the bound (another program's fields) loses the excess at
-- random, once, so no sync reads more than `max_hosts` fields after it.
local function trim(key)
  local extra = redis.call('HLEN', key) - max_hosts
  while extra > 0 do
    local take = math.min(extra, 1000)
    local victims = redis.call('HRANDFIELD', key, take)
    if #victims == 0 then break end
    redis.call('HDEL', key, unpack(victims))
    extra = extra - #victims
  end
end

-- What this script writes: decimal digits only, at most 14 (Lua writes a
-- number of up to 14 digits exactly). tonumber alone would also take a sign,
-- hex, an exponent, 'inf' and 'nan': a field holding any of them is refused.
local function decimal(part)
  if #part > 14 or not string.find(part, '^%d+$') then return nil end
  return tonumber(part)
end

local function parse(value, count)
  if not value then return nil end
  local out = {}
  for part in string.gmatch(value, '[^,]+') do
    local n = decimal(part)
    if n == nil then return nil end
    out[#out + 1] = n
  end
  if count ~= nil and #out ~= count then return nil end
  return out
end

-- A breaker field, its break and claim bounded; whether bounding changed it.
local function breaker(value)
  local s = parse(value, 3)
  if s == nil then return nil, false end
  local changed = false
  if s[1] > last_break then s[1] = last_break; changed = true end
  if s[2] > last_break then s[2] = last_break; changed = true end
  return s, changed
end

-- A quota field (window end, allowance left), the window bounded; nil when
-- it does not parse or its window is over.
local function quota(value)
  local s = parse(value, 2)
  if s == nil or s[1] <= now then return nil end
  if s[1] > last_reset then s[1] = last_reset end
  return s
end

local function make_room(key, host)
  if redis.call('HEXISTS', key, host) == 0
      and redis.call('HLEN', key) >= max_hosts then
    local victim = redis.call('HRANDFIELD', key)
    if victim then redis.call('HDEL', key, victim) end
  end
end

-- A numbered batch this replica sent before and the script applied: not
-- applied again; answered with the leases granted then (`kept`). Only the
-- very batch remembered, recorded in the memory's span, is taken as one.
local kept = nil
if seq > 0 then
  own(KEYS[4])
  trim(KEYS[4])
  local m = parse(redis.call('HGET', KEYS[4], replica))
  if m ~= nil and #m >= 3 and m[1] == seq and m[2] <= now
      and m[2] + memory > now and #m >= 3 + m[3] then
    kept = m
  end
end

local grants = {}
if kept ~= nil then
  if window > 0 then
    for i = 0, nb - 1 do
      grants[#grants + 1] = ARGV[FIRST + i * 4]
      grants[#grants + 1] = i < kept[3] and kept[4 + i] or 0
    end
  end
elseif window > 0 and nb > 0 then
  own(KEYS[1])
  trim(KEYS[1])
  local width = window / BUCKETS
  local bucket = math.floor(now / width)
  local cap = per_second * window / 1000
  for i = 0, nb - 1 do
    local base = FIRST + i * 4
    local host = ARGV[base]
    local deposits = tonumber(ARGV[base + 1])
    local returned = tonumber(ARGV[base + 2])
    local want = tonumber(ARGV[base + 3])
    local raw = redis.call('HGET', KEYS[1], host)
    local s = parse(raw, 2 + 2 * BUCKETS)
    -- A bucket or a first sync in the future is not this fleet's count.
    if s ~= nil and (s[1] > bucket or s[2] > now) then s = nil end
    -- A field there that fails: this sync leases nothing and answers -1, so
    -- the replica's own budget decides until the next sync reads it afresh.
    local spoilt = raw and s == nil
    if s == nil then
      make_room(KEYS[1], host)
      s = {bucket, now - 1000}
      for j = 1, 2 * BUCKETS do s[#s + 1] = 0 end
    end
    local steps = bucket - s[1]
    if steps >= BUCKETS then
      for j = 3, 2 + 2 * BUCKETS do s[j] = 0 end
      s[1] = bucket
    elseif steps > 0 then
      for b = s[1] + 1, bucket do
        s[3 + b % BUCKETS] = 0
        s[3 + BUCKETS + b % BUCKETS] = 0
      end
      s[1] = bucket
    end
    local slot = s[1] % BUCKETS
    s[3 + slot] = s[3 + slot] + deposits
    local step = 0
    while returned > 0 and step < BUCKETS do
      local k = 3 + BUCKETS + (s[1] - step) % BUCKETS
      local take = math.min(returned, s[k])
      s[k] = s[k] - take
      returned = returned - take
      step = step + 1
    end
    local d, w = 0, 0
    for j = 0, BUCKETS - 1 do
      d = d + s[3 + j]
      w = w + s[3 + BUCKETS + j]
    end
    local floor = per_second * (now - s[2]) / 1000
    if floor > cap then floor = cap end
    local granted = math.floor(ratio * d + floor + 1e-9) - w
    if granted > want then granted = want end
    if granted < 0 or spoilt then granted = 0 end
    s[3 + BUCKETS + slot] = s[3 + BUCKETS + slot] + granted
    redis.call('HSET', KEYS[1], host, table.concat(s, ','))
    grants[#grants + 1] = host
    grants[#grants + 1] = spoilt and -1 or granted
  end
  redis.call('PEXPIRE', KEYS[1], 2 * window)
end

local view = {}
if break_ms > 0 then
  own(KEYS[2])
  trim(KEYS[2])
  for i = 0, nops - 1 do
    local base = FIRST + nb * 4 + i * 3
    local op, host, arg = ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2])
    local s = breaker(redis.call('HGET', KEYS[2], host))
    if op == 'o' then
      if arg > last_break then arg = last_break end
      make_room(KEYS[2], host)
      if s ~= nil and s[1] > arg then arg = s[1] end
      redis.call('HSET', KEYS[2], host, arg .. ',0,0')
    elseif op == 'c' then
      redis.call('HDEL', KEYS[2], host)
    elseif op == 'p' and s ~= nil and s[1] <= now and s[2] <= now then
      redis.call('HSET', KEYS[2], host,
        s[1] .. ',' .. (now + break_ms) .. ',' .. token)
    end
  end
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local s, changed = breaker(all[i + 1])
    if s == nil or (s[1] + break_ms < now and s[2] <= now) then
      redis.call('HDEL', KEYS[2], all[i])
    else
      if changed then
        redis.call('HSET', KEYS[2], all[i], table.concat(s, ','))
      end
      view[#view + 1] = all[i]
      view[#view + 1] = s[1]
      view[#view + 1] = s[2]
      view[#view + 1] = s[3] == token and 1 or 0
    end
  end
  if #all > 0 then redis.call('PEXPIRE', KEYS[2], 2 * break_ms + 1000) end
end

local quotas = {}
if kept ~= nil then
  for i = 0, nq - 1 do
    local host = ARGV[FIRST + nb * 4 + nops * 3 + i * 6]
    local s = quota(redis.call('HGET', KEYS[3], host))
    if s == nil then
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
    else
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = kept[4 + kept[3] + i] or 0
      quotas[#quotas + 1] = s[1]
      quotas[#quotas + 1] = s[2]
    end
  end
elseif nq > 0 then
  own(KEYS[3])
  trim(KEYS[3])
  local longest = 0
  for i = 0, nq - 1 do
    local base = FIRST + nb * 4 + nops * 3 + i * 6
    local host = ARGV[base]
    local seen = tonumber(ARGV[base + 1])
    local seen_reset = tonumber(ARGV[base + 2])
    local returned = tonumber(ARGV[base + 3])
    local unleased = tonumber(ARGV[base + 4])
    local want = tonumber(ARGV[base + 5])
    if seen_reset > last_reset then seen_reset = last_reset end
    local s = quota(redis.call('HGET', KEYS[3], host))
    if s ~= nil then s[2] = s[2] + returned end
    if seen >= 0 and seen_reset > now then
      if s == nil or seen_reset > s[1] + slack then
        make_room(KEYS[3], host)
        s = {seen_reset, seen}
      elseif seen < s[2] then
        s[2] = seen
      end
    end
    if s ~= nil then s[2] = math.max(s[2] - unleased, 0) end
    if s == nil then
      redis.call('HDEL', KEYS[3], host)
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
    else
      local granted = math.min(want, s[2])
      if granted < 0 then granted = 0 end
      s[2] = s[2] - granted
      redis.call('HSET', KEYS[3], host, s[1] .. ',' .. s[2])
      if s[1] > longest then longest = s[1] end
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = granted
      quotas[#quotas + 1] = s[1]
      quotas[#quotas + 1] = s[2]
    end
  end
  if longest > 0 then
    local ttl = longest - now + 1000
    if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
end

if seq > 0 and kept == nil then
  -- Remember this batch: its number, when, and the leases it granted (a
  -- lease refused for a spoilt field is remembered as none).
  local memo = {seq, now, #grants / 2}
  for i = 2, #grants, 2 do memo[#memo + 1] = math.max(grants[i], 0) end
  for i = 2, #quotas, 4 do memo[#memo + 1] = quotas[i] end
  make_room(KEYS[4], replica)
  redis.call('HSET', KEYS[4], replica, table.concat(memo, ','))
  -- Forget one replica at random if it has been quiet for the memory's span.
  local other = redis.call('HRANDFIELD', KEYS[4], 1, 'WITHVALUES')
  if other[1] ~= nil and other[1] ~= replica then
    local m = parse(other[2])
    if m == nil or #m < 2 or m[2] + memory <= now or m[2] > now + memory then
      redis.call('HDEL', KEYS[4], other[1])
    end
  end
  redis.call('PEXPIRE', KEYS[4], memory)
end
return {grants, view, quotas}
