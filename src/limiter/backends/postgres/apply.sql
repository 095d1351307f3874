-- limiter's policies for PostgreSQL: limiter.core in PL/pgSQL, one call per
-- check (limiter/backends/postgres/_sql.py loads this file).  It is
-- limiter/backends/redis/bucket.lua translated operation for operation, in
-- double precision (IEEE 754, as Lua's numbers and Python's floats), so that
-- every result and every stored number is bit for bit the Python core's;
-- tests/backends/test_postgres_store.py and test_postgres_windows.py hold
-- them equal.  Change the three together.  The argument and the reply are
-- bucket.lua's (the grammar in limiter/backends/_wire.py's docstring):
-- APPLY(keys, argv) returns "allowed remaining reset_after retry_after" per key.
--
--   this file        mirrors (bucket.lua / limiter/core/)
--   APPLY            the main chunk, load, misfit, finish / limiter.core.many.step_all,
--                    limiter.core.state.to_row, keep_until;
--   APPLY's <<step>> readcost, step and windowsteps (epochwindow, openwindow,
--                    countin, quota, fixed, slide, slid) /
--                    limiter.core.bucket.step, _settle, limiter.core.window
--   LOCKSTATUS       lockstatus / limiter.core.lockout.lock_status
--   BREACH           breach / limiter.core.lockout.breach
--   SLOTS            slots, live / limiter.core.concurrency.slot_step, _live,
--                    _index, _slot_result; leases_state
--   MUL, DIV         x * y, x / y as IEEE computes them (PostgreSQL raises on
--                    underflow and overflow): called only where the operands
--                    may be that small or large, behind a test.
--
-- Speed (a check is about 20 us of the server's execution on a small machine:
-- the call 2, the lock and now 2, the SELECT 3, the step 5.5, the UPDATE 5.5;
-- then its transaction's commit): PL/pgSQL prepares each expression anew in
-- every transaction, and every check is its own transaction.  Under callgrind
-- a statement costs about 500 instructions and each node of its expression
-- (a variable, a constant, an operator, a function) about 900 more, with all
-- of a CASE's branches prepared whether taken or not; a cast from text or an
-- array subscript about 2,500 more.  So the step is inlined in APPLY (a call
-- costs 2.5 us), no variable has an initializer, one key's path splits argv
-- with split_part (no array), a rare branch (an explicit now, a lowered
-- extra_float_digits, a bucket's cap and settle) is a statement of its own
-- behind a cheap test, clamps are LEAST and GREATEST
-- (they keep their first argument on a tie, as Lua's "if x > y then x = y"
-- does, and no NaN ever reaches them), and a call of MUL or DIV (a function:
-- costly to prepare) stands alone behind its test, not in a CASE of a hot
-- expression.  The server's clock is date_part('epoch', ...), a double, not
-- extract(epoch ...)::float8, which goes through numeric (0.4 us more): both
-- are microseconds / 1e6 rounded once, the same double.
--
-- State rows: (key, a, b, c, keep_until) = limiter.core.state.to_row(state)
-- and keep_until(state) (a + b, or c for a sliding window's three numbers).
-- A Concurrency's row is (key, slots held, until, NULL, until) and its
-- leases [holder, expiry, ...] in the leases column, NULL in every other
-- policy's row.  A row of another shape than the policy reads (three numbers
-- but for a sliding window, leases but for a Concurrency: another kind of
-- policy wrote the key under the same limiter name) is read as missing, as
-- limiter.core.state's readers and bucket.lua's misfit do: the key starts
-- afresh, and its row stays until the new policy writes its own.  A
-- missing row is a key never seen.  The keys of a call are locked
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
CREATE OR REPLACE FUNCTION @BREACH@(cnt float8, runend float8, tnow float8, spec text,
                                    breachestext text) RETURNS float8[]
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

-- SLOTS(ls, tnow, spec, counttext, costtext): limiter.core.concurrency.slot_step,
-- rule for rule (the rules of its docstring, cited by number), for the
-- Concurrency spec "c<lease>" and count "<limit>".  ls: the key's leases
-- [holder, expiry, ...] (NULL: a new key).  costtext: "t<holder>" takes a
-- slot, "g<holder>" gives it back, "r<holder>" renews it; "0", a Charge
-- ("!...") or a Refund ("-...") peeks (rule 5).  Returns [a, b, NULL, allowed,
-- remaining, reset_after, retry_after, holder, expiry, ...]: the state to write
-- (a NULL: nothing; else a = slots held, b = until, as to_row) and the reply's
-- four numbers, then the live leases (the leases column when written).
CREATE OR REPLACE FUNCTION @SLOTS@(
  ls float8[], tnow float8, spec text, counttext text, costtext text
) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  lease float8 := substr(spec, 2)::float8;
  act int := ascii(costtext);  -- 116 "t" take, 103 "g" give, 114 "r" renew, else a peek
  holder float8 := 0.0;
  live float8[] := '{}';
  changed boolean := false;
  latest float8 := tnow + lease;
  expiry float8;
  held int := 0;  -- the holder's index in live (1-based), 0: none
  allowed boolean := true;
  k int;
  untl float8;
  first float8;
  rst float8 := 0.0;
  retry float8 := 0.0;
BEGIN
  IF act IN (103, 114, 116) THEN
    holder := substr(costtext, 2)::float8;
  ELSIF act NOT IN (33, 45) AND costtext::float8 <> 0 THEN  -- rule 5: no holder
    RAISE EXCEPTION 'limiter: a Concurrency policy takes slots through RateLimiter.slot(), '
      'not a cost of %', costtext USING ERRCODE = 'invalid_parameter_value';
  ELSE
    act := 0;  -- a peek
  END IF;
  -- _live: the leases still running at tnow
  FOR k IN 1 .. coalesce(cardinality(ls), 0) / 2 LOOP
    expiry := ls[2 * k];
    IF NOT tnow < expiry THEN  -- rule 2
      changed := true;
      CONTINUE;
    END IF;
    IF expiry - tnow > lease + @TOLERANCE@ THEN  -- rule 6
      expiry := latest;
      changed := true;
    END IF;
    live := live || ARRAY[ls[2 * k - 1], expiry];
    IF act <> 0 AND held = 0 AND ls[2 * k - 1] = holder THEN  -- _index
      held := cardinality(live) - 1;
    END IF;
  END LOOP;
  IF act = 103 THEN  -- rule 3: give
    IF held > 0 THEN
      live := live[1 : held - 1] || live[held + 2 :];
      changed := true;
    END IF;
    allowed := held > 0;
  ELSIF act <> 0 THEN  -- take or renew: rules 1 and 4
    IF held > 0 THEN
      live[held + 1] := tnow + lease;
      changed := true;
    ELSIF cardinality(live) < 2 * counttext::int THEN
      live := live || ARRAY[holder, tnow + lease];
      changed := true;
    ELSE
      allowed := false;
    END IF;
  END IF;
  -- leases_state and _slot_result (rule 7): until is the last expiry (now: none)
  untl := tnow;
  FOR k IN 1 .. cardinality(live) / 2 LOOP
    IF k = 1 OR live[2 * k] > untl THEN untl := live[2 * k]; END IF;
    IF k = 1 OR live[2 * k] < first THEN first := live[2 * k]; END IF;
  END LOOP;
  IF cardinality(live) > 0 THEN rst := untl - tnow; END IF;
  IF NOT allowed AND act <> 103 THEN  -- a give refused waits for nothing
    retry := first - tnow;
  END IF;
  RETURN ARRAY[CASE WHEN changed THEN (cardinality(live) / 2)::float8 END,
               CASE WHEN changed THEN untl END, NULL,
               CASE WHEN allowed THEN 1 ELSE 0 END,
               GREATEST(counttext::int - cardinality(live) / 2, 0), rst, retry] || live;
END
$fn$;

-- APPLY(keys, argv): the whole check, one key's step inlined (no call: see
-- the header).  One key: lock, read, step, write, reply.  Several
-- (limiter.core.many.step_all): lock all, read all, step each in turn, then,
-- if one refused, step again as a peek (cost 0) each that would have
-- admitted; a lockout last; then write and reply.  The step of key i reads d,
-- u, v (its row's a, b, c: NULL for a new key), costtext, spec and counttext
-- (the grammar's), and leaves res = [a, b, c, allowed, remaining,
-- reset_after, retry_after]: the state to write (a NULL: nothing; c NULL but
-- for a sliding window) and the reply's four numbers.  No variable has an
-- initializer: each would be an expression evaluated on every call, so each
-- path sets what it uses.
CREATE OR REPLACE FUNCTION @APPLY@(keys text[], argv text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  parts text[];  -- several keys: argv's fields
  n int;
  i int;
  j int;
  m int;
  pass int;  -- several keys: 1 while stepping, 2 while peeking after a refusal
  h int;
  tnow float8;
  d float8;
  u float8;
  v float8;
  costtext text;
  spec text;
  counttext text;
  res float8[];
  ds float8[];
  us float8[];
  vs float8[];
  cs text[];
  outs float8[];
  peeks float8[];
  replies float8[];
  lk float8[];
  locked boolean;
  admitted boolean;
  tid tid;
  ls float8[];  -- a Concurrency key's leases (SLOTS); lss, los, lps: each key's, as text
  lss text[];
  los text[];
  lps text[];
  -- the step's
  kind int;
  cost float8;
  mode int;  -- readcost: NULL for a request, 1 for a Charge ("!"), 2 for a Refund ("-")
  taken float8;
  pos int;
  rate float8;
  burst float8;
  win float8;
  slack float8;
  debt float8;
  after float8;
  remaining float8;
  wa float8;
  wb float8;
  r float8[];
  period float8;
  cnt float8;
  moment float8;
  kw float8;
  qstart float8;
  qend float8;
  begins float8;
  used float8;
  rst float8;
  retry float8;
  ok float8;
  untl float8;
  gap float8;
  previous float8;
  current float8;
  weight float8;
  estimate float8;
  target float8;
  pw float8;
BEGIN
  IF cardinality(keys) = 1 AND argv LIKE '% % % %' AND argv NOT LIKE '% % % % %' THEN
    -- One key, argv's four fields.  One expression locks the key and reads
    -- the server's clock, in that order (CASE's), unless argv has a now (its
    -- first character is not the space after an empty now).
    n := 1;
    tnow := CASE WHEN pg_advisory_xact_lock(@LOCKCLASS@, hashtext(keys[1])) IS NULL THEN NULL
                 WHEN ascii(argv) = 32 THEN date_part('epoch', clock_timestamp()) END;
    IF tnow IS NULL THEN
      tnow := split_part(argv, ' ', 1)::float8;
    END IF;
    IF ascii(current_setting('extra_float_digits')) < 49 THEN  -- "-15" to "0": below 1
      PERFORM set_config('extra_float_digits', '1', true);
    END IF;
    SELECT t.a, t.b, t.c, t.leases, t.ctid INTO d, u, v, ls, tid
      FROM @TABLE@ AS t WHERE t.key = keys[1];
    costtext := split_part(argv, ' ', 2); spec := split_part(argv, ' ', 3);
    counttext := split_part(argv, ' ', 4);
  ELSE
    parts := string_to_array(argv, ' ');
    n := cardinality(keys);
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
      tnow := date_part('epoch', clock_timestamp());
    ELSE
      tnow := parts[1]::float8;
    END IF;
    FOR i IN 1..n LOOP
      d := NULL; u := NULL; v := NULL;
      SELECT t.a, t.b, t.c, t.leases INTO d, u, v, ls FROM @TABLE@ AS t WHERE t.key = keys[i];
      IF FOUND AND ((v IS NOT NULL) <> (ascii(parts[2 * i + 1]) = 115)
                    OR (ls IS NOT NULL) <> (ascii(parts[2 * i + 1]) = 99)) THEN
        d := NULL; u := NULL; v := NULL; ls := NULL;  -- misfit: read as missing
      END IF;
      ds[i] := d; us[i] := u; vs[i] := v; lss[i] := ls::text;
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
    locked := false;
    IF ascii(parts[2 * n + 1]) = 108 THEN  -- "l": a lockout last, stepped after the others
      m := n - 1;
      lk := @LOCKSTATUS@(ds[n], us[n], tnow, parts[2 * n + 1], parts[2 * n + 2]);
      locked := lk[3] = 0;
    END IF;
    admitted := NOT locked;
    outs := '{}'; peeks := '{}'; pass := 1; i := 0;
  END IF;

  <<keyloop>>
  LOOP
    IF n > 1 THEN  -- the next step: each key in turn, then the peeks
      LOOP
        i := i + 1;
        IF i > m THEN
          EXIT keyloop WHEN pass = 2 OR admitted;
          pass := 2; i := 0;
        ELSIF pass = 1 OR outs[7 * i - 3] = 1 THEN
          EXIT;
        END IF;
      END LOOP;
      d := ds[i]; u := us[i]; v := vs[i]; ls := lss[i]::float8[];
      costtext := CASE WHEN pass = 1 THEN cs[i] ELSE '0' END;
      spec := parts[2 * i + 1]; counttext := parts[2 * i + 2];
      mode := NULL; taken := NULL; wa := NULL; wb := NULL;
    END IF;

    <<step>>
    LOOP  -- left by EXIT step; CONTINUE step steps again (a misfit read as missing)
      IF ascii(costtext) IN (33, 45, 103, 114, 116) THEN  -- readcost: "!", "-" or a slot's
        IF ascii(costtext) = 33 THEN
          mode := 1; cost := substr(costtext, 2)::float8;
        ELSIF ascii(costtext) <> 45 THEN  -- a Hold ("t", "g", "r"): its value, or SLOTS's
          cost := CASE WHEN ascii(costtext) = 116 THEN 1.0 ELSE 0.0 END;
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

      IF ascii(spec) <= 57 AND v IS NULL AND ls IS NULL THEN
        -- step: a token bucket (a rate's first character is a digit).  wb NULL: now.
        rate := spec::float8;
        burst := counttext::float8;
        win := burst / rate;
        slack := LEAST(1e-3 / rate, @EPSILON@);
        IF tnow < u THEN  -- (u is NULL when d is: a new key)
          debt := d;
          IF tnow < u - @TOLERANCE@ THEN
            wa := d;  -- a clock stepped back: re-anchored at now
          ELSE
            wb := u;  -- read before a later reading was applied: applied at u
          END IF;
        ELSE
          debt := GREATEST(d - (tnow - u), 0.0);  -- GREATEST skips a NULL: 0 for a new key
        END IF;
        IF mode IS NOT NULL OR cost <= 0 OR debt > win * 2.0 THEN  -- the checks a request skips
          IF debt > win * 2.0 THEN  -- never more than one burst owed (a state from a larger limit)
            debt := win * 2.0;
            wa := debt;
          END IF;
          IF mode IS NOT NULL OR (cost = 0 AND debt > win + slack) THEN
            -- A Refund or a Charge (_settle), or a peek of a bucket in debt: always admitted.
            after := debt;
            IF cost <> 0 THEN
              IF cost >= 2.0 * burst THEN
                after := win * 2.0;  -- the 2^54 stand-in too
              ELSE
                IF abs(cost) >= 1e-150 AND rate <= 1e150 THEN
                  after := LEAST(GREATEST(debt + cost * (1 / rate), 0.0), win * 2.0);
                ELSE  -- a product that may underflow
                  after := LEAST(GREATEST(debt + @MUL@(cost, 1 / rate), 0.0), win * 2.0);
                END IF;
              END IF;
              wa := after;
            END IF;
            res := ARRAY[wa, coalesce(wb, tnow), NULL, 1,
                         GREATEST(LEAST(trunc((win - after + slack) * rate), burst), 0), after, 0];
            EXIT step;
          END IF;
        END IF;
        IF cost > burst THEN
          after := 'Infinity';  -- never admitted, however close
        ELSIF cost = 0 OR (cost >= 1e-150 AND rate <= 1e150) THEN
          after := debt + cost * (1 / rate);
        ELSE  -- a product that may underflow (no function in the expression above: see the header)
          after := debt + @MUL@(cost, 1 / rate);
        END IF;
        IF after <= win + slack THEN
          IF cost = 0 THEN
            res := ARRAY[wa, coalesce(wb, tnow), NULL, 1,
                         LEAST(trunc((win - after + slack) * rate), burst), debt, 0];
            EXIT step;
          END IF;
          res := ARRAY[after, coalesce(wb, tnow), NULL, 1,
                       LEAST(trunc((win - after + slack) * rate), burst), after, 0];
          EXIT step;
        END IF;
        res := ARRAY[wa, coalesce(wb, tnow), NULL, 0,
                     GREATEST(LEAST(trunc((win - debt + slack) * rate), burst), 0), debt, after - win];
        EXIT step;
      END IF;

      kind := ascii(spec);
      IF d IS NOT NULL AND ((v IS NOT NULL) <> (kind = 115) OR (ls IS NULL) = (kind = 99)) THEN
        -- misfit: three numbers are a sliding window's state, leases a Concurrency's;
        -- another shape is read as missing (a bucket's step too: stepped again).
        d := NULL; u := NULL; v := NULL; ls := NULL;
        CONTINUE step;
      END IF;
      IF kind = 99 THEN  -- "c": a Concurrency policy (SLOTS); its leases to write in ls
        res := @SLOTS@(ls, tnow, spec, counttext, costtext);
        ls := res[8:]; res := res[1:7];
        IF n = 1 THEN  -- finish (keep_until: until)
          IF res[1] IS NOT NULL THEN
            UPDATE @TABLE@ SET a = res[1], b = res[2], c = NULL, leases = ls, keep_until = res[2]
              WHERE ctid = tid;
            IF NOT FOUND THEN
              INSERT INTO @TABLE@ AS t (key, a, b, c, leases, keep_until)
                VALUES (keys[1], res[1], res[2], NULL, ls, res[2])
                ON CONFLICT (key) DO UPDATE SET a = excluded.a, b = excluded.b, c = NULL,
                                                leases = excluded.leases, keep_until = excluded.b;
            END IF;
          END IF;
          RETURN array_to_string(res[4:7], ' ');
        END IF;
        IF pass = 1 THEN los[i] := ls::text; ELSE lps[i] := ls::text; END IF;
        EXIT step;
      END IF;
      IF kind = 108 THEN  -- "l": a lockout alone reports its status, taking nothing
        r := @LOCKSTATUS@(d, u, tnow, spec, counttext);
        res := ARRAY[r[1], r[2], NULL, r[3], r[4], r[5], r[5]];
        EXIT step;
      END IF;

      cnt := counttext::float8;
      used := 0.0; retry := 0.0; ok := 1;
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
          kw := floor(moment / period);
          qstart := kw * period;
          IF qstart > moment THEN
            kw := kw - 1;
            qstart := kw * period;
          END IF;
          qend := qstart + period;
          IF qend <= moment THEN
            qstart := (kw + 1) * period;
            qend := qstart + period;
          END IF;
        END IF;
      END IF;

      IF kind = 115 THEN
        -- slide: a sliding window, state (previous, current, until) = (d, u, v).
        IF mode IS NULL AND cost > cnt THEN cost := 'Infinity'; END IF;  -- cost_or_inf
        untl := qend + period;
        previous := 0.0; current := 0.0;
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
        IF qend - moment >= 1e-290 THEN
          weight := LEAST((qend - moment) / period, 1.0);
        ELSE  -- a quotient that may underflow
          weight := LEAST(@DIV@(qend - moment, period), 1.0);
        END IF;
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
        END IF;
        -- previous * weight, the estimate's and slid's (previous is final here)
        IF previous >= 1e-150 OR previous = 0 THEN
          pw := previous * weight;
        ELSE  -- a product that may underflow
          pw := @MUL@(previous, weight);
        END IF;
        IF cost > 0.0 THEN
          estimate := pw + current;
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
                IF previous >= 1e-200 THEN
                  retry := qend - (target - current) * period / previous;
                ELSE  -- a quotient that may overflow
                  retry := qend - @DIV@((target - current) * period, previous);
                END IF;
              ELSIF current > 0.0 THEN
                IF current >= 1e-200 THEN
                  retry := qend + period - target * period / current;
                ELSE
                  retry := qend + period - @DIV@(target * period, current);
                END IF;
              ELSE
                retry := qend;
              END IF;
            END IF;
            retry := retry - tnow;
            IF NOT (retry > 0.0) THEN retry := 0.0; END IF;
          END IF;
        END IF;
        -- slid: the reply's fields, and the state when written.
        remaining := GREATEST(cnt - floor(pw + current), 0);
        rst := CASE WHEN current > 0.0 THEN qend + period - tnow
                    WHEN previous > 0.0 THEN qend - tnow ELSE 0.0 END;
        IF wa IS NOT NULL THEN
          res := ARRAY[previous, current, untl, ok, remaining, rst, retry];
          EXIT step;
        END IF;
        res := ARRAY[NULL, NULL, NULL, ok, remaining, rst, retry];
        EXIT step;
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
        res := ARRAY[NULL, NULL, NULL, ok, remaining, rst, retry];
        EXIT step;
      END IF;
      IF wa >= 1e-140 OR wa = 0 THEN
        res := ARRAY[wa * @QSCALE@, wb, NULL, ok, remaining, rst, retry];
      ELSE  -- a product that may underflow
        res := ARRAY[@MUL@(wa, @QSCALE@), wb, NULL, ok, remaining, rst, retry];
      END IF;
      EXIT step;
    END LOOP;

    IF n = 1 THEN  -- finish: write the state, and the reply
      IF res[1] IS NOT NULL THEN
        UPDATE @TABLE@ SET a = res[1], b = res[2], c = res[3], leases = NULL,
                           keep_until = coalesce(res[3], res[1] + res[2])
          WHERE ctid = tid;  -- the row read above, which the lock keeps
        IF NOT FOUND THEN  -- a new key, or a sweep deleted the row meanwhile
          INSERT INTO @TABLE@ AS t (key, a, b, c, keep_until)
            VALUES (keys[1], res[1], res[2], res[3], coalesce(res[3], res[1] + res[2]))
            ON CONFLICT (key) DO UPDATE SET a = excluded.a, b = excluded.b, c = excluded.c,
                                            leases = NULL, keep_until = excluded.keep_until;
        END IF;
      END IF;
      RETURN array_to_string(res[4:7], ' ');
    END IF;
    IF pass = 1 THEN
      outs := outs || res;
      -- A give ("g") is never refused as a whole: a lapsed lease refuses alone.
      IF res[4] = 0 AND ascii(costtext) <> 103 THEN admitted := false; END IF;
    ELSE
      peeks := peeks || res;
    END IF;
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
  -- finish: write each state (a peek's in place of a step that would have
  -- admitted), and the reply: four numbers per key.
  replies := '{}'; j := 0;
  FOR i IN 1..n LOOP
    res := outs[7 * i - 6 : 7 * i];
    ls := los[i]::float8[];
    IF i <= m AND NOT admitted AND res[4] = 1 THEN
      j := j + 1;
      res := peeks[7 * j - 6 : 7 * j];
      ls := lps[i]::float8[];
    END IF;
    IF res[1] IS NOT NULL THEN  -- leases (ls): a Concurrency's, kept until b
      UPDATE @TABLE@ SET a = res[1], b = res[2], c = res[3], leases = ls,
                         keep_until = CASE WHEN ls IS NULL THEN coalesce(res[3], res[1] + res[2])
                                           ELSE res[2] END
        WHERE key = keys[i];
      IF NOT FOUND THEN
        INSERT INTO @TABLE@ AS t (key, a, b, c, leases, keep_until)
          VALUES (keys[i], res[1], res[2], res[3], ls,
                  CASE WHEN ls IS NULL THEN coalesce(res[3], res[1] + res[2]) ELSE res[2] END)
          ON CONFLICT (key) DO UPDATE SET a = excluded.a, b = excluded.b, c = excluded.c,
                                          leases = excluded.leases,
                                          keep_until = excluded.keep_until;
      END IF;
    END IF;
    replies := replies || res[4:7];
  END LOOP;
  RETURN array_to_string(replies, ' ');
END
$fn$;
