"""The private language of the server-side stores: arguments, replies, keys, expiry.

Spoken by ``RedisStore`` to ``redis/bucket.lua`` and by ``PostgresStore`` to
``postgres/apply.sql`` (the same argument, the same reply); the one owner of
it on the Python side.  ``bucket.lua``'s header repeats the grammar below
verbatim (``tests/backends/test_redis_wire.py`` holds the two equal)::

    argv    = now " " costs policy { policy } ;  (* ARGV[1]: one policy per KEYS[i] *)
    now     = "" | number ;                       (* "": the server's TIME *)
    costs   = cost { "," cost } ;                 (* several: one per key *)
    cost    = number                              (* a request *)
            | "!" number                          (* a Charge: always admitted *)
            | "-" number [ "@" number ]           (* a Refund of number; @ its taken_at *)
            | ( "t" | "g" | "r" ) number ;        (* a Hold: take, give, renew; holder *)
    policy  = " " number " " count                (* token bucket: rate burst *)
            | " q" number "/" number " " count    (* quota: window start/end, count *)
            | " w" number " " count               (* fixed window, epoch: period count *)
            | " f" number " " count               (* fixed window, first request's *)
            | " s" number " " count               (* sliding window: period count *)
            | " c" number " " count               (* concurrency: lease limit *)
            | " l" number "/" number " " count ;  (* lockout, last: within/duration *)
    number  = Python float repr ;                 (* a cost at most 2^54: the stand-in *)
    count   = decimal integer ;                   (* burst, count, breaches *)
    reply   = result { " " result } ;             (* one per key, in KEYS order *)
    result  = allowed " " remaining " " reset_after " " retry_after ;
    allowed = "1" | "0" ;                         (* the other three: %d or %.17g *)
    stored  = number " " number [ " " number ]    (* PX = ttl_ms(seconds); 3: sliding *)
            | "c" number { " " number } ;         (* leases: holder expiry ..., until *)

Redis keys: ``redis_key`` (one-to-one, always with a cluster hash tag);
PostgreSQL's are its rows' (``postgres.row_key``).  Why one argument string:
CONTRIBUTING.md "Hot paths".
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from limiter.core.costs import Charge, Cost, Hold, Refund, validate_cost, validate_costs
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON, Limit
from limiter.core.result import RateLimitResult
from limiter.store import StoreError


def _load_script() -> str:
    """``redis/bucket.lua``, with ``EPSILON`` and ``TOLERANCE`` as core's constants' reprs."""
    from importlib.resources import files  # Python >= 3.9

    # Found from this package, not limiter.backends.redis: importing that
    # package (which imports this module) would make a cycle.
    script = files(__package__).joinpath("redis").joinpath("bucket.lua")
    text = script.read_text(encoding="utf-8")
    for placeholder, value in (("EPSILON", TIME_EPSILON), ("TOLERANCE", CLOCK_TOLERANCE)):
        if placeholder not in text:
            raise RuntimeError(
                f"limiter/backends/redis/bucket.lua lacks its {placeholder} placeholder"
            )
        text = text.replace(placeholder, repr(value))
    return text


#: The Lua script run by EVALSHA for every check (``bucket.lua``, which says
#: which function of ``limiter.core.bucket`` each of its parts mirrors).
SCRIPT = _load_script()

#: SHA-1 of ``SCRIPT``, the name EVALSHA calls it by.
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()

#: The shortest PX the script sets (ms): a key outlives a reading up to the
#: clock tolerance late, which ``step`` applies to the stored state.
TTL_FLOOR_MS = math.ceil(CLOCK_TOLERANCE * 1000)


def ttl_ms(seconds: float) -> int:
    """The PX the script sets for a state full again (or ended) in ``seconds``."""
    return min(10**15, max(TTL_FLOOR_MS, math.ceil(seconds * 1000)))


# -- keys ------------------------------------------------------------------------


def hash_tag(key: str) -> Optional[str]:
    """The cluster hash tag marked in ``key`` (Redis's rule: the text between the first
    ``{`` and the next ``}``, not empty), or ``None``."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def _escaped(key: str) -> str:
    """``key`` with ``%`` and ``}`` as ``%25`` and ``%7D`` (a tag that ends where it should)."""
    if "}" in key or "%" in key:
        return key.replace("%", "%25").replace("}", "%7D")
    return key


