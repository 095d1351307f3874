-- limiter's token bucket for Redis and Valkey: limiter.bucket in Lua, run by
-- EVALSHA for every check (limiter/backends/redis.py loads this file and
-- sends it).  limiter/bucket.py is the specification; each part below mirrors
-- one of its functions, computing the very same doubles, and
-- tests/test_redis_store.py feeds both the same random sequences and compares
-- the results bit for bit.  Change the two together.
--
--   this file                          mirrors (limiter/bucket.py)
--   ARGV parsing, cost <= 2^54         validate_cost (done in Python first, see
--                                      redis.py's _cost_arg) and Limit.__post_init__
--   load / store (PX)                  State: complex(debt, updated_at); full_at
--   step                               step
--   trunc                              int() in step
--   the loop over several keys         step_all (the peeks on denial); combine
--                                      is applied to the replies in Python
--   quota                              step_quota (a Quota's window end comes
--                                      from Python, see below)
--
-- Two placeholders in capitals, in step, stand for limiter.bucket's time
-- epsilon and clock tolerance constants: redis.py substitutes their Python reprs when it loads this
-- file, so the text sent to Redis (and its SHA-1) carries the numbers.
--
-- The rules, as limiter.bucket's module docstring states them:
-- * State: "debt updated_at" (seconds, exact: %.17g, the caller's repr of
--   now, or the server's TIME as "seconds.microseconds"); a missing key is a
--   full bucket.  It is full again at updated_at + debt.
-- * now < updated_at - tolerance (limiter.bucket's clock tolerance, 1 s; a
--   clock stepped back): keep the debt, re-anchor at now, and store that even
--   on denial.  now < updated_at within the tolerance (read before a later
--   reading was applied): keep the debt and apply the request at updated_at
--   (the anchor below; a write keeps updated_at's stored text).  Otherwise
--   debt = max(0, debt - (now - updated_at)) and the anchor is now.
-- * debt above window + slack (state from a larger limit) becomes window,
--   re-anchored at the anchor and stored even on denial: never below 0 tokens.
-- * after = debt + cost * interval, or inf when cost > burst (never admitted,
--   however close); admitted when after <= window + slack, then (after
--   raised to 0 when a refund, a negative cost, made it negative)
--   state = (after, anchor) and remaining = trunc((window - after + slack) *
--   rate) clamped to burst.
-- * Denied, or cost 0: state unchanged (but for the re-anchoring above);
--   remaining = trunc((window - debt + slack) * rate) clamped to burst, and
--   retry_after = after - window (so inf when cost > burst).
-- * Several keys: all admit or none is charged; on denial the ones that would
--   have admitted are recomputed as peeks (cost 0).
-- * Every write sets PX to the time until the bucket is full again, so an
--   expired key is a full bucket and nothing needs sweeping.  A written state
--   is anchored at now, or at updated_at for a now just behind it.
-- * A calendar quota (limiter.bucket.step_quota) comes as "q<end> count" in
--   place of "rate burst": end is the end of the window holding now +
--   epsilon, which the client computes (time zones are beyond this script),
--   and now is then always the client's.  Its state is "used*2^-600 end", so
--   updated_at + debt is its end, and PX is the time left to that end.
-- KEYS: one per limit.  ARGV[1]: "now cost rate burst [rate burst ...]", one
-- rate and burst per key, Python reprs; now is empty to read the server's
-- TIME.  cost is at most 2^54: a larger one (even inf, which tonumber may not
-- read) is sent as 2^54, above every burst (<= 2^53), so its result is the
-- same.  (One argument: each one costs clients more to send than the match
-- below costs here.)  interval = 1 / rate, window = burst / rate and slack =
-- min(limiter.bucket's epsilon, 1e-3 / rate) are derived here as limiter.Limit
-- derives them: IEEE division is exact, so they are the very same doubles.
-- Returns one string (cheaper for clients to read than an array): per key
-- "allowed remaining reset_after retry_after", space-separated, floats as
-- %.17g since Redis would truncate Lua numbers to integers.  Formatting a
-- double is the costliest thing done here: no value is formatted twice.
local tonumber, format, match = tonumber, string.format, string.match
local n = #KEYS
local nows, cost, rate1, burst1, rest
if n == 1 then
  nows, cost, rate1, burst1 = match(ARGV[1], '^(%S*) (%S+) (%S+) (%S+)$')
else
  nows, cost, rest = match(ARGV[1], '^(%S*) (%S+) (.*)$')
end
local now
if nows == '' then
  -- Redis < 5 needs effects replication before writing after TIME (the default
  -- since 5; REDIS_VERSION_NUM exists since 7).
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
    pcall(redis.replicate_commands)
  end
  -- "seconds.microseconds" as text: read as now and stored as is, so no
  -- double is formatted for it (%.17g costs more than the TIME call).
  local t = redis.call('TIME')
  nows = t[1] .. '.' .. string.sub('00000' .. t[2], -6)
  now = tonumber(nows)
else
  -- A Python repr: tonumber reads back the very double, so it is stored as is.
  now = tonumber(nows)
end
cost = tonumber(cost)

-- Mirrors limiter.bucket.State.  The stored debt, updated_at and updated_at's
-- text (nil for a new key); false and an error reply for a corrupt state.
local function load(key)
  local raw = redis.call('GET', key)
  if raw then
    local d, us = match(raw, '^(%S+) (%S+)$')
    local u
    d, u = tonumber(d), tonumber(us)
    if d == nil or u == nil then
      return false, redis.error_reply('limiter: corrupt bucket state in key ' .. key)
    end
    return d, u, us
  end
end

-- Mirrors limiter.bucket.full_at: the key expires when the bucket is full
-- again.  Writes debt d anchored at the text at, or at now when at is nil
-- (full again in d seconds); returns d formatted.
local function store(key, d, at, px)
  local ms = math.ceil((px or d) * 1000)
  if ms < 1 then ms = 1 end
  if ms > 1e15 then ms = 1e15 end
  local ds = format('%.17g', d)
  redis.call('SET', key, ds .. ' ' .. (at or nows), 'PX', format('%d', ms))
  return ds
end

-- int() in limiter.bucket.step: truncation toward zero.
local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

-- Mirrors limiter.bucket.step_quota: d, u, us as for step; ends: the text of
-- the current window's end; count: the quota.  Returns what step returns,
-- and the seconds until the written state's end (for PX).
local QSCALE, QUNSCALE = 2^-600, 2^600
local function quota(d, u, us, ends, count, cost)
  count = tonumber(count)
  local qend, endtext = tonumber(ends), ends
  local used = 0.0
  local write, at = nil, nil
  if d ~= nil and now + EPSILON < u then
    used = d * QUNSCALE
    if u > qend and now < qend - TOLERANCE then
      write, at = d, ends  -- a clock stepped back: keep what was used
    else
      qend, endtext = u, us  -- counted in its own window
    end
  end
  local reset = qend - now
  local rem
  if cost <= 0 then
    if cost < 0 and used > 0 then  -- a refund: never below 0 used
      used = used + cost
      if used < 0.0 then used = 0.0 end
      write, at = used * QSCALE, endtext
    end
    rem = trunc(count - used)
    if rem < 0 then rem = 0 end
    return write, at, 1, rem, reset, 0, reset
  end
  if cost <= count and used + cost <= count then
    local after = used + cost
    return after * QSCALE, endtext, 1, trunc(count - after), reset, 0, reset
  end
  rem = trunc(count - used)
  if rem < 0 then rem = 0 end
  local retry = math.huge
  if cost <= count then retry = reset end
  return write, at, 0, rem, reset, retry, reset
end

-- Mirrors limiter.bucket.step.
-- d, u, us: the stored debt, updated_at and its text (nil for a new key).
-- Returns the debt to store (nil: nothing to store), its anchor (nil: now, or
-- us), and allowed, remaining, reset_after, retry_after.
local function step(d, u, us, rate, burst, cost)
  if string.byte(rate) == 113 then  -- "q": a quota
    return quota(d, u, us, string.sub(rate, 2), burst, cost)
  end
  rate, burst = tonumber(rate), tonumber(burst)
  local window = burst / rate
  local slack = 1e-3 / rate
  if slack > EPSILON then slack = EPSILON end
  local write, at = nil, nil
  local debt
  if d == nil then
    debt = 0.0
  elseif now < u then
    debt = d
    if now < u - TOLERANCE then
      write = d  -- a clock stepped back: re-anchored at now
    else
      at = us  -- read before a later reading was applied: applied at u
    end
  else
    debt = d - (now - u)
    if debt < 0.0 then debt = 0.0 end
  end
  if debt > window + slack then
    debt = window
    write = window
  end
  local after = math.huge
  if cost <= burst then after = debt + cost * (1 / rate) end
  local remaining
  if after <= window + slack then
    if after < 0.0 then after = 0.0 end  -- a refund: never more than burst
    remaining = trunc((window - after + slack) * rate)
    if remaining > burst then remaining = burst end
    if cost == 0 then return write, at, 1, remaining, debt, 0 end
    return after, at, 1, remaining, after, 0
  end
  remaining = trunc((window - debt + slack) * rate)
  if remaining > burst then remaining = burst end
  return write, at, 0, remaining, debt, after - window
end

-- Stores what step returned and formats the reply: reset_after is the stored
-- debt when charged, so its text is reused.
local function finish(key, write, at, ok, rem, reset, retry, px)
  local ds
  if write then ds = store(key, write, at, px) end
  if rem >= 2^53 or rem <= -2^53 then  -- beyond %d's exact range
    return format('%d %.17g %.17g %.17g', ok, rem, reset, retry)
  end
  if ok == 0 then return format('0 %d %.17g %.17g', rem, reset, retry) end
  if ds and write == reset then return format('1 %d %s 0', rem, ds) end
  return format('1 %d %.17g 0', rem, reset)
end

if n == 1 then
  local key = KEYS[1]
  local d, u, us = load(key)
  if d == false then return u end
  return finish(key, step(d, u, us, rate1, burst1, cost))
end

-- Mirrors limiter.bucket.step_all: all admit or none is charged (combine is
-- Python's, on the replies).
local debts, stamps, texts, limits = {}, {}, {}, {}
for i = 1, n do
  local d, u, us = load(KEYS[i])
  if d == false then return u end
  debts[i], stamps[i], texts[i] = d, u, us
end
local i = 0
for rate, burst in string.gmatch(rest, '(%S+) (%S+)') do
  i = i + 1
  limits[i] = {rate, burst}
end
local out = {}
local all = true
for i = 1, n do
  out[i] = {step(debts[i], stamps[i], texts[i], limits[i][1], limits[i][2], cost)}
  if out[i][3] == 0 then all = false end
end
local parts = {}
for i = 1, n do
  local o = out[i]
  if not all and o[3] == 1 then
    o = {step(debts[i], stamps[i], texts[i], limits[i][1], limits[i][2], 0)}
  end
  parts[i] = finish(KEYS[i], o[1], o[2], o[3], o[4], o[5], o[6], o[7])
end
return table.concat(parts, ' ')
