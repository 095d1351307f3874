"""What the outbound clients share: argument checks, per-host keys, server hints,
pauses.  Headers come in as a ``get(name)`` joining repeats with ``", "``.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import threading
from typing import Any, Awaitable, Callable, Dict, Generator, Iterator, List, Optional, Tuple, Union

from limiter.core.concurrency import refuse_slot_shares
from limiter.core.limits import TIME_EPSILON
from limiter.ratelimiter import RateLimiter
from limiter.store import is_async_only
from limiter.waiting import refuse_waits_with_lockout

#: A request's key: ``None`` (its host), a fixed string, or ``key(request) -> str``.
KeySpec = Union[None, str, Callable[[Any], str]]
HeaderGet = Callable[[str], Optional[str]]

# (index into the shell's actions, arguments): Pacer.plan's steps.
SLEEP, ACQUIRE, REFUND, SEND, DISCARD = range(5)
Step = Tuple[int, Tuple[Any, ...]]

#: The statuses whose hints pause a host and retry the request.
RETRY_STATUSES = frozenset({429, 503})

#: Seconds: a server hint longer than this is not waited for (the response is returned).
DEFAULT_MAX_WAIT = 300.0

# An X-RateLimit-Reset at or above this is a Unix time (GitHub's style, about
# 2001 onwards); below it, seconds from now (some APIs send a delta there).
_UNIX_TIME_FLOOR = 1e9
# At or above this, a Unix time in milliseconds (10**12 ms is 2001; 10**12 s
# would be the year 33658).
_UNIX_MS_FLOOR = 1e12
# Seconds: a longer hint is garbage (time.sleep overflows past 2**31 s on a 32-bit time_t).
_LONGEST_HINT = 1e9
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# Keys pause entries above this count trigger a sweep of the expired ones.
_PAUSES_SWEEP_AT = 1024


def host_key(scheme: str, host: str, port: Optional[int]) -> str:
    """The default key of a request: the host lowercased, with ``:port`` unless default
    (``"127.0.0.1:8080"``, ``"[::1]:8080"``, ``"api.example.com"``).
    """
    host = host.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is None or _DEFAULT_PORTS.get(scheme.lower()) == port:
        return host
    return f"{host}:{port}"


def _seconds(text: Optional[str]) -> Optional[float]:
    """A non-negative decimal number of seconds, or ``None`` for anything else."""
    if text is None:
        return None
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _hint(delay: Optional[float]) -> Optional[float]:
    """``delay`` if a clock can wait that long (at most ``_LONGEST_HINT``), else ``None``."""
    return delay if delay is not None and delay <= _LONGEST_HINT else None


def _http_date(text: Optional[str]) -> Optional[float]:
    """An HTTP-date (RFC 9110, section 5.6.7, obsolete forms too) as Unix seconds, or ``None``."""
    if text is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": RFC 5322's "UTC, origin unknown"
        when = when.replace(tzinfo=datetime.timezone.utc)
    try:
        return when.timestamp()
    except (OverflowError, ValueError, OSError):
        return None


def _split(text: str, sep: str) -> List[str]:
    """``text`` split on ``sep`` outside double-quoted strings (Structured Fields' sf-string)."""
    parts: List[str] = []
    start = 0
    quoted = escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == sep and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _draft_wait(text: Optional[str]) -> Optional[float]:
    """Seconds from a draft ``RateLimit`` field: the largest ``t`` of items with ``r=0``
    (``a``/``w`` read as ``r``/``t``), else ``None``.
    """
    if text is None:
        return None
    waits: List[float] = []
    for member in _split(text, ","):
        params: Dict[str, str] = {}
        for param in _split(member, ";")[1:]:
            name, _, value = param.partition("=")
            params[name.strip().lower()] = value.strip()
        if "r" not in params and "a" in params:
            remaining, wait = _seconds(params["a"]), _seconds(params.get("w"))
        else:
            remaining, wait = _seconds(params.get("r")), _seconds(params.get("t"))
        if remaining == 0 and wait is not None:
            waits.append(wait)
    return max(waits) if waits else None


def server_delay(get: HeaderGet, now: float) -> Optional[float]:
    """Seconds the server asks a client to wait, from the first hint found, or ``None``.

    ``Retry-After``, ``RateLimit``, ``RateLimit-Reset``, ``X-RateLimit-Reset`` in
    that order (the drafts' not with ``Age`` > 0); absolute times against ``Date``,
    else ``now``.  docs/policies.md "Outbound clients".
    """
    server_now = _http_date(get("Date"))
    reference = now if server_now is None else server_now
    delay = _hint(_retry_after(get("Retry-After"), reference))
    # The drafts' fields, unless stale from a cache: the draft says to ignore
    # them then (draft-11, 7.3).
    if delay is None and not (_seconds(get("Age")) or 0.0) > 0.0:
        delay = _hint(_draft_wait(get("RateLimit")))
        if delay is None:
            delay = _hint(_seconds(get("RateLimit-Reset")))
    if delay is not None:
        return delay
    reset = _seconds(get("X-RateLimit-Reset"))
    if reset is not None and reset >= _UNIX_TIME_FLOOR:
        if reset >= _UNIX_MS_FLOOR:
            reset /= 1000.0
        return _hint(max(0.0, reset - reference))
    return _hint(reset)


def _retry_after(text: Optional[str], reference: float) -> Optional[float]:
    """``Retry-After`` in seconds (delay-seconds, or an HTTP-date less ``reference``);
    of repeated numbers, the longest.
    """
    if text is None:
        return None
    delays = [_seconds(part) for part in text.split(",")]  # a date has a comma: no number
    if all(d is not None for d in delays):
        return max(d for d in delays if d is not None)
    at = _http_date(text)
    return None if at is None else max(0.0, at - reference)


class Pacer:
    """One client's pacing: limiter, key choice, retry policy and per-key pauses.
    Thread-safe; a pause one response asks for holds concurrent requests too.
    """

    def __init__(
        self,
        owner: str,
        limiter: object,
        key: KeySpec,
        respect_server: object,
        max_retries: object,
        max_wait: object,
        async_advice: Optional[str] = None,
    ) -> None:
        """``async_advice``: a synchronous client's ``TypeError`` advice for an async-only store."""
        if not isinstance(limiter, RateLimiter):
            raise TypeError(f"{owner}: limiter must be a limiter.RateLimiter, got {limiter!r:.100}")
        # Each request waits for a cost of 1 (acquire): told here, not at the first request.
        refuse_waits_with_lockout(
            limiter,
            f"{owner} pacing its requests (waiting for tokens)",
            "give the client a limiter without a lockout",
        )
        refuse_slot_shares(limiter.name, limiter.limits, limiter.validate_cost(1))
        self.limiter = limiter
        if isinstance(key, str):
            limiter.storage_key(key)  # raises TypeError for a rate-like key
        elif key is not None and not callable(key):
            raise TypeError(
                f"{owner}: key must be None (the host), a str or a function of the request "
                f"returning a str, got {key!r:.100}"
            )
        self.key: KeySpec = key
        if not isinstance(respect_server, bool):
            raise TypeError(
                f"{owner}: respect_server must be True or False, got {respect_server!r}"
            )
        self.respect_server = respect_server
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise TypeError(f"{owner}: max_retries must be an int >= 0, got {max_retries!r:.100}")
        if max_retries < 0:
            raise ValueError(f"{owner}: max_retries must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries
        if max_wait is not None:
            if isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)):
                raise TypeError(
                    f"{owner}: max_wait must be None or a number of seconds >= 0, "
                    f"got {max_wait!r:.100}"
                )
            if not (max_wait >= 0 and math.isfinite(max_wait)):
                raise ValueError(
                    f"{owner}: max_wait must be None or a finite number of seconds >= 0, "
                    f"got {max_wait!r}"
                )
            max_wait = float(max_wait)
        self.max_wait: Optional[float] = max_wait
        if async_advice is not None and is_async_only(limiter.store):
            raise TypeError(f"{owner}: {limiter.store!r} is async only: {async_advice}")
        self._owner = owner
        # key -> the limiter clock's time before which no request to it is sent.
        self._pauses: Dict[str, float] = {}
        self._lock = threading.Lock()

    def key_of(self, request: object, scheme: str, host: str, port: Optional[int]) -> str:
        """The limiter key of ``request`` (see ``KeySpec``)."""
        key = self.key
        if key is None:
            return host_key(scheme, host, port)
        if isinstance(key, str):
            return key
        value = key(request)
        if not isinstance(value, str):
            raise TypeError(
                f"{self._owner}: key({request!r:.100}) must return a str, got {value!r:.100}"
            )
        return value

    def _pause_left(self, key: str, now: float) -> float:
        """Seconds until ``key``'s pause ends (0 when it has none)."""
        with self._lock:
            until = self._pauses.get(key)
            if until is None:
                return 0.0
            left = until - now
            # A microsecond, the bucket's own slack: float rounding in now + left
            # must not cost another sleep.
            if left > TIME_EPSILON:
                return left
            del self._pauses[key]
            return 0.0

    def _turn(
        self, key: str, budget: float, give_up: bool
    ) -> Generator[Step, Any, Optional[float]]:
        """The steps until ``key`` is unpaused and its token taken; returns the budget left.

        A pause longer than ``budget`` is not waited: with ``give_up`` (a retry) returns
        ``None``, nothing taken; else the request is sent despite it.
        """
        now = self.limiter.clock.now
        while True:
            left = self._pause_left(key, now())
            if left > 0.0:
                if left <= budget:
                    yield SLEEP, (left,)
                    budget -= left
                    continue
                if give_up:
                    return None
                yield ACQUIRE, (key,)
                return budget
            yield ACQUIRE, (key,)
            if self._pause_left(key, now()) == 0.0:
                return budget
            # Else every waiter would be sent together the moment the pause ends.
            yield REFUND, (key,)

    def plan(self, key: str, retries: int, reply: List[Any]) -> Iterator[Step]:
        """One request's steps without I/O (turn, ``SEND``, ``DISCARD`` and again, at most
        ``retries`` times); ``reply[0]`` is then the caller's response.
        """
        # One call waits at most max_wait in pauses, in total.
        total = math.inf if self.max_wait is None else self.max_wait
        budget = yield from self._turn(key, total, False)
        while True:
            yield SEND, ()
            response = reply[0]
            if self.pause(key, response.status_code, response.headers.get) is None or not retries:
                break
            retries -= 1
            yield DISCARD, (response,)
            budget = yield from self._turn(key, budget or 0.0, True)
            if budget is None:
                break
        reply[0] = response

    def call(
        self, key: str, retries: int, send: Callable[[], Any], discard: Callable[[Any], None]
    ) -> Any:
        """Run ``plan(key, retries)``: ``send()`` sends the request, ``discard(r)`` drops one."""
        limiter = self.limiter
        actions = (limiter.clock.sleep, limiter.acquire, limiter.refund, send, discard)
        reply: List[Any] = [None]
        for step, args in self.plan(key, retries, reply):
            reply[0] = actions[step](*args)
        return reply[0]

    async def acall(
        self,
        key: str,
        retries: int,
        send: Callable[[], Awaitable[Any]],
        discard: Callable[[Any], Awaitable[None]],
    ) -> Any:
        """``call`` for asyncio: waits with ``clock.asleep`` and the limiter's ``aacquire``."""
        limiter = self.limiter
        actions = (limiter.clock.asleep, limiter.aacquire, limiter.arefund, send, discard)
        reply: List[Any] = [None]
        for step, args in self.plan(key, retries, reply):
            reply[0] = await actions[step](*args)
        return reply[0]

    def pause(self, key: str, status: int, get: HeaderGet) -> Optional[float]:
        """Seconds ``key`` is now paused for after a response, or ``None`` (no retry):
        only with ``respect_server``, a 429 or 503, and a hint within ``max_wait``.
        """
        if not self.respect_server or status not in RETRY_STATUSES:
            return None
        now = self.limiter.clock.now()
        delay = server_delay(get, now)
        if delay is None or (self.max_wait is not None and delay > self.max_wait):
            return None
        until = now + delay
        with self._lock:
            pauses = self._pauses
            if until > pauses.get(key, -math.inf):
                pauses[key] = until
            if len(pauses) > _PAUSES_SWEEP_AT:
                for stale in [k for k, at in pauses.items() if at <= now]:
                    del pauses[stale]
        return delay