def slot_tag(key: str) -> str:
    """The hash tag of ``redis_key(key)``: ``key``'s own tag, else ``key`` escaped."""
    tag = hash_tag(key)
    return _escaped(key) if tag is None else tag


def redis_key(key: str, prefix: str = "limiter:") -> str:
    """The Redis key that holds ``key``'s state, one-to-one for any str, always with a
    hash tag (``key``'s own, else ``key`` escaped): docs/stores.md "Keys and Redis Cluster"."""
    tag = hash_tag(key)
    if tag is not None:
        return prefix + "{" + tag + "}" + key
    return prefix + "{" + _escaped(key) + "}"


def encode_key(key: str, prefix: str) -> bytes:
    """``redis_key`` as UTF-8 (lone surrogates too); ``ValueError`` for a key that is no str."""
    if not isinstance(key, str):
        raise ValueError(f"key must be a str, got {key!r:.100}")
    return redis_key(key, prefix).encode("utf-8", "surrogatepass")


def encode_keys(keys: Sequence[str], count: int, prefix: str, cluster: bool) -> List[bytes]:
    """The keys of a call with ``count`` policies, or ``ValueError`` before any I/O: one
    key per policy, at least one; on a cluster all share a hash tag (``slot_tag``)."""
    if len(keys) != count or not keys:
        raise ValueError(f"need one key per limit and at least one limit, got {count}")
    if cluster and len(keys) > 1:
        tags = {slot_tag(k) for k in keys if isinstance(k, str)}
        if len(tags) > 1:
            raise ValueError(
                "on Redis Cluster, the keys of one apply_many call must share a hash tag "
                f"(e.g. '{{user}}:a', '{{user}}:b'), got {list(keys)!r:.200}"
            )
    return [encode_key(k, prefix) for k in keys]


# -- policies --------------------------------------------------------------------


def _quota_text(quota: Any, now: float) -> str:
    # The script cannot do time-zone arithmetic: it gets the window holding
    # now + TIME_EPSILON (as step_quota finds it) from the now it is sent.
    start, end = quota.bounds(now + TIME_EPSILON)
    return f" q{start!r}/{end!r} {quota.burst}"


#: A fixed window's letter by its anchor: the script finds the window itself.
_ANCHOR_LETTERS = {"epoch": "w", "first": "f"}


class PolicyCodec(NamedTuple):
    """How one type of policy travels: its text, and where it may stand."""

    text: Callable[[Any, float], str]  # (policy, now) -> its policy text
    timed: bool  # its text depends on now (never cached; now is then the client's)
    last: bool  # only ever last, after another policy (a lockout)


#: Each kind of policy's codec, by its class's ``kind`` (``limiter.core.limits.Policy``).
#: A bucket's text is its rate and burst: the script derives interval, window and
#: slack as Limit does.
_CODECS = {
    "bucket": PolicyCodec(lambda p, now: f" {p.rate!r} {p.burst}", False, False),
    "quota": PolicyCodec(_quota_text, True, False),
    "fixed-window": PolicyCodec(
        lambda p, now: f" {_ANCHOR_LETTERS[p.anchor]}{p.period!r} {p.count}", False, False
    ),
    "sliding-window": PolicyCodec(lambda p, now: f" s{p.period!r} {p.count}", False, False),
    "lockout": PolicyCodec(lambda p, now: f" l{p.within!r}/{p.duration!r} {p.burst}", False, True),
    "concurrency": PolicyCodec(lambda p, now: f" c{p.lease!r} {p.limit}", False, False),
}

