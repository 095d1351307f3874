"""What a check answers: ``RateLimitResult``, and ``combine`` for several policies."""

from __future__ import annotations

from typing import NamedTuple, Sequence, Tuple


class RateLimitResult(NamedTuple):
    """The outcome of one check (immutable).

    ``allowed``: whether the request was admitted.
    ``limit``: the bucket capacity (``burst``), in tokens.
    ``remaining``: whole tokens left after this request, >= 0.
    ``reset_after``: seconds until the bucket is full again, >= 0.
    ``retry_after``: seconds until a request of the same cost can pass;
    ``0.0`` when allowed, ``inf`` when the cost exceeds the burst.
    ``window``: seconds an empty bucket takes to fill (``burst / rate``).
    ``results``: with several limits, one result per limit (see ``step_all``);
    empty for a single limit.
    ``policy``: the name of the limit this result describes (``Limit.name``).
    ``kind``: the kind of policy that gave it (``Policy.kind``): ``"bucket"``,
    ``"quota"`` (all its units come back at once, at ``reset_after``) or
    ``"lockout"`` (``limit`` is its ``breaches``, ``window`` its ``within``;
    refusing, ``remaining`` is 0 and both waits are the time left).
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float
    window: float
    results: Tuple[RateLimitResult, ...] = ()
    policy: str = "default"
    kind: str = "bucket"

    @property
    def locked_out(self) -> bool:
        """True when a ``Lockout`` refused the request (the key is locked out)."""
        return self[8] == "lockout" and not self[0]


def combine(results: Sequence[RateLimitResult]) -> RateLimitResult:
    """The most restrictive of several limits' ``results``: the denial with the longest
    ``retry_after`` (then fewest tokens), else the fewest tokens left (then longest
    ``reset_after``).  A refusing lockout (last) is the result, with the most restrictive
    limit's ``limit`` and ``window`` and the longest ``retry_after``; one admitting is left out.
    """
    last = results[-1]
    if last[8] == "lockout":
        if not last[0]:
            # So that X-RateLimit-Limit shows the request limit, not a breach count.
            others = results[:-1]
            worst = min(others, key=lambda r: (r.remaining, -r.reset_after))
            retry = max([last[4]] + [r[4] for r in others if not r[0]])
            return last._replace(
                limit=worst[1], window=worst[5], retry_after=retry, results=tuple(results)
            )
        results = results[:-1]
    if all(r.allowed for r in results):
        worst = min(results, key=lambda r: (r.remaining, -r.reset_after))
    else:
        worst = max(
            (r for r in results if not r.allowed), key=lambda r: (r.retry_after, -r.remaining)
        )
    return worst._replace(results=tuple(results))
