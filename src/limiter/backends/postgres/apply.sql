-- limiter's policies for PostgreSQL: limiter.core in PL/pgSQL, one call per
-- check (limiter/backends/postgres/_sql.py loads this file).  It is
-- limiter/backends/redis/bucket.lua translated operation for operation, in
-- double precision (IEEE 754, as Lua's numbers and Python's floats), so that
-- every result and every stored number is bit for bit the Python core's;
-- tests/backends/test_postgres_store.py holds them equal.  Change the three
-- together.  The argument and the reply are bucket.lua's (the grammar in
-- limiter/backends/redis/_wire.py's docstring): APPLY(keys, argv) returns
-- "allowed remaining reset_after retry_after" per key.
--
--   this file        mirrors (bucket.lua / limiter/core/)
--   COST             readcost / validate_cost (done in Python first)
--   STEP             step / limiter.core.bucket.step and _settle
--   QUOTA            quota / limiter.core.window.count_step
--   LOCKSTATUS       lockstatus / limiter.core.lockout.lock_status
--   BREACH           breach / limiter.core.lockout.breach
--   FINISH           finish and store / limiter.core.state.to_row, keep_until
--   APPLY            the main chunk / limiter.core.many.step_all
--   MUL              a * b as IEEE computes it (PostgreSQL raises on underflow)
--
-- A window policy (" w", " f", " s") is one more branch of STEP, mirroring
-- bucket.lua's (its state's third number goes to column c); the store refuses
-- those policies before any I/O until then.
--
-- State rows: (key, a, b, c, keep_until) = limiter.core.state.to_row(state)
-- and keep_until(state) = a + b.  A missing row is a key never seen.  The
-- keys of a call are locked (transaction-scoped advisory locks, in one global
-- order, so that two calls never deadlock) before they are read: a new key
-- has no row to lock.  Writes are an UPDATE, or an INSERT when the row is
-- gone (a sweep deleted it meanwhile).  now is read after the locks.
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
  -- Only an underflow reaches here (callers never multiply what may
  -- overflow): IEEE's result is a zero of the product's sign.
  IF (x < 0) <> (y < 0) THEN RETURN '-0'::float8; END IF;
  RETURN 0::float8;
END
$fn$;

CREATE OR REPLACE FUNCTION @COST@(t text) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
-- [cost, mode, taken_at]: mode 1 for a Charge ("!"), 2 for a Refund ("-"), else 0.
DECLARE
  pos int;
BEGIN
  IF left(t, 1) = '!' THEN RETURN ARRAY[substr(t, 2)::float8, 1, NULL]; END IF;
  IF left(t, 1) = '-' THEN
    pos := strpos(t, '@');
    IF pos > 0 THEN
      RETURN ARRAY[left(t, pos - 1)::float8, 2, substr(t, pos + 1)::float8];
    END IF;
    RETURN ARRAY[t::float8, 2, NULL];
  END IF;
  RETURN ARRAY[t::float8, 0, NULL];
END
$fn$;

-- Every step returns [a, b, allowed, remaining, reset_after, retry_after]:
-- the state to write (a NULL: nothing) and the reply's four numbers.