#: The letter of a policy text that takes slots (a concurrency's): ``Argv``
#: tells them by their text, where a plain cost is checked (``slot_cost``).
_SLOTS = ord("c")


def policy_codec(policy: object) -> PolicyCodec:
    """The codec of ``policy``'s kind: the one place that tells policies apart;
    ``ValueError`` for anything else (no ``kind`` of its class's own, or an unknown one)."""
    kind = getattr(type(policy), "kind", None)
    codec = _CODECS.get(kind) if isinstance(kind, str) else None
    if codec is None:
        raise ValueError(
            "limit must be a limiter.Limit, Quota, FixedWindow, SlidingWindow, Concurrency "
            f"or Lockout, got {policy!r:.100}"
        )
    return codec


# -- costs -----------------------------------------------------------------------

_MAX_COST = float(2**53)  # the largest burst a Limit accepts
_MAX_CHARGE = float(2**54)  # twice that: a charge's bound for every limit
_MAX_COST_TEXT = repr(_MAX_CHARGE)
_MAX_REFUND_TEXT = repr(-_MAX_CHARGE)
_HOLD_LETTERS = {"take": "t", "give": "g", "renew": "r"}


def cost_text(cost: Any) -> str:
    """One ``cost`` of the grammar, checked as ``step`` checks it (``ValueError``, ``TypeError``).

    A number above 2**53 (more than any burst, denied alike) and a Charge or
    Refund beyond 2**54 (at least twice any burst: the bound alike) are sent
    as 2**54, so the script never reads a huge number nor ``inf``.
    """
    if cost.__class__ is int and cost == 1:  # the usual cost, formatted once
        return "1.0"
    if cost.__class__ is Refund:  # "-t": the debt or the count stops at 0
        value = float(cost)
        text = repr(value) if value >= -_MAX_CHARGE else _MAX_REFUND_TEXT
        taken_at = cost.taken_at
        return text if taken_at is None else text + "@" + repr(taken_at)
    if cost.__class__ is Charge:  # "!t": taken up to the bound
        value = float(cost)
        return "!" + (repr(value) if value <= _MAX_CHARGE else _MAX_COST_TEXT)
    if cost.__class__ is Hold:  # "t", "g" or "r", and the holder (a whole float, exact)
        return _HOLD_LETTERS[cost.action] + repr(cost.holder)
    value = validate_cost(cost)
    return _MAX_COST_TEXT if value > _MAX_COST else repr(value)


def slot_cost(policy: Any, cost: Any) -> None:
    """Raise the concurrency step's ``TypeError`` for a plain cost > 0 (checked first)."""
    if cost.__class__ is not Hold:
        policy.step(None, 0.0, cost, False)  # rule 5: anything else is a peek


def costs_text(cost: Cost, count: int) -> str:
    """``costs`` for ``count`` policies: one for all, or a list or tuple of one each."""
    if cost.__class__ is tuple or cost.__class__ is list:
        return ",".join([cost_text(c) for c in validate_costs(cost, count)])  # type: ignore[union-attr]
    return cost_text(cost)


