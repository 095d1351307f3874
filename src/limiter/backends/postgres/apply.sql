-- limiter's policies for PostgreSQL: limiter.core in PL/pgSQL, one call per
-- check (limiter/backends/postgres/_sql.py loads this file).  It is
-- limiter/backends/redis/bucket.lua translated operation for operation, in
-- double precision (IEEE 754, as Lua's numbers and Python's floats), so that
-- every result and every stored number is bit for bit the Python core's;
-- tests/backends/test_postgres_store.py holds them equal.  Change the three
-- together.  The argument and the reply are bucket.lua's (the grammar in
-- limiter/backends/_wire.py's docstring): APPLY(keys, argv) returns
-- "allowed remaining reset_after retry_after" per key.
--
--   this file        mirrors (bucket.lua / limiter/core/)
--   STEP             readcost, step and windowsteps (epochwindow,
--                    openwindow, countin, quota, fixed, slide, slid) /
--                    limiter.core.bucket.step, _settle, limiter.core.window
--   LOCKSTATUS       lockstatus / limiter.core.lockout.lock_status
--   BREACH           breach / limiter.core.lockout.breach
--   APPLY            load, misfit, finish and the main chunk /
--                    limiter.core.state.to_row, keep_until, limiter.core.many.step_all
--   MUL, DIV         x * y, x / y as IEEE computes them (PostgreSQL raises on
--                    underflow and overflow): called only where the operands
--                    may be that small or large, behind a CASE.
--
-- Speed: PL/pgSQL prepares each expression anew in every transaction (about
-- 0.3 us each), and every check is its own transaction; so the hot path
-- evaluates as few expressions as it can (several tests in one CASE, LEAST
-- and GREATEST for the clamps: they keep their first argument on a tie, as
-- Lua's "if x > y then x = y" does, and no NaN ever reaches them), and a
-- check of one key calls one other function (STEP), no more.
--
-- State rows: (key, a, b, c, keep_until) = limiter.core.state.to_row(state)
-- and keep_until(state) (a + b, or c for a sliding window's three numbers).
-- A missing row is a key never seen.  The keys of a call are locked
-- (transaction-scoped advisory locks, in one global order, so that two calls
-- never deadlock) before they are read: a new key has no row to lock.
-- Writes are an UPDATE, or an INSERT when there is no row (a new key, or a
-- sweep deleted it meanwhile).  now is read after the locks.
--
-- Numbers are formatted by float8out, which writes the shortest text that
-- reads back as the same double (Python's repr) whenever extra_float_digits
-- is at least 1, PostgreSQL's default since 12: APPLY sets it for the
-- transaction only when a session lowered it.
--
-- Placeholders @LIKE_THIS@ are replaced by _sql.py: the qualified names of
-- the table and of each function, EPSILON and TOLERANCE (limiter.core's time
-- epsilon and clock tolerance, as Python reprs), LOCKCLASS (the advisory
-- lock space), QSCALE, QUNSCALE and LOCKED (2^-600, 2^600, -2^-600).

CREATE OR REPLACE FUNCTION @MUL@(x float8, y float8) RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN x * y;
EXCEPTION WHEN numeric_value_out_of_range THEN
  -- Callers never multiply what may overflow: an underflow, whose IEEE
  -- result is a zero of the product's sign.
  IF (x < 0) <> (y < 0) THEN RETURN '-0'::float8; END IF;
  RETURN 0::float8;
END
$fn$;

CREATE OR REPLACE FUNCTION @DIV@(x float8, y float8) RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN x / y;
EXCEPTION WHEN numeric_value_out_of_range THEN
  -- y is never 0 here: an overflow (IEEE: an infinity) or an underflow (a
  -- zero), of the quotient's sign.
  IF abs(x) > abs(y) THEN
    IF (x < 0) <> (y < 0) THEN RETURN '-Infinity'::float8; END IF;
    RETURN 'Infinity'::float8;
  END IF;
  IF (x < 0) <> (y < 0) THEN RETURN '-0'::float8; END IF;
  RETURN 0::float8;
END
$fn$;

-- [a, b, allowed, remaining, left, left, breaches, run_end]: the state to
-- write (a NULL: nothing), allowed 0 while locked out (left: the seconds of
-- it), and the open run's breaches and end (0 and -Infinity when none).
CREATE OR REPLACE FUNCTION @LOCKSTATUS@(
  d float8, u float8, tnow float8, spec text, breachestext text
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  duration float8 := substr(spec, strpos(spec, '/') + 1)::float8;
  cnt float8 := 0.0;
  runend float8 := '-Infinity';
  wa float8;
  wb float8;
  lft float8;
  rem float8;
BEGIN
  IF d IS NOT NULL THEN
    IF d < 0 THEN
      IF tnow + @EPSILON@ < u THEN
        IF u - tnow > duration + @TOLERANCE@ THEN
          u := tnow + duration;  -- a clock stepped back: at most duration
          wa := @LOCKED@; wb := u;
        END IF;
        lft := u - tnow;
        RETURN ARRAY[wa, wb, 0, 0, lft, lft, cnt, runend];
      END IF;
    ELSIF tnow < u THEN
      cnt := d * @QUNSCALE@; runend := u;
    END IF;
  END IF;
  rem := trunc(breachestext::float8 - cnt);
  IF rem < 0 THEN rem := 0; END IF;  -- a run counted under a larger breaches
  RETURN ARRAY[NULL, NULL, 1, rem, 0, 0, cnt, runend];
END
$fn$;

-- [a, b, NULL, allowed, remaining, reset_after, retry_after] after a denial.
CREATE OR REPLACE FUNCTION @BREACH@(
  cnt float8, runend float8, tnow float8, spec text, breachestext text
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  slash int := strpos(spec, '/');
  wthn float8 := substr(spec, 2, slash - 2)::float8;
  duration float8 := substr(spec, slash + 1)::float8;
  breaches float8 := breachestext::float8;
  untl float8;
  lft float8;
BEGIN
  IF cnt = 0 THEN
    runend := tnow + wthn;  -- the first breach opens a run
  ELSIF runend - tnow > wthn + @TOLERANCE@ THEN
    runend := tnow + wthn;  -- a clock stepped back: at most within
  END IF;
  cnt := cnt + 1;
  IF cnt >= breaches THEN
    untl := tnow + duration;
    lft := untl - tnow;
    RETURN ARRAY[@LOCKED@, untl, NULL, 0, 0, lft, lft];
  END IF;
  RETURN ARRAY[cnt * @QSCALE@, runend, NULL, 1, trunc(breaches - cnt), 0, 0];
END
$fn$;

-- One key's step: d, u, v its row's a, b, c (NULL: a new key); the cost and
-- the policy as the grammar writes them.  Returns [a, b, c, allowed,
-- remaining, reset_after, retry_after]: the state to write (a NULL:
-- nothing; c NULL but for a sliding window) and the reply's four numbers.
CREATE OR REPLACE FUNCTION @STEP@(
  d float8, u float8, v float8, tnow float8, costtext text, spec text, counttext text
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  kind int := ascii(spec);
  cost float8;
  mode int;  -- readcost: NULL for a request, 1 for a Charge ("!"), 2 for a Refund ("-")
  taken float8;
  pos int;
  rate float8;
  burst float8;
  win float8;
  slack float8;
  debt float8;
  most float8;
  after float8;
  remaining float8;
  wa float8;
  wb float8 := tnow;
  wc float8;
  r float8[];
  -- the windows'
  period float8;
  cnt float8;
  moment float8;
  k float8;
  qstart float8;
  qend float8;
  begins float8;
  used float8 := 0.0;
  rst float8;
  retry float8 := 0.0;
  ok float8 := 1;
  untl float8;
  gap float8;
  previous float8 := 0.0;
  current float8 := 0.0;
  weight float8;
  estimate float8;
  target float8;
BEGIN
  IF ascii(costtext) IN (33, 45) THEN  -- readcost: "!" or "-"
    IF ascii(costtext) = 33 THEN
      mode := 1; cost := substr(costtext, 2)::float8;
    ELSE
      mode := 2; pos := strpos(costtext, '@');
      IF pos > 0 THEN
        cost := left(costtext, pos - 1)::float8; taken := substr(costtext, pos + 1)::float8;
      ELSE
        cost := costtext::float8;
      END IF;
    END IF;
  ELSE
    cost := costtext::float8;
  END IF;

  IF kind <= 57 THEN
    -- step: a token bucket (a rate's first character is a digit).
    rate := spec::float8;
    burst := counttext::float8;
    win := burst / rate;
    slack := LEAST(1e-3 / rate, @EPSILON@);
    IF d IS NOT NULL AND tnow < u THEN
      debt := d;
      IF tnow < u - @TOLERANCE@ THEN
        wa := d;  -- a clock stepped back: re-anchored at now
      ELSE
        wb := u;  -- read before a later reading was applied: applied at u
      END IF;
    ELSE
      debt := CASE WHEN d IS NULL THEN 0.0 ELSE GREATEST(d - (tnow - u), 0.0) END;
    END IF;
    most := win * 2.0;
    IF debt > most THEN  -- never more than one burst owed (a state from a larger limit)
      debt := most;
      wa := most;
    END IF;
    IF mode IS NOT NULL OR (cost = 0 AND debt > win + slack) THEN
      -- A Refund or a Charge (_settle), or a peek of a bucket in debt: always admitted.
      after := debt;
      IF cost <> 0 THEN
        IF cost >= 2.0 * burst THEN
          after := most;  -- the 2^54 stand-in too
        ELSE
          after := LEAST(GREATEST(debt + CASE WHEN abs(cost) >= 1e-150 AND rate <= 1e150
                                              THEN cost * (1 / rate)
                                              ELSE @MUL@(cost, 1 / rate) END, 0.0), most);
        END IF;
        wa := after;
      END IF;
      remaining := GREATEST(LEAST(trunc((win - after + slack) * rate), burst), 0);
      RETURN ARRAY[wa, wb, NULL, 1, remaining, after, 0];
    END IF;
    after := CASE WHEN cost > burst THEN 'Infinity'::float8
                  WHEN cost = 0 OR (cost >= 1e-150 AND rate <= 1e150) THEN debt + cost * (1 / rate)
                  ELSE debt + @MUL@(cost, 1 / rate) END;
    IF after <= win + slack THEN
      remaining := LEAST(trunc((win - after + slack) * rate), burst);
      IF cost = 0 THEN RETURN ARRAY[wa, wb, NULL, 1, remaining, debt, 0]; END IF;
      RETURN ARRAY[after, wb, NULL, 1, remaining, after, 0];
    END IF;
    remaining := GREATEST(LEAST(trunc((win - debt + slack) * rate), burst), 0);
    RETURN ARRAY[wa, wb, NULL, 0, remaining, debt, after - win];
  END IF;

  IF kind = 108 THEN  -- "l": a lockout alone reports its status, taking nothing
    r := @LOCKSTATUS@(d, u, tnow, spec, counttext);
    RETURN ARRAY[r[1], r[2], NULL, r[3], r[4], r[5], r[5]];
  END IF;

  cnt := counttext::float8;
  IF kind = 113 THEN
    -- quota: spec "q<start>/<end>", the current window (the client's).
    pos := strpos(spec, '/');
    qstart := substr(spec, 2, pos - 2)::float8;
    qend := substr(spec, pos + 1)::float8;
  ELSE
    period := substr(spec, 2)::float8;
    moment := tnow + @EPSILON@;
    IF kind <> 102 THEN
      -- epochwindow(moment, period): k moved by one where rounding would miss moment.
      k := floor(moment / period);
      qstart := k * period;
      IF qstart > moment THEN
        k := k - 1;
        qstart := k * period;
      END IF;
      qend := qstart + period;
      IF qend <= moment THEN
        qstart := (k + 1) * period;
        qend := qstart + period;
      END IF;
    END IF;
  END IF;

  IF kind = 115 THEN
    -- slide: a sliding window, state (previous, current, until) = (d, u, v).
    IF mode IS NULL AND cost > cnt THEN cost := 'Infinity'; END IF;  -- cost_or_inf
    untl := qend + period;
    IF d IS NOT NULL THEN
      gap := qstart - (v - 2.0 * period);  -- whole periods, give or take rounding
      IF gap < -0.5 * period THEN  -- the state's window is ahead of now (rule 6)
        previous := d; current := u;
        IF v - 2.0 * period - tnow > @TOLERANCE@ THEN
          wa := 1;  -- moved, stored even on denial
        ELSE
          qstart := v - 2.0 * period; qend := v - period; untl := v;
        END IF;
      ELSIF gap < 0.5 * period THEN
        previous := d; current := u;
      ELSIF gap < 1.5 * period THEN
        previous := u;
      END IF;
    END IF;
    weight := LEAST(CASE WHEN qend - moment >= 1e-290 THEN (qend - moment) / period
                         ELSE @DIV@(qend - moment, period) END, 1.0);
    IF cost < 0.0 THEN  -- rule 4: a Refund
      IF taken IS NULL OR taken + @EPSILON@ >= qstart THEN
        IF current > 0.0 THEN
          current := GREATEST(current + cost, 0.0);
          wa := 1;
        END IF;
      ELSIF taken + @EPSILON@ >= qstart - period AND previous > 0.0 THEN
        previous := GREATEST(previous + cost, 0.0);
        wa := 1;
      END IF;
    ELSIF cost <> 0.0 THEN
      estimate := CASE WHEN previous >= 1e-150 OR previous = 0 THEN previous * weight
                       ELSE @MUL@(previous, weight) END + current;
      IF mode = 1 THEN  -- rule 5
        current := LEAST(current + cost, 2.0 * cnt);
        wa := 1;
      ELSIF floor(estimate) + cost <= cnt THEN  -- rule 2 (cost inf: never)
        current := current + cost;
        wa := 1;
      ELSE  -- _sliding_retry, then less now
        ok := 0;
        retry := 'Infinity';
        IF cost <= cnt THEN  -- rule 3 (inf)
          target := floor(cnt - cost) + 1.0;
          IF current < target AND previous > 0.0 THEN
            retry := qend - CASE WHEN previous >= 1e-200 THEN (target - current) * period / previous
                                 ELSE @DIV@((target - current) * period, previous) END;
          ELSIF current > 0.0 THEN
            retry := qend + period - CASE WHEN current >= 1e-200 THEN target * period / current
                                          ELSE @DIV@(target * period, current) END;
          ELSE
            retry := qend;
          END IF;
        END IF;
        retry := retry - tnow;
        IF NOT (retry > 0.0) THEN retry := 0.0; END IF;
      END IF;
    END IF;
    -- slid: the reply's fields, and the state when written.
    remaining := GREATEST(cnt - floor(CASE WHEN previous >= 1e-150 OR previous = 0
                                           THEN previous * weight
                                           ELSE @MUL@(previous, weight) END + current), 0);
    rst := CASE WHEN current > 0.0 THEN qend + period - tnow
                WHEN previous > 0.0 THEN qend - tnow ELSE 0.0 END;
    IF wa IS NOT NULL THEN
      RETURN ARRAY[previous, current, untl, ok, remaining, rst, retry];
    END IF;
    RETURN ARRAY[NULL, NULL, NULL, ok, remaining, rst, retry];
  END IF;

  IF kind = 102 THEN
    -- fixed, anchor "first": the window the request that found none open started.
    qstart := tnow; qend := tnow + period;
    IF d IS NOT NULL AND tnow + @EPSILON@ < u THEN
      used := d * @QUNSCALE@;
      qstart := u - period;
      IF qstart <= tnow + @TOLERANCE@ THEN
        qend := u;
      ELSE  -- rule 6: a clock stepped back, the units moved to a window from now
        qstart := tnow; qend := tnow + period;
        wa := used; wb := qend;
      END IF;
    END IF;
  ELSIF d IS NOT NULL AND tnow + @EPSILON@ < u THEN
    -- openwindow (a quota's or an epoch-aligned fixed window's): a live state
    -- counts in its own window, unless that starts more than the tolerance
    -- after now (rule 6: the stored window's start, several windows ahead too).
    used := d * @QUNSCALE@;
    begins := GREATEST(u - (qend - qstart), qend);
    IF u > qend AND tnow < begins - @TOLERANCE@ THEN
      wa := used; wb := qend;  -- a clock stepped back: keep the units
    ELSE
      qend := u;  -- counted in its own window
    END IF;
  END IF;
  -- countin: cost applied to used units of the window [qstart, qend) of cnt
  -- units; wa (the units, scaled below), wb: a state to write whatever happens.
  rst := qend - tnow;
  IF cost <= 0 THEN
    IF taken IS NOT NULL AND taken + @EPSILON@ < qstart THEN
      NULL;  -- rule 4: taken in an earlier window, forgiven at its end: nothing to give
    ELSIF cost < 0 AND used > 0 THEN  -- a refund: never below 0 used
      used := GREATEST(used + cost, 0.0);
      wa := used; wb := qend;
    END IF;
    ok := 1;
    remaining := GREATEST(trunc(cnt - used), 0);
  ELSIF mode = 1 THEN  -- rule 5: a charge, always taken, up to twice the count
    wa := LEAST(used + cost, 2.0 * cnt); wb := qend;
    remaining := GREATEST(trunc(cnt - wa), 0);
  ELSIF cost <= cnt AND used + cost <= cnt THEN
    wa := used + cost; wb := qend;
    remaining := trunc(cnt - wa);
  ELSE
    ok := 0;
    remaining := GREATEST(trunc(cnt - used), 0);
    retry := CASE WHEN cost <= cnt THEN rst ELSE 'Infinity'::float8 END;
  END IF;
  IF wa IS NULL THEN
    RETURN ARRAY[NULL, NULL, NULL, ok, remaining, rst, retry];
  END IF;
  RETURN ARRAY[CASE WHEN wa >= 1e-150 OR wa = 0 THEN wa * @QSCALE@ ELSE @MUL@(wa, @QSCALE@) END,
               wb, NULL, ok, remaining, rst, retry];
END
$fn$;

CREATE OR REPLACE FUNCTION @APPLY@(keys text[], argv text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  parts text[] := string_to_array(argv, ' ');
  n int := cardinality(keys);
  tnow float8;
  da float8;
  ub float8;
  vc float8;
  r float8[];
  h int;
  ds float8[];
  us float8[];
  vs float8[];
  cs text[];
  outs float8[] := '{}';
  replies float8[] := '{}';
  lk float8[];
  m int;
  locked boolean := false;
  admitted boolean;
BEGIN
  IF n = 1 AND cardinality(parts) = 4 THEN
    -- One key: lock, read, step, write; the formatting checked first (see the header).
    PERFORM pg_advisory_xact_lock(@LOCKCLASS@, hashtext(keys[1])),
            CASE WHEN current_setting('extra_float_digits')::int < 1
                 THEN set_config('extra_float_digits', '1', true) END;
    tnow := CASE WHEN parts[1] = '' THEN extract(epoch FROM clock_timestamp())::float8  -- the server's clock
                 ELSE parts[1]::float8 END;
    SELECT t.a, t.b, t.c INTO da, ub, vc FROM @TABLE@ AS t WHERE t.key = keys[1];
    IF FOUND AND (vc IS NOT NULL) <> (ascii(parts[3]) = 115) THEN
      RAISE EXCEPTION 'limiter: key % holds the state of another kind of policy', keys[1]
        USING ERRCODE = 'data_exception';
    END IF;
    r := @STEP@(da, ub, vc, tnow, parts[2], parts[3], parts[4]);
    IF r[1] IS NOT NULL THEN
      IF da IS NOT NULL THEN
        UPDATE @TABLE@ SET a = r[1], b = r[2], c = r[3], keep_until = coalesce(r[3], r[1] + r[2])
          WHERE key = keys[1];
      END IF;
      IF da IS NULL OR NOT FOUND THEN  -- a new key, or a sweep deleted the row meanwhile
        INSERT INTO @TABLE@ AS t (key, a, b, c, keep_until)
          VALUES (keys[1], r[1], r[2], r[3], coalesce(r[3], r[1] + r[2]))
          ON CONFLICT (key) DO UPDATE SET a = excluded.a, b = excluded.b, c = excluded.c,
                                          keep_until = excluded.keep_until;
      END IF;
    END IF;
    RETURN array_to_string(r[4:7], ' ');
  END IF;
  IF n IS NULL OR cardinality(parts) <> 2 + 2 * n THEN
    RAISE EXCEPTION 'limiter: argument % does not match % keys', argv, coalesce(n, 0)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR h IN SELECT DISTINCT hashtext(k) FROM unnest(keys) AS k ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock(@LOCKCLASS@, h);
  END LOOP;
  IF current_setting('extra_float_digits')::int < 1 THEN
    PERFORM set_config('extra_float_digits', '1', true);
  END IF;
  IF parts[1] = '' THEN
    tnow := extract(epoch FROM clock_timestamp())::float8;
  ELSE
    tnow := parts[1]::float8;
  END IF;
  -- limiter.core.many.step_all: all admit or none is charged, a lockout last.
  FOR i IN 1..n LOOP
    da := NULL; ub := NULL; vc := NULL;
    SELECT t.a, t.b, t.c INTO da, ub, vc FROM @TABLE@ AS t WHERE t.key = keys[i];
    IF FOUND AND (vc IS NOT NULL) <> (ascii(parts[2 * i + 1]) = 115) THEN
      RAISE EXCEPTION 'limiter: key % holds the state of another kind of policy', keys[i]
        USING ERRCODE = 'data_exception';
    END IF;
    ds[i] := da; us[i] := ub; vs[i] := vc;
  END LOOP;
  IF strpos(parts[2], ',') > 0 THEN  -- one cost per key
    cs := string_to_array(parts[2], ',');
    IF cardinality(cs) <> n THEN
      RAISE EXCEPTION 'limiter: % costs for % keys', cardinality(cs), n
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
  ELSE
    cs := array_fill(parts[2], ARRAY[n]);
  END IF;
  m := n;
  IF ascii(parts[2 * n + 1]) = 108 THEN  -- "l"
    m := n - 1;
    lk := @LOCKSTATUS@(ds[n], us[n], tnow, parts[2 * n + 1], parts[2 * n + 2]);
    locked := lk[3] = 0;
  END IF;
  admitted := NOT locked;
  FOR i IN 1..m LOOP
    r := @STEP@(ds[i], us[i], vs[i], tnow, cs[i], parts[2 * i + 1], parts[2 * i + 2]);
    IF r[4] = 0 THEN admitted := false; END IF;
    outs := outs || r;
  END LOOP;
  IF m < n THEN
    IF locked THEN
      outs := outs || ARRAY[lk[1], lk[2], NULL, 0, 0, lk[5], lk[5]];
    ELSIF admitted THEN
      outs := outs || ARRAY[NULL, NULL, NULL, 1, lk[4], 0, 0]::float8[];
    ELSE  -- a denial is a breach
      outs := outs || @BREACH@(lk[7], lk[8], tnow, parts[2 * n + 1], parts[2 * n + 2]);
    END IF;
  END IF;
  -- finish: write each state, and the reply (its four numbers per key).
  FOR i IN 1..n LOOP
    r := outs[7 * i - 6 : 7 * i];
    IF i <= m AND NOT admitted AND r[4] = 1 THEN  -- would have admitted: a peek
      r := @STEP@(ds[i], us[i], vs[i], tnow, '0', parts[2 * i + 1], parts[2 * i + 2]);
    END IF;
    IF r[1] IS NOT NULL THEN
      UPDATE @TABLE@ SET a = r[1], b = r[2], c = r[3], keep_until = coalesce(r[3], r[1] + r[2])
        WHERE key = keys[i];
      IF NOT FOUND THEN
        INSERT INTO @TABLE@ AS t (key, a, b, c, keep_until)
          VALUES (keys[i], r[1], r[2], r[3], coalesce(r[3], r[1] + r[2]))
          ON CONFLICT (key) DO UPDATE SET a = excluded.a, b = excluded.b, c = excluded.c,
                                          keep_until = excluded.keep_until;
      END IF;
    END IF;
    replies := replies || r[4:7];
  END LOOP;
  RETURN array_to_string(replies, ' ');
END
$fn$;
