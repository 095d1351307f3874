-- limiter's token bucket for Redis and Valkey: limiter.core.bucket in Lua, run by
-- EVALSHA for every check (limiter/backends/redis/_wire.py loads this file and
-- speaks its language).  The grammar of its argument, reply and stored
-- values (_wire.py's, verbatim; tests/backends/test_redis_wire.py holds the two equal):
--
--   argv    = now " " costs policy { policy } ;  (* ARGV[1]: one policy per KEYS[i] *)
--   now     = "" | number ;                       (* "": the server's TIME *)
--   costs   = cost { "," cost } ;                 (* several: one per key *)
--   cost    = number                              (* a request *)
--           | "!" number                          (* a Charge: always admitted *)
--           | "-" number [ "@" number ] ;         (* a Refund of number; @ its taken_at *)
--   policy  = " " number " " count                (* token bucket: rate burst *)
--           | " q" number "/" number " " count    (* quota: window start/end, count *)
--           | " l" number "/" number " " count ;  (* lockout, last: within/duration *)
--   number  = Python float repr ;                 (* a cost at most 2^54: the stand-in *)
--   count   = decimal integer ;                   (* burst, count, breaches *)
--   reply   = result { " " result } ;             (* one per key, in KEYS order *)
--   result  = allowed " " remaining " " reset_after " " retry_after ;
--   allowed = "1" | "0" ;                         (* the other three: %d or %.17g *)
--   stored  = number " " number ;                 (* each key: PX = ttl_ms(seconds) *)
--
-- limiter/core/ is the specification; each part below mirrors
-- one of its functions, computing the very same doubles, and
-- tests/backends/test_redis_store.py feeds both the same random sequences and compares
-- the results bit for bit.  Change the two together.
--
--   this file                          mirrors (limiter/core/)
--   ARGV parsing, cost <= 2^54         validate_cost / validate_costs (done in
--                                      Python first, see _wire.cost_text)
--                                      and Limit.__post_init__
--   load / store (PX)                  State: complex(debt, updated_at); full_at
--   step                               step, and _settle for a Refund or a Charge
--   trunc                              int() in step
--   the loop over several keys         step_all (the peeks on denial, the
--                                      lockout last); combine is applied to
--                                      the replies in Python
--   quota                              step_quota / _apply_quota (a Quota's
--                                      window comes from Python, see below)
--   lockstatus, breach                 _lock_status, _breach
--
-- Two placeholders in capitals, in the code below, stand for limiter.core.bucket's
-- time epsilon and clock tolerance constants: _wire.py substitutes their
-- Python reprs when it loads this file, so the text sent to Redis (and its
-- SHA-1) carries the numbers.
--
-- The rules, as limiter.core.bucket's module docstring and step_all state them:
-- * State: "debt updated_at" (seconds, exact: %.17g, the caller's repr of
--   now, or the server's TIME as "seconds.microseconds"); a missing key is a
--   full bucket.  It is full again at updated_at + debt.
-- * now < updated_at - tolerance (limiter.core.bucket's clock tolerance, 1 s; a
--   clock stepped back): keep the debt, re-anchor at now, and store that even
--   on denial.  now < updated_at within the tolerance (read before a later
--   reading was applied): keep the debt and apply the request at updated_at
--   (the anchor below; a write keeps updated_at's stored text).  Otherwise
--   debt = max(0, debt - (now - updated_at)) and the anchor is now.
-- * A bucket owes at most one burst: a debt above max_debt = 2 * window (a
--   state from a larger limit) becomes max_debt, re-anchored at the anchor
--   and stored even on denial.
-- * A request: after = debt + cost * interval, or inf when cost > burst
--   (never admitted, however close); admitted when after <= window + slack,
--   then state = (after, anchor) and remaining = trunc((window - after +
--   slack) * rate) clamped to burst.  Denied, or cost 0: state unchanged
--   (but for the re-anchoring and the clamp above); remaining = trunc((window
--   - debt + slack) * rate) clamped to 0..burst (a bucket in debt has none),
--   and retry_after = after - window (so inf when cost > burst).
-- * A Refund (a negative cost) or a Charge is settled: always admitted.
--   after = debt + cost * interval, floored at 0 (a bucket holds at most its
--   burst) and capped at max_debt; a charge of 2 * burst or more (the 2^54
--   stand-in included) is max_debt itself; cost 0 takes nothing.  remaining
--   as for a request, clamped to 0..burst.  A peek (cost 0) of a bucket in
--   debt (above window + slack) is settled the same way: admitted, taking
--   nothing (denied, it would count as a lockout's breach).
-- * Several keys: all admit or none is charged; on denial the ones that would
--   have admitted are recomputed as peeks (cost 0).
-- * Every write sets PX to the time until the bucket is full again, so an
--   expired key is a full bucket and nothing needs sweeping; never less than
--   the clock tolerance (FLOOR), so that a reading that late still finds the
--   state step would read.  A written state is anchored at now, or at
--   updated_at for a now just behind it.
-- * A calendar quota (limiter.core.quota.step_quota) comes as
--   "q<start>/<end> count" in place of "rate burst": the window holding now +
--   epsilon, which the client computes (time zones are beyond this script),
--   and now is then always the client's.  Its state is "used*2^-600 end", so
--   updated_at + debt is its end, and PX is the time left to that end.  A
--   Charge adds to used unconditionally, at most 2 * count.  A Refund with a
--   taken_at (+ epsilon) before start gives nothing back: its units were
--   forgiven at the boundary.
-- * A lockout (limiter.core.lockout.Lockout) comes as "l<within>/<duration>
--   breaches", only ever as the last key (alone, it reports its status and
--   takes nothing).  Its state is "breaches*2^-600 run_end" for an open run
--   of breaches or "-2^-600 until" when locked out (PX: the time to that
--   end).  Locked (now + epsilon < until): every other key is peeked, nothing
--   is taken or counted, and its reply refuses with retry_after = until - now
--   (an until more than duration + tolerance ahead is brought back to now +
--   duration, and stored).  Otherwise the other keys decide; a denial is a
--   breach: it opens a run until now + within, or counts in the open one
--   (now < run_end; an end more than within + tolerance ahead is brought back
--   to now + within), and the breaches-th breach of a run locks the key until
--   now + duration, that very reply already refusing.  Its reply is 4 fields
--   like any key's: "0 0 left left" locked out, else "1 breaches_left 0 0".
-- KEYS: one per limit; ARGV[1]: argv above (the lockout's cost is ignored).
-- A cost is at most 2^54: a larger one (even inf, which tonumber may not
-- read) is sent as 2^54, above every burst (<= 2^53) and at least twice
-- every burst, so its result is the same.  (One argument: each one costs
-- clients more to send than the match below costs here.)
-- interval = 1 / rate, window = burst / rate and slack = min(limiter.core.bucket's
-- epsilon, 1e-3 / rate) are derived here as limiter.Limit derives them: IEEE
-- division is exact, so they are the very same doubles.
-- Returns one string (cheaper for clients to read than an array): per key
-- "allowed remaining reset_after retry_after", space-separated, floats as
-- %.17g since Redis would truncate Lua numbers to integers.  Formatting a
-- double is the costliest thing done here: no value is formatted twice.
local tonumber, format, match, byte, sub, find = tonumber, string.format, string.match, string.byte, string.sub, string.find
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

-- One cost's text: the number, and '!' for a Charge or '-' for a Refund (both
-- settled: always admitted), nil for a request; and a Refund's taken_at.
local function readcost(text)
  local b = byte(text)
  if b == 33 then return tonumber(sub(text, 2)), '!' end
  if b == 45 then
    local at = find(text, '@', 2, true)
    if at then return tonumber(sub(text, 1, at - 1)), '-', tonumber(sub(text, at + 1)) end
    return tonumber(text), '-'
  end
  return tonumber(text), nil
end

-- Mirrors limiter.core.state (the bucket's state).  The stored debt, updated_at and updated_at's
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

-- Mirrors limiter.core.state.keep_until: the key expires when the bucket is full
-- again.  Writes debt d anchored at the text at, or at now when at is nil
-- (full again in d seconds, or in px when given); returns d formatted.
-- A denial's bookkeeping (soft: a lockout's breach, a re-anchoring) is
-- written with pcall: a full Redis (maxmemory with noeviction refuses every
-- SET with OOM) must not turn a denial into an error, which on_error="allow"
-- would let through.  The denial stands, unrecorded.  An admission's write
-- is no bookkeeping: it fails the call (the units cannot be taken).
local denied = false
local FLOOR = math.ceil(TOLERANCE * 1000)  -- _wire.ttl_ms
local function store(key, d, at, px, soft)
  local ms = math.ceil((px or d) * 1000)
  if ms < FLOOR then ms = FLOOR end
  if ms > 1e15 then ms = 1e15 end
  local ds = format('%.17g', d)
  if soft then
    redis.pcall('SET', key, ds .. ' ' .. (at or nows), 'PX', format('%d', ms))
  else
    redis.call('SET', key, ds .. ' ' .. (at or nows), 'PX', format('%d', ms))
  end
  return ds
end

-- int() in limiter.core.bucket.step: truncation toward zero.
local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

-- Mirrors limiter.core.quota.step_quota (_apply_quota): d, u, us as for step;
-- spec: "q<start>/<end>", the current window; count: the quota; mode: '!'
-- for a Charge; taken: a Refund's taken_at (or nil).  Returns what step
-- returns, and the seconds until the written state's end (for PX).
local QSCALE, QUNSCALE = 2^-600, 2^600
local function quota(d, u, us, spec, count, cost, mode, taken)
  local starts, ends = match(spec, '^q([^/]+)/(%S+)$')
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
    if taken and taken + EPSILON < tonumber(starts) then
      -- taken in an earlier window, forgiven at its end: nothing to give
    elseif cost < 0 and used > 0 then  -- a refund: never below 0 used
      used = used + cost
      if used < 0.0 then used = 0.0 end
      write, at = used * QSCALE, endtext
    end
    rem = trunc(count - used)
    if rem < 0 then rem = 0 end
    return write, at, 1, rem, reset, 0, reset
  end
  if mode == '!' then  -- a charge: always taken, up to twice the count
    local most = 2.0 * count
    local after = used + cost
    if not (after <= most) then after = most end
    rem = trunc(count - after)
    if rem < 0 then rem = 0 end
    return after * QSCALE, endtext, 1, rem, reset, 0, reset
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

-- Mirrors limiter.core.lockout.lock_status.  spec: "l<within>/<duration>".
-- Returns the state to store (mark, and its until as text; nil: nothing),
-- allowed (0: locked out), remaining, the seconds left of the lockout, and
-- the open run's breaches and end (0 and -inf when none).
local LOCKED = -(2^-600)
local function lockstatus(d, u, spec, breaches)
  local duration = tonumber(match(spec, '/(%S+)$'))
  local count, runend = 0.0, -math.huge
  if d ~= nil then
    if d < 0 then
      if now + EPSILON < u then
        local write, at = nil, nil
        if u - now > duration + TOLERANCE then
          u = now + duration  -- a clock stepped back: at most duration
          write, at = LOCKED, format('%.17g', u)
        end
        local left = u - now
        return write, at, 0, 0, left, count, runend
      end
    elseif now < u then
      count, runend = d * QUNSCALE, u
    end
  end
  local rem = trunc(tonumber(breaches) - count)
  if rem < 0 then rem = 0 end  -- a run counted under a larger breaches
  return nil, nil, 1, rem, 0, count, runend
end

-- Mirrors limiter.core.lockout.breach: the lockout's state and reply after a
-- denial, as finish takes them (PX: the time to the run's or lockout's end).
local function breach(count, runend, spec, breaches)
  local within, duration = match(spec, '^l(%S+)/(%S+)$')
  within, duration, breaches = tonumber(within), tonumber(duration), tonumber(breaches)
  if count == 0 then
    runend = now + within  -- the first breach opens a run
  elseif runend - now > within + TOLERANCE then
    runend = now + within  -- a clock stepped back: at most within
  end
  count = count + 1
  if count >= breaches then
    local untl = now + duration
    local left = untl - now
    return LOCKED, format('%.17g', untl), 0, 0, left, left, left
  end
  return count * QSCALE, format('%.17g', runend), 1, trunc(breaches - count), 0, 0, runend - now
end

-- Mirrors limiter.core.bucket.step (and _settle for a Refund or a Charge, mode
-- '-' or '!').  d, u, us: the stored debt, updated_at and its text (nil for a
-- new key); taken: a Refund's taken_at (a quota's only).  Returns the debt
-- to store (nil: nothing to store), its anchor (nil: now, or us), and
-- allowed, remaining, reset_after, retry_after (and PX's seconds, for a
-- quota or a lockout).
local function step(d, u, us, rate, burst, cost, mode, taken)
  local kind = byte(rate)
  if kind == 113 then  -- "q": a quota
    return quota(d, u, us, rate, burst, cost, mode, taken)
  end
  if kind == 108 then  -- "l": a lockout alone reports its status, taking nothing
    local write, at, ok, rem, left = lockstatus(d, u, rate, burst)
    return write, at, ok, rem, left, left, left
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
  local most = window * 2.0
  if debt > most then  -- never more than one burst owed (a state from a larger limit)
    debt = most
    write = most
  end
  local remaining
  if mode or (cost == 0 and debt > window + slack) then
    -- A Refund or a Charge (limiter.core.bucket._settle), or a peek of a bucket in
    -- debt (settled as cost 0): always admitted.
    local after = debt
    if cost ~= 0 then
      if cost >= 2.0 * burst then
        after = most  -- inf, or at least the bound (the 2^54 stand-in)
      else
        after = debt + cost * (1 / rate)
        if after < 0.0 then after = 0.0 elseif after > most then after = most end
      end
      write = after
    end
    remaining = trunc((window - after + slack) * rate)
    if remaining > burst then remaining = burst elseif remaining < 0 then remaining = 0 end
    return write, at, 1, remaining, after, 0
  end
  local after = math.huge
  if cost <= burst then after = debt + cost * (1 / rate) end
  if after <= window + slack then
    remaining = trunc((window - after + slack) * rate)
    if remaining > burst then remaining = burst end
    if cost == 0 then return write, at, 1, remaining, debt, 0 end
    return after, at, 1, remaining, after, 0
  end
  remaining = trunc((window - debt + slack) * rate)
  if remaining > burst then remaining = burst elseif remaining < 0 then remaining = 0 end
  return write, at, 0, remaining, debt, after - window
end

-- Stores what step returned and formats the reply: reset_after is the stored
-- debt when charged, so its text is reused.
local function finish(key, write, at, ok, rem, reset, retry, px)
  local ds
  if write then ds = store(key, write, at, px, denied or ok == 0) end
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
  local c, mode, taken = readcost(cost)
  return finish(key, step(d, u, us, rate1, burst1, c, mode, taken))
end

-- Mirrors limiter.core.many.step_all: all admit or none is charged, and a
-- lockout last (combine is Python's, on the replies).
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
local costs, modes, takens = {}, {}, {}
if find(cost, ',', 1, true) then  -- one cost per key
  local j = 0
  for c in string.gmatch(cost, '[^,]+') do
    j = j + 1
    costs[j], modes[j], takens[j] = readcost(c)
  end
  if j ~= n then
    return redis.error_reply('limiter: ' .. j .. ' costs for ' .. n .. ' keys')
  end
else
  local c, mode, taken = readcost(cost)
  for j = 1, n do costs[j], modes[j], takens[j] = c, mode, taken end
end
local m, lock, locked = n, nil, false
local parts = {}
if byte(limits[n][1]) == 108 then
  -- A lockout last: while it holds, every limit is stepped with its cost
  -- (a denial's retry_after counts, in Python's combine) but nothing is
  -- taken or counted: as when a limit denies.
  m = n - 1
  lock = {lockstatus(debts[n], stamps[n], limits[n][1], limits[n][2])}
  locked = lock[3] == 0
end
local out = {}
local all = not locked
for i = 1, m do
  out[i] = {step(debts[i], stamps[i], texts[i], limits[i][1], limits[i][2], costs[i], modes[i], takens[i])}
  if out[i][3] == 0 then all = false end
end
denied = not all  -- locked out, or a limit refused: every write below is bookkeeping
for i = 1, m do
  local o = out[i]
  if not all and o[3] == 1 then
    o = {step(debts[i], stamps[i], texts[i], limits[i][1], limits[i][2], 0)}
  end
  parts[i] = finish(KEYS[i], o[1], o[2], o[3], o[4], o[5], o[6], o[7])
end
if lock then
  if locked then
    parts[n] = finish(KEYS[n], lock[1], lock[2], 0, 0, lock[5], lock[5], lock[5])
  elseif all then
    parts[n] = finish(KEYS[n], nil, nil, 1, lock[4], 0, 0)
  else  -- a denial is a breach
    parts[n] = finish(KEYS[n], breach(lock[6], lock[7], limits[n][1], limits[n][2]))
  end
end
return table.concat(parts, ' ')