class Argv:
    """One store's ARGV builder; it keeps the text of up to 1024 untimed policies."""

    __slots__ = ("_texts", "server_time")

    def __init__(self, server_time: bool) -> None:
        self.server_time = server_time
        self._texts: Dict[Any, bytes] = {}

    def args(self, policies: Sequence[Limit], cost: Cost, now: Optional[float]) -> List[bytes]:
        """``[argv]`` for ``policies`` (``ValueError`` or ``TypeError`` before any I/O).
        ``now``: seconds, or ``None`` for the server's TIME (or ``time.time()`` without
        ``server_time``, and always when a policy is timed)."""
        # The policies first: a timed one (a quota, never cached) may fix now.
        texts = self._texts
        if len(policies) == 1:
            policy = policies[0]
            packed = texts.get(policy)
            if packed is None:
                now, packed = self._uncached(policy, now)
            head = (self._now(now) + " " + cost_text(cost)).encode("ascii")
            if packed[1] == _SLOTS:
                slot_cost(policy, cost)
            return [head + packed]
        parts = [b""]
        for policy in policies:
            packed = texts.get(policy)
            if packed is None:
                now, packed = self._uncached(policy, now)
            parts.append(packed)
        parts[0] = (self._now(now) + " " + costs_text(cost, len(policies))).encode("ascii")
        for i, packed in enumerate(parts):
            if i and packed[1] == _SLOTS:
                slot_cost(policies[i - 1], cost[i - 1] if isinstance(cost, (tuple, list)) else cost)
        return [b"".join(parts)]

    def many(self, policies: Sequence[Limit], cost: Cost, now: Optional[float]) -> List[bytes]:
        """``args`` of an ``apply_many`` call: one policy may not be a lone lockout."""
        if len(policies) == 1:  # the one-policy form of the script, as step_all allows it
            if policy_codec(policies[0]).last:
                raise ValueError("a Lockout needs at least one limit before it")
            if cost.__class__ is tuple or cost.__class__ is list:
                cost = validate_costs(cost, 1)[0]  # type: ignore[index]
        return self.args(policies, cost, now)

    def _now(self, now: Optional[float]) -> str:
        """``now`` of the grammar: "" for the server's TIME, else a finite float's repr."""
        if now is None:
            return "" if self.server_time else repr(time.time())
        try:
            value = float(now)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"now must be a finite number of seconds, got {now!r:.100}") from None
        if value - value != 0.0:
            raise ValueError(f"now must be a finite number of seconds, got {now!r}")
        return repr(value)

    def _uncached(self, policy: Limit, now: Optional[float]) -> Tuple[Optional[float], bytes]:
        """``(now, text)`` of a policy not in the cache; a timed one fixes now (the client's)."""
        codec = policy_codec(policy)
        if codec.timed:
            value = float(self._now(time.time() if now is None else now))
            return value, codec.text(policy, value).encode("ascii")
        packed = codec.text(policy, 0.0).encode("ascii")
        texts = self._texts
        if len(texts) > 1024:
            texts.clear()
        texts[policy] = packed
        return now, packed


# -- replies ---------------------------------------------------------------------


def _make(
    policy: Any, allowed: Any, remaining: Any, reset_after: Any, retry_after: Any
) -> RateLimitResult:
    """A ``RateLimitResult`` from one policy's four reply fields (bytes or str, as sent)."""
    # Field for field what limiter.core.bucket.step builds (hot path: tuple.__new__).
    return tuple.__new__(
        RateLimitResult,
        (
            int(allowed) == 1,
            policy.burst,
            int(float(remaining)),
            float(reset_after),
            float(retry_after),
            policy.window,
            (),
            policy.name,
            policy.kind,
        ),
    )


def decode_result(reply: Any, policy: Limit, kind: str) -> RateLimitResult:
    """The result of a one-key reply; a malformed one is ``StoreError`` naming ``kind``."""
    try:
        return _make(policy, *reply.split())
    except (AttributeError, TypeError, ValueError) as exc:
        raise _bad_reply(kind, reply) from exc


def decode_results(reply: Any, policies: Sequence[Limit], kind: str) -> List[RateLimitResult]:
    """``result`` of each key of a reply, in order; a malformed one is ``StoreError``."""
    try:
        fields = reply.split()
        if len(fields) != 4 * len(policies):
            raise ValueError(f"{len(fields)} fields for {len(policies)} limits")
        return [_make(policy, *fields[4 * i : 4 * i + 4]) for i, policy in enumerate(policies)]
    except (AttributeError, TypeError, ValueError) as exc:
        raise _bad_reply(kind, reply) from exc


def _bad_reply(kind: str, reply: Any) -> StoreError:
    return StoreError(f"{kind}: unexpected script reply {reply!r:.200}")
