-- limiter's policies for Redis and Valkey: limiter.core's steps in Lua, run by
-- EVALSHA for every check (limiter/backends/_wire.py loads this file and
-- speaks its language).  The grammar of its argument, reply and stored
-- values (_wire.py's, verbatim; tests/backends/test_redis_wire.py holds the two equal):
--
--   argv    = now " " costs policy { policy } ;  (* ARGV[1]: one policy per KEYS[i] *)
--   now     = "" | number ;                       (* "": the server's TIME *)
--   costs   = cost { "," cost } ;                 (* several: one per key *)
--   cost    = number                              (* a request *)
--           | "!" number                          (* a Charge: always admitted *)
--           | "-" number [ "@" number ]           (* a Refund of number; @ its taken_at *)
--           | ( "t" | "g" | "r" ) number ;        (* a Hold: take, give, renew; holder *)
--   policy  = " " number " " count                (* token bucket: rate burst *)
--           | " q" number "/" number " " count    (* quota: window start/end, count *)
--           | " w" number " " count               (* fixed window, epoch: period count *)
--           | " f" number " " count               (* fixed window, first request's *)
--           | " s" number " " count               (* sliding window: period count *)
--           | " c" number " " count               (* concurrency: lease limit *)
--           | " l" number "/" number " " count ;  (* lockout, last: within/duration *)
--   number  = Python float repr ;                 (* a cost at most 2^54: the stand-in *)
--   count   = decimal integer ;                   (* burst, count, breaches *)
--   reply   = result { " " result } ;             (* one per key, in KEYS order *)
--   result  = allowed " " remaining " " reset_after " " retry_after ;
--   allowed = "1" | "0" ;                         (* the other three: %d or %.17g *)
--   stored  = number " " number [ " " number ]    (* PX = ttl_ms(seconds); 3: sliding *)
--           | "c" number { " " number } ;         (* leases: holder expiry ..., until *)
--
-- limiter/core/ is the specification; each part below mirrors
-- one of its functions, computing the very same doubles, and
-- tests/backends/test_redis_store.py (test_redis_windows.py for the windows) feeds
-- both the same random sequences and compares the results bit for bit.
-- Change the two together.
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
--   epochwindow                        window.epoch_window
--   openwindow, countin                window.count_step (its reading of the
--                                      state, then its counting)
--   quota                              Quota.step (a Quota's window comes from
--                                      Python, see below)
--   fixed                              FixedWindow.step (bounds, _first)
--   slide, slid                        window.slide, _sliding_retry and
--                                      _sliding_result
--   lockstatus, breach                 lockout.lock_status, lockout.breach
--   readleases                         state.read_leases
--   live, slots                        concurrency._live, slot_step (with
--                                      _index and _slot_result)
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
-- * Windows (limiter.core.window's rules) come as "w<period> count" (a
--   FixedWindow aligned to the epoch), "f<period> count" (anchored at the
--   request that finds no window open) and "s<period> count" (a
--   SlidingWindow): the script finds the window from now itself, so now may
--   be the server's TIME.  A fixed window's state is a quota's; a sliding
--   window's is "previous current until" (PX: the time to until), the one
--   state of three numbers: a key of two read by a sliding window, or of
--   three by any other policy, is read as missing (another kind of policy
--   wrote it: the key starts afresh), as limiter.core.state's readers do.
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
-- * A Concurrency policy (limiter.core.concurrency's rules 1-7) comes as
--   "c<lease> limit"; its cost is a Hold, "t", "g" or "r" (take, give back,
--   renew) and the holder's text, anything else a peek (Python refuses a
--   plain cost above 0 first).  Its state is "c" then its leases, "holder
--   expiry" pairs in the order taken, then until: the last expiry, or now
--   when none is held (PX: the time to until).  A Hold sent to any other
--   policy is its value: a request of 1 (take), else a peek, as in step.
--   Beside other keys, a take that one of them refuses is a peek.
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
-- settled: always admitted), nil for a request; and a Refund's taken_at.  A
-- Hold: its value (1 to take, else 0), its letter and its holder's text.
local function readcost(text)
  local b = byte(text)
  if b == 33 then return tonumber(sub(text, 2)), '!' end
  if b == 45 then
    local at = find(text, '@', 2, true)
    if at then return tonumber(sub(text, 1, at - 1)), '-', tonumber(sub(text, at + 1)) end
    return tonumber(text), '-'
  end
  if b > 57 then
    if b == 116 then return 1.0, 't', sub(text, 2) end
    return 0.0, sub(text, 1, 1), sub(text, 2)
  end
  return tonumber(text), nil
end

-- Mirrors limiter.core.state.read_leases: a concurrency key's text (raw)
-- as 'c', its numbers' texts and the numbers (holder, expiry, ..., until).
local function readleases(key, raw)
  local texts, nums, k = {}, {}, 0
  for t in string.gmatch(sub(raw, 2), '%S+') do
    k = k + 1
    texts[k], nums[k] = t, tonumber(t)
    if nums[k] == nil then break end
  end
  if k % 2 == 0 or nums[k] == nil then
    return false, redis.error_reply('limiter: corrupt state in key ' .. key)
  end
  return 'c', texts, nums
end

-- Mirrors limiter.core.state: a key's two numbers d and u (and u's text us, so
-- that a write may keep it), or three (v: a sliding window's until); leases as
-- readleases gives them; nil for a new key; false and an error reply for a
-- corrupt state.
local function load(key)
  local raw = redis.call('GET', key)
  if raw then
    if byte(raw) == 99 then return readleases(key, raw) end
    local d, us = match(raw, '^(%S+) (%S+)$')
    local u, vs, v
    if d == nil then
      d, us, vs = match(raw, '^(%S+) (%S+) (%S+)$')
      v = tonumber(vs)
    end
    d, u = tonumber(d), tonumber(us)
    if d == nil or u == nil or (vs and v == nil) then
      return false, redis.error_reply('limiter: corrupt state in key ' .. key)
    end
    return d, u, us, v
  end
end

-- True when a state (d, and v: its third number) is not of the shape spec's
-- policy reads: three numbers are a sliding window's ("s"), and only its,
-- leases ('c') a concurrency policy's ("c"), and only its.  Such a key is
-- read as missing (limiter.core.state: another shape's state reads as
-- nothing, so the key starts afresh), and kept unless the step writes.
local function misfit(d, v, spec)
  local b = byte(spec)
  return (v ~= nil) ~= (b == 115) or (d == 'c') ~= (b == 99)
end

-- Mirrors limiter.core.state.keep_until: the key expires when the bucket is full
-- again.  Writes debt d anchored at the text at, or at now when at is nil
-- (full again in d seconds, or in px when given); returns d formatted.
-- A window's state is d and the text at (a sliding window's: two numbers);
-- leases are their whole text d (at unused).
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
  local ds, value
  if type(d) == 'string' then
    value = d
  else
    ds = format('%.17g', d)
    value = ds .. ' ' .. (at or nows)
  end
  if soft then
    redis.pcall('SET', key, value, 'PX', format('%d', ms))
  else
    redis.call('SET', key, value, 'PX', format('%d', ms))
  end
  return ds
end

-- int() in limiter.core.bucket.step: truncation toward zero.
local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

-- The steps of the policies that count units in a window (a quota, a fixed
-- or a sliding window), by their letter: built by the first key that needs
-- them, since the script's body runs on every call and a bucket's check
-- need not pay for making their closures.  Each takes what step takes.
local QSCALE, QUNSCALE = 2^-600, 2^600
local windowed
local function windowsteps()
  -- Mirrors limiter.core.window.epoch_window: the window [start, end) of
  -- period seconds holding m, k moved by one where rounding would miss m.
  local function epochwindow(m, period)
    local k = math.floor(m / period)
    local start = k * period
    if start > m then
      k = k - 1
      start = k * period
    end
    local wend = start + period
    if wend <= m then
      start = (k + 1) * period
      wend = start + period
    end
    return start, wend
  end

  -- Mirrors limiter.core.window.count_step's first half: a count's state d, u, us read with
  -- the current window [qstart, qend) (qend's text: endtext, nil to format it).
  -- Returns the units used, the end of the window they count in and its text
  -- (nil: to format), and the state to store (used scaled, and its end's text)
  -- when a clock stepped back, else nil.
  local function openwindow(d, u, us, qstart, qend, endtext)
    if d ~= nil and now + EPSILON < u then
      local used = d * QUNSCALE
      if u > qend then
        -- rule 6: the stored window's start, several windows ahead too
        local begins = u - (qend - qstart)
        if begins < qend then begins = qend end
        if now < begins - TOLERANCE then  -- a clock stepped back: keep the units
          return used, qend, endtext, used * QSCALE, endtext or format('%.17g', qend)
        end
      end
      return used, u, us  -- counted in its own window
    end
    return 0.0, qend, endtext
  end

  -- Mirrors limiter.core.window.count_step's second half: cost (mode '!' for a Charge;
  -- taken: a Refund's taken_at or nil) applied to used units of the window
  -- [start, qend) of count units (qend's text: endtext, nil to format it);
  -- write, at: a state to store whatever happens (or nil).  Returns what step
  -- returns, and the seconds until the written state's end (for PX).
  local function countin(write, at, used, start, qend, endtext, count, cost, mode, taken)
    local reset = qend - now
    local rem
    if cost <= 0 then
      if taken and taken + EPSILON < start then
        -- rule 4: taken in an earlier window, forgiven at its end: nothing to give
      elseif cost < 0 and used > 0 then  -- a refund: never below 0 used
        used = used + cost
        if used < 0.0 then used = 0.0 end
        write, at = used * QSCALE, endtext or format('%.17g', qend)
      end
      rem = trunc(count - used)
      if rem < 0 then rem = 0 end
      return write, at, 1, rem, reset, 0, reset
    end
    if mode == '!' then  -- rule 5: a charge, always taken, up to twice the count
      local most = 2.0 * count
      local after = used + cost
      if not (after <= most) then after = most end
      rem = trunc(count - after)
      if rem < 0 then rem = 0 end
      return after * QSCALE, endtext or format('%.17g', qend), 1, rem, reset, 0, reset
    end
    if cost <= count and used + cost <= count then
      local after = used + cost
      local at = endtext or format('%.17g', qend)
      return after * QSCALE, at, 1, trunc(count - after), reset, 0, reset
    end
    rem = trunc(count - used)
    if rem < 0 then rem = 0 end
    local retry = math.huge
    if cost <= count then retry = reset end
    return write, at, 0, rem, reset, retry, reset
  end

  -- Mirrors limiter.core.quota.Quota.step: d, u, us as for step (v unused);
  -- spec: "q<start>/<end>", the current window; the rest as countin takes them.
  local function quota(d, u, us, v, spec, count, cost, mode, taken)
    local starts, ends = match(spec, '^q([^/]+)/(%S+)$')
    local qstart = tonumber(starts)
    local used, qend, endtext, write, at = openwindow(d, u, us, qstart, tonumber(ends), ends)
    count = tonumber(count)
    return countin(write, at, used, qstart, qend, endtext, count, cost, mode, taken)
  end

  -- Mirrors limiter.core.window.FixedWindow.step: spec "w<period>", the window
  -- of the epoch-aligned ones holding now + epsilon (bounds), or "f<period>",
  -- the one the request that found none open started (_first); then countin.
  local function fixed(d, u, us, v, spec, count, cost, mode, taken)
    local period = tonumber(sub(spec, 2))
    local used, start, qend, endtext, write, at
    if byte(spec) == 119 then  -- "w"
      local qend0
      start, qend0 = epochwindow(now + EPSILON, period)
      used, qend, endtext, write, at = openwindow(d, u, us, start, qend0, nil)
    else
      used, start, qend = 0.0, now, now + period
      if d ~= nil and now + EPSILON < u then
        used = d * QUNSCALE
        start = u - period
        if start <= now + TOLERANCE then
          qend, endtext = u, us
        else  -- rule 6: a clock stepped back, the units moved to a window from now
          start, qend = now, now + period
          write, at = used * QSCALE, format('%.17g', qend)
        end
      end
    end
    return countin(write, at, used, start, qend, endtext, tonumber(count), cost, mode, taken)
  end

  -- Mirrors limiter.core.window._sliding_result: the reply's fields after slide,
  -- and the state to store when write (previous, then "current until" as at).
  local function slid(write, ok, previous, current, untl, weight, wend, count, period, retry)
    local rem = count - math.floor(previous * weight + current)
    if rem < 0 then rem = 0 end
    local reset = 0.0
    if current > 0.0 then
      reset = wend + period - now
    elseif previous > 0.0 then
      reset = wend - now
    end
    local at = nil
    if write then
      write, at = previous, format('%.17g %.17g', current, untl)
    end
    return write, at, ok, rem, reset, retry, untl - now
  end

  -- Mirrors limiter.core.window.slide (and _sliding_retry), operation for
  -- operation in its order: p, c, v, the stored previous, current and until
  -- (nil for a new key; us unused); spec "s<period>"; the rest as countin
  -- takes them.
  local function slide(p, c, us, v, spec, count, cost, mode, taken)
    local period = tonumber(sub(spec, 2))
    count = tonumber(count)
    if not mode and cost > count then cost = math.huge end  -- cost_or_inf
    local moment = now + EPSILON
    local start, wend = epochwindow(moment, period)  -- rule 1
    local untl = wend + period
    local previous, current, write = 0.0, 0.0, false
    if p ~= nil then
      local gap = start - (v - 2.0 * period)  -- whole periods, give or take rounding
      if gap < -0.5 * period then  -- the state's window is ahead of now (rule 6)
        previous, current = p, c
        if v - 2.0 * period - now > TOLERANCE then
          write = true  -- moved, stored even on denial
        else
          start, wend, untl = v - 2.0 * period, v - period, v
        end
      elseif gap < 0.5 * period then
        previous, current = p, c
      elseif gap < 1.5 * period then
        previous = c
      end
    end
    local weight = (wend - moment) / period
    if weight > 1.0 then weight = 1.0 end
    if cost < 0.0 then  -- rule 4: a Refund
      if taken == nil or taken + EPSILON >= start then
        if current > 0.0 then
          current = current + cost
          if current < 0.0 then current = 0.0 end
          write = true
        end
      elseif taken + EPSILON >= start - period and previous > 0.0 then
        previous = previous + cost
        if previous < 0.0 then previous = 0.0 end
        write = true
      end
      return slid(write, 1, previous, current, untl, weight, wend, count, period, 0)
    end
    local estimate = previous * weight + current
    if cost == 0.0 then
      return slid(write, 1, previous, current, untl, weight, wend, count, period, 0)
    end
    if mode == '!' then  -- rule 5
      current = current + cost
      local most = 2.0 * count
      if not (current <= most) then current = most end
    elseif math.floor(estimate) + cost <= count then  -- rule 2 (cost inf: never)
      current = current + cost
    else  -- _sliding_retry, then less now
      local retry = math.huge
      if cost <= count then  -- rule 3 (inf)
        local target = math.floor(count - cost) + 1.0
        if current < target and previous > 0.0 then
          retry = wend - (target - current) * period / previous
        elseif current > 0.0 then
          retry = wend + period - target * period / current
        else
          retry = wend
        end
      end
      retry = retry - now
      if not (retry > 0.0) then retry = 0.0 end
      return slid(write, 0, previous, current, untl, weight, wend, count, period, retry)
    end
    return slid(true, 1, previous, current, untl, weight, wend, count, period, 0)
  end

  return {[113] = quota, [119] = fixed, [102] = fixed, [115] = slide}  -- q w f s
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

-- Mirrors limiter.core.concurrency._live: the live leases of a key at now
-- (d 'c', texts and nums as readleases gives them; d nil: none), as four
-- lists (holders' texts and numbers, expiries and their texts: false for
-- now + lease, formatted at most once), their count, and whether any changed.
local function live(d, texts, nums, lease, latest)
  local hs, hn, es, ets, m, changed = {}, {}, {}, {}, 0, false
  if d == 'c' then
    for i = 1, #nums - 1, 2 do
      local expiry, et = nums[i + 1], texts[i + 1]
      if not (now < expiry) then  -- rule 2
        changed = true
      else
        if expiry - now > lease + TOLERANCE then  -- rule 6
          expiry, et, changed = latest, false, true
        end
        m = m + 1
        hs[m], hn[m], es[m], ets[m] = texts[i], nums[i], expiry, et
      end
    end
  end
  return hs, hn, es, ets, m, changed
end

-- Mirrors limiter.core.concurrency.slot_step (and _index, _slot_result),
-- operation for operation: d, texts, nums as live takes them; spec
-- "c<lease>"; mode 't', 'g' or 'r' (a Hold) and taken its holder's text,
-- else a peek.  Returns what step returns: the leases' text to store (nil:
-- unchanged), and the reply's fields, and the seconds to until for PX.
local function slots(d, texts, nums, spec, limit, mode, taken)
  local lease = tonumber(sub(spec, 2))
  limit = tonumber(limit)
  local latest = now + lease
  local hs, hn, es, ets, m, changed = live(d, texts, nums, lease, latest)
  local ok, held, holder = 1, 0, nil
  if mode == 't' or mode == 'g' or mode == 'r' then
    holder = tonumber(taken)
    for j = 1, m do
      if hn[j] == holder then held = j break end
    end
  end
  if holder == nil then  -- a peek: rule 5
  elseif mode == 'g' then  -- rule 3
    if held > 0 then
      for _, list in ipairs({hs, hn, es, ets}) do table.remove(list, held) end
      m, changed = m - 1, true
    else
      ok = 0
    end
  elseif held > 0 then  -- take or renew: rules 1 and 4
    es[held], ets[held], changed = latest, false, true
  elseif m < limit then
    m = m + 1
    hs[m], hn[m], es[m], ets[m], changed = taken, holder, latest, false, true
  else
    ok = 0
  end
  local first, last, lastj = math.huge, nil, 0
  for j = 1, m do
    local e = es[j]
    if last == nil or e > last then last, lastj = e, j end
    if e < first then first = e end
  end
  local write = nil
  if changed then
    local latests = nil
    local parts = {'c'}
    for j = 1, m do
      if not ets[j] then
        latests = latests or format('%.17g', latest)
        ets[j] = latests
      end
      parts[j + 1] = hs[j] .. ' ' .. ets[j] .. ' '
    end
    parts[m + 2] = (lastj > 0 and ets[lastj]) or nows
    write = table.concat(parts)
  end
  local rem, reset, retry = 0, 0.0, 0.0
  if m < limit then rem = limit - m end
  if last then reset = last - now end  -- rule 7
  if ok == 0 and mode ~= 'g' then retry = first - now end
  return write, nil, ok, rem, reset, retry, (last or now) - now
end

-- Mirrors limiter.core.bucket.step (and _settle for a Refund or a Charge, mode
-- '-' or '!'), which hands any other policy to its own step.  d, u, us: the
-- stored debt, updated_at and its text (nil for a new key); v: a sliding
-- window's third number; taken: a Refund's taken_at (a window's or a quota's
-- only).  Returns the debt to store (nil: nothing to store), its anchor (nil:
-- now, or us), and allowed, remaining, reset_after, retry_after (and PX's
-- seconds, for any policy but a bucket).
local function step(d, u, us, v, rate, burst, cost, mode, taken)
  local kind = byte(rate)
  if kind == 99 then return slots(d, u, us, rate, burst, mode, taken) end  -- "c"
  if mode and byte(mode) > 57 then mode, taken = nil, nil end  -- a Hold: its value
  if kind > 57 then  -- a letter, not a bucket rate's first digit
    if kind ~= 108 then  -- "q", "w", "f" or "s": a count in a window
      windowed = windowed or windowsteps()
      return windowed[kind](d, u, us, v, rate, burst, cost, mode, taken)
    end
    -- "l": a lockout alone reports its status, taking nothing
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
  local d, u, us, v = load(key)
  if d == false then return u end
  if d ~= nil and misfit(d, v, rate1) then d, u, us, v = nil, nil, nil, nil end
  local c, mode, taken = readcost(cost)
  return finish(key, step(d, u, us, v, rate1, burst1, c, mode, taken))
end

-- Mirrors limiter.core.many.step_all: all admit or none is charged, and a
-- lockout last (combine is Python's, on the replies).
local debts, stamps, texts, thirds, limits = {}, {}, {}, {}, {}
local i = 0
for rate, burst in string.gmatch(rest, '(%S+) (%S+)') do
  i = i + 1
  limits[i] = {rate, burst}
end
for i = 1, n do
  local d, u, us, v = load(KEYS[i])
  if d == false then return u end
  if d ~= nil and misfit(d, v, limits[i][1]) then d, u, us, v = nil, nil, nil, nil end
  debts[i], stamps[i], texts[i], thirds[i] = d, u, us, v
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
  local limit = limits[i]
  out[i] = {step(debts[i], stamps[i], texts[i], thirds[i], limit[1], limit[2], costs[i], modes[i], takens[i])}
  -- A give is never refused as a whole (step_all): each key's lease goes.
  if out[i][3] == 0 and modes[i] ~= 'g' then all = false end
end
denied = not all  -- locked out, or a limit refused: every write below is bookkeeping
for i = 1, m do
  local o = out[i]
  if not all and o[3] == 1 then
    o = {step(debts[i], stamps[i], texts[i], thirds[i], limits[i][1], limits[i][2], 0)}
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