CREATE OR REPLACE FUNCTION @QUOTA@(
  d float8, u float8, tnow float8, spec text, counttext text, cost float8, mode int, taken float8
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  slash int := strpos(spec, '/');
  qstart float8 := substr(spec, 2, slash - 2)::float8;
  qend float8 := substr(spec, slash + 1)::float8;
  cnt float8 := counttext::float8;
  used float8 := 0.0;
  wa float8;
  wb float8;
  rst float8;
  rem float8;
  most float8;
  after float8;
  retry float8;
BEGIN
  IF d IS NOT NULL AND tnow + @EPSILON@ < u THEN
    used := d * @QUNSCALE@;
    IF u > qend AND tnow < qend - @TOLERANCE@ THEN
      wa := d; wb := qend;  -- a clock stepped back: keep what was used
    ELSE
      qend := u;  -- counted in its own window
    END IF;
  END IF;
  rst := qend - tnow;
  IF cost <= 0 THEN
    IF taken IS NOT NULL AND taken + @EPSILON@ < qstart THEN
      NULL;  -- taken in an earlier window, forgiven at its end: nothing to give
    ELSIF cost < 0 AND used > 0 THEN  -- a refund: never below 0 used
      used := used + cost;
      IF used < 0.0 THEN used := 0.0; END IF;
      wa := CASE WHEN used >= 1e-150 OR used = 0 THEN used * @QSCALE@ ELSE @MUL@(used, @QSCALE@) END;
      wb := qend;
    END IF;
    rem := trunc(cnt - used);
    IF rem < 0 THEN rem := 0; END IF;
    RETURN ARRAY[wa, wb, 1, rem, rst, 0];
  END IF;
  IF mode = 1 THEN  -- a charge: always taken, up to twice the count
    most := 2.0 * cnt;
    after := used + cost;
    IF NOT (after <= most) THEN after := most; END IF;
    rem := trunc(cnt - after);
    IF rem < 0 THEN rem := 0; END IF;
    RETURN ARRAY[CASE WHEN after >= 1e-150 THEN after * @QSCALE@ ELSE @MUL@(after, @QSCALE@) END,
                 qend, 1, rem, rst, 0];
  END IF;
  IF cost <= cnt AND used + cost <= cnt THEN
    after := used + cost;
    RETURN ARRAY[CASE WHEN after >= 1e-150 THEN after * @QSCALE@ ELSE @MUL@(after, @QSCALE@) END,
                 qend, 1, trunc(cnt - after), rst, 0];
  END IF;
  rem := trunc(cnt - used);
  IF rem < 0 THEN rem := 0; END IF;
  retry := 'Infinity';
  IF cost <= cnt THEN retry := rst; END IF;
  RETURN ARRAY[wa, wb, 0, rem, rst, retry];
END
$fn$;

-- [a, b, allowed, remaining, left, left, breaches, run_end]: the state to
-- write, allowed 0 while locked out (left: the seconds of it), and the open
-- run's breaches and end (0 and -Infinity when none).
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
    RETURN ARRAY[@LOCKED@, untl, 0, 0, lft, lft];
  END IF;
  RETURN ARRAY[cnt * @QSCALE@, runend, 1, trunc(breaches - cnt), 0, 0];
END
$fn$;

CREATE OR REPLACE FUNCTION @STEP@(
  d float8, u float8, tnow float8, ratetext text, bursttext text, cost float8, mode int, taken float8
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  kind text := left(ratetext, 1);
  r float8[];
  rate float8;
  burst float8;
  win float8;
  slack float8;
  iv float8;
  wa float8;
  wb float8 := tnow;
  debt float8;
  most float8;
  after float8;
  remaining float8;
BEGIN
  IF kind = 'q' THEN
    RETURN @QUOTA@(d, u, tnow, ratetext, bursttext, cost, mode, taken);
  END IF;
  IF kind = 'l' THEN  -- a lockout alone reports its status, taking nothing
    r := @LOCKSTATUS@(d, u, tnow, ratetext, bursttext);
    RETURN r[1:6];
  END IF;
  IF kind NOT IN ('0', '1', '2', '3', '4', '5', '6', '7', '8', '9') THEN
    RAISE EXCEPTION 'limiter: policy "%" is not supported by this version of the function', ratetext
      USING ERRCODE = 'feature_not_supported';
  END IF;
  rate := ratetext::float8;
  burst := bursttext::float8;
  win := burst / rate;
  slack := 1e-3 / rate;
  IF slack > @EPSILON@ THEN slack := @EPSILON@; END IF;
  iv := 1 / rate;
  IF d IS NULL THEN
    debt := 0.0;
  ELSIF tnow < u THEN
    debt := d;
    IF tnow < u - @TOLERANCE@ THEN
      wa := d;  -- a clock stepped back: re-anchored at now
    ELSE
      wb := u;  -- read before a later reading was applied: applied at u
    END IF;
  ELSE
    debt := d - (tnow - u);
    IF debt < 0.0 THEN debt := 0.0; END IF;
  END IF;
  most := win * 2.0;
  IF debt > most THEN  -- never more than one burst owed
    debt := most;
    wa := most;
  END IF;
  IF mode <> 0 OR (cost = 0 AND debt > win + slack) THEN
    -- A Refund or a Charge, or a peek of a bucket in debt: always admitted.
    after := debt;
    IF cost <> 0 THEN
      IF cost >= 2.0 * burst THEN
        after := most;
      ELSE
        after := debt + CASE WHEN abs(cost) >= 1e-150 AND iv >= 1e-150 THEN cost * iv
                             ELSE @MUL@(cost, iv) END;
        IF after < 0.0 THEN after := 0.0; ELSIF after > most THEN after := most; END IF;
      END IF;
      wa := after;
    END IF;
    remaining := trunc((win - after + slack) * rate);
    IF remaining > burst THEN remaining := burst; ELSIF remaining < 0 THEN remaining := 0; END IF;
    RETURN ARRAY[wa, wb, 1, remaining, after, 0];
  END IF;
  after := 'Infinity';
  IF cost <= burst THEN
    after := debt + CASE WHEN cost = 0 OR (cost >= 1e-150 AND iv >= 1e-150) THEN cost * iv
                         ELSE @MUL@(cost, iv) END;
  END IF;
  IF after <= win + slack THEN
    remaining := trunc((win - after + slack) * rate);
    IF remaining > burst THEN remaining := burst; END IF;
    IF cost = 0 THEN RETURN ARRAY[wa, wb, 1, remaining, debt, 0]; END IF;
    RETURN ARRAY[after, wb, 1, remaining, after, 0];
  END IF;
  remaining := trunc((win - debt + slack) * rate);
  IF remaining > burst THEN remaining := burst; ELSIF remaining < 0 THEN remaining := 0; END IF;
  RETURN ARRAY[wa, wb, 0, remaining, debt, after - win];
END
$fn$;

-- Writes what a step returned (r[1] NULL: nothing) and formats its reply.
-- float8's text is the shortest that reads back as the same double (the
-- function sets extra_float_digits = 1), as Python's repr.
CREATE OR REPLACE FUNCTION @FINISH@(k text, r float8[]) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF r[1] IS NOT NULL THEN
    UPDATE @TABLE@ SET a = r[1], b = r[2], c = NULL, keep_until = r[1] + r[2] WHERE key = k;
    IF NOT FOUND THEN
      INSERT INTO @TABLE@ (key, a, b, c, keep_until) VALUES (k, r[1], r[2], NULL, r[1] + r[2]);
    END IF;
  END IF;
  RETURN r[3]::int::text || ' ' || r[4]::text || ' ' || r[5]::text || ' ' || r[6]::text;
END
$fn$;

CREATE OR REPLACE FUNCTION @APPLY@(keys text[], argv text) RETURNS text
LANGUAGE plpgsql VOLATILE SET extra_float_digits = 1 AS $fn$
DECLARE
  n int := cardinality(keys);
  parts text[] := string_to_array(argv, ' ');
  tnow float8;
  h int;
  ds float8[];
  us float8[];
  da float8;
  ub float8;
  costs float8[];
  cs text[];
  r float8[];
  outs float8[] := '{}';
  lk float8[];
  m int;
  locked boolean := false;
  admitted boolean;
  replies text[] := '{}';
BEGIN
  IF n IS NULL OR cardinality(parts) <> 2 + 2 * n THEN
    RAISE EXCEPTION 'limiter: argument % does not match % keys', argv, coalesce(n, 0)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF n = 1 THEN
    PERFORM pg_advisory_xact_lock(@LOCKCLASS@, hashtext(keys[1]));
  ELSE
    FOR h IN SELECT DISTINCT hashtext(k) FROM unnest(keys) AS k ORDER BY 1 LOOP
      PERFORM pg_advisory_xact_lock(@LOCKCLASS@, h);
    END LOOP;
  END IF;
  IF parts[1] = '' THEN
    tnow := extract(epoch FROM clock_timestamp())::float8;  -- the server's clock
  ELSE
    tnow := parts[1]::float8;
  END IF;
  IF n = 1 THEN
    SELECT t.a, t.b INTO da, ub FROM @TABLE@ AS t WHERE t.key = keys[1];
    costs := @COST@(parts[2]);
    RETURN @FINISH@(keys[1], @STEP@(da, ub, tnow, parts[3], parts[4],
                                costs[1], costs[2]::int, costs[3]));
  END IF;
  -- limiter.core.many.step_all: all admit or none is charged, a lockout last.
  FOR i IN 1..n LOOP
    da := NULL; ub := NULL;
    SELECT t.a, t.b INTO da, ub FROM @TABLE@ AS t WHERE t.key = keys[i];
    ds[i] := da; us[i] := ub;
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
  IF left(parts[2 * n + 1], 1) = 'l' THEN
    m := n - 1;
    lk := @LOCKSTATUS@(ds[n], us[n], tnow, parts[2 * n + 1], parts[2 * n + 2]);
    locked := lk[3] = 0;
  END IF;
  admitted := NOT locked;
  FOR i IN 1..m LOOP
    costs := @COST@(cs[i]);
    r := @STEP@(ds[i], us[i], tnow, parts[2 * i + 1], parts[2 * i + 2],
              costs[1], costs[2]::int, costs[3]);
    IF r[3] = 0 THEN admitted := false; END IF;
    outs := outs || r;
  END LOOP;
  FOR i IN 1..m LOOP
    r := outs[6 * i - 5 : 6 * i];
    IF NOT admitted AND r[3] = 1 THEN  -- would have admitted: a peek
      r := @STEP@(ds[i], us[i], tnow, parts[2 * i + 1], parts[2 * i + 2], 0, 0, NULL);
    END IF;
    replies[i] := @FINISH@(keys[i], r);
  END LOOP;
  IF m < n THEN
    IF locked THEN
      replies[n] := @FINISH@(keys[n], ARRAY[lk[1], lk[2], 0, 0, lk[5], lk[5]]);
    ELSIF admitted THEN
      replies[n] := @FINISH@(keys[n], ARRAY[NULL, NULL, 1, lk[4], 0, 0]::float8[]);
    ELSE  -- a denial is a breach
      replies[n] := @FINISH@(keys[n], @BREACH@(lk[7], lk[8], tnow, parts[2 * n + 1], parts[2 * n + 2]));
    END IF;
  END IF;
  RETURN array_to_string(replies, ' ');
END
$fn$;
