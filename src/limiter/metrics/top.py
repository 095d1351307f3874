"""Top offenders: the keys denied most in the last ``window`` seconds, in bounded
memory (Space-Saving per time slice: ``count - error <= true count <= count``).
See docs/observability.md "How it counts".
"""

from __future__ import annotations

import heapq
import math
import threading
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

from limiter.clock import SystemClock
from limiter.events import DecisionEvent, Outcome

if TYPE_CHECKING:
    from limiter.clock import Clock

__all__ = ["TopOffenders"]


class Offender(NamedTuple):
    """A heavy hitter: ``count - error <= true count <= count`` (events in the window)."""

    key: str
    # The field hides ``tuple.count``: the name the issue and JSON use wins.
    count: int  # type: ignore[assignment]
    error: int


class _Slice:
    """One time slice: a Space-Saving summary of at most ``capacity`` counters."""

    __slots__ = ("counts", "errors", "heap", "total")

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        # Only keys that replaced another have an error; absent means 0.
        self.errors: Dict[str, int] = {}
        # (count as last pushed, key): a lower bound refreshed only at the top,
        # so an increment costs a dict update instead of a heap push.
        self.heap: List[Tuple[int, str]] = []
        self.total = 0

    def add_new(self, key: str, capacity: int) -> None:
        """Give a counter to ``key``, not counted here yet (``total`` is the caller's)."""
        counts = self.counts
        heap = self.heap
        if len(counts) < capacity:
            counts[key] = 1
            heapq.heappush(heap, (1, key))
            return
        # The top entry is the smallest once its pushed count is current: O(log n) amortized.
        while True:
            low, victim = heap[0]
            current = counts[victim]
            if current == low:
                break
            heapq.heapreplace(heap, (current, victim))
        heapq.heapreplace(heap, (low + 1, key))
        del counts[victim]
        self.errors.pop(victim, None)
        counts[key] = low + 1
        self.errors[key] = low

    def low(self, capacity: int) -> int:
        """What a key absent from this slice may have had here: 0 unless full."""
        return min(self.counts.values()) if len(self.counts) >= capacity else 0


def _outcome_values(outcomes: Iterable[Any]) -> FrozenSet[str]:
    if isinstance(outcomes, (str, bytes)) or not isinstance(outcomes, Iterable):
        raise TypeError(
            f"outcomes must be a collection of outcomes such as ('denied',), got {outcomes!r}"
        )
    known = {member.value for member in Outcome}
    found: List[str] = []
    for outcome in outcomes:
        value = outcome.value if isinstance(outcome, Outcome) else outcome
        if not isinstance(value, str):
            raise TypeError(f"an outcome must be a str or an Outcome, got {outcome!r}")
        if value not in known:
            raise ValueError(
                f"unknown outcome {outcome!r}: expected one of {', '.join(sorted(known))}"
            )
        found.append(value)
    if not found:
        raise ValueError("outcomes must name at least one outcome, got an empty collection")
    return frozenset(found)


def _int_arg(value: Any, what: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{what} must be >= {least}, got {value!r}")
    return value


class TopOffenders:
    """An ``on_decision`` observer counting keys of chosen outcomes over the last ``window`` s.

    ``capacity``: counters per slice (int >= 1); a key above ``total / capacity`` is
    always reported.  ``window``: seconds (finite, > 0).  ``slices``: int >= 1
    (at most ``capacity * slices`` counters).  ``outcomes``: strs or ``Outcome``
    members (default: denials).  ``clock``: the feeding limiters' (default
    ``SystemClock``).  ``TypeError``/``ValueError`` for bad arguments.  Thread-safe.

        top = TopOffenders(capacity=100, window=300.0)
        limiter = RateLimiter("10/s", on_decision=top)
    """

    def __init__(
        self,
        capacity: int = 100,
        window: float = 300.0,
        slices: int = 5,
        outcomes: Iterable[Any] = (Outcome.DENIED, Outcome.SHADOW_DENIED),
        clock: Optional[Clock] = None,
    ) -> None:
        self._capacity = _int_arg(capacity, "capacity")
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise TypeError(f"window must be a number of seconds, got {window!r}")
        try:
            seconds = float(window)
        except OverflowError:  # an int past the largest float: 10**400
            seconds = math.inf
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"window must be a finite number of seconds > 0, got {window!r:.100}")
        self._slices = _int_arg(slices, "slices")
        self._window = seconds
        try:
            self._width = self._window / self._slices
        except OverflowError:  # slices past the largest float: 10**400
            self._width = 0.0
        if not self._width > 0:  # a window cut too finely (subnormal, or slices too many)
            raise ValueError(f"window {window!r:.100} is too small for {slices!r:.100} slices")
        self._values = _outcome_values(outcomes)
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
        self._clock: Clock = SystemClock() if clock is None else clock
        self._lock = threading.Lock()
        self._live: Dict[int, _Slice] = {}
        # The newest slice index seen; -inf until the first event or query.
        self._head: float = -math.inf
        # The slice at ``_head`` once an event has made it: the fast path.
        self._newest: Optional[_Slice] = None

    def __repr__(self) -> str:
        outcomes = sorted(self._values)
        return (
            f"TopOffenders(capacity={self._capacity}, window={self._window!r}, "
            f"slices={self._slices}, outcomes={outcomes})"
        )

    @property
    def capacity(self) -> int:
        """Counters per slice."""
        return self._capacity

    @property
    def window(self) -> float:
        """The window's length, in seconds."""
        return self._window

    @property
    def slices(self) -> int:
        """How many slices the window is cut into."""
        return self._slices

    @property
    def total(self) -> int:
        """Events counted in the live slices (exact)."""
        with self._lock:
            return sum(piece.total for piece in self._advance())

    @property
    def counters(self) -> int:
        """Counters held now: the memory in use, at most ``capacity * slices``."""
        with self._lock:
            return sum(len(piece.counts) for piece in self._live.values())

    def __call__(self, event: DecisionEvent) -> None:
        """The ``on_decision`` observer: counts ``event.key`` at ``event.at`` if tracked."""
        if event.outcome in self._values:  # (an Outcome hashes as its str)
            self.add(event.key, event.at)

    def add(self, key: str, at: Optional[float] = None) -> None:
        """Count one event of ``key`` at ``at`` (seconds; default and non-finite:
        ``clock.now()``); one older than the live slices is not counted.
        """
        try:
            index = int((self._clock.now() if at is None else at) // self._width)
        except (TypeError, ValueError, OverflowError):  # nan, inf, not a number
            index = int(self._clock.now() // self._width)
        with self._lock:
            # Nearly every event falls in the newest slice: one comparison.  (No
            # newest slice yet, after a query moved the head: _slice_at makes it.)
            piece = self._newest if index == self._head else None
            if piece is None and (piece := self._slice_at(index)) is None:
                return  # its slice is gone
            piece.total += 1
            counts = piece.counts
            count = counts.get(key)
            if count is None:
                piece.add_new(key, self._capacity)
            else:
                counts[key] = count + 1

    def top(self, n: int = 10) -> List[Offender]:
        """The ``n`` keys with the highest counts, highest first (ties: smaller error, then key)."""
        _int_arg(n, "n", 0)
        with self._lock:
            return self._top(n)

    def as_dict(self, n: int = 10) -> Dict[str, Any]:
        """``top(n)`` and the totals, read at one instant, for ``json.dumps``:
        ``{"window_seconds", "total", "capacity", "offenders": [{"key", "count", "error"}]}``.
        """
        _int_arg(n, "n", 0)
        with self._lock:
            offenders = self._top(n)
            total = sum(piece.total for piece in self._live.values())
        return {
            "window_seconds": self._window,
            "total": total,
            "capacity": self._capacity,
            "offenders": [{"key": o.key, "count": o.count, "error": o.error} for o in offenders],
        }

    def clear(self) -> None:
        """Forget every count."""
        with self._lock:
            self._live.clear()
            self._newest = None

    def _move_head(self, head: int) -> None:
        self._head = head
        self._newest = None
        oldest = head - self._slices  # this index and below are out of the window
        for index in [i for i in self._live if i <= oldest]:
            del self._live[index]

    def _slice_at(self, index: int) -> Optional[_Slice]:
        """The slice for ``index``, made if need be; ``None`` if it is out of the window."""
        if index > self._head:
            self._move_head(index)
        elif index <= self._head - self._slices:
            return None
        piece = self._live.get(index)
        if piece is None:
            piece = self._live[index] = _Slice()
        if index == self._head:
            self._newest = piece
        return piece

    def _advance(self) -> Iterable[_Slice]:
        """The live slices as of ``clock.now()``."""
        try:
            index = int(self._clock.now() // self._width)
        except (TypeError, ValueError, OverflowError):
            index = None  # a broken clock: keep the window where the events left it
        if index is not None and index > self._head:
            self._move_head(index)
        return self._live.values()

    def _top(self, n: int) -> List[Offender]:
        capacity = self._capacity
        pieces = [(piece, piece.low(capacity)) for piece in self._advance()]
        # Start every key at the sum of the lows (absent everywhere), then
        # replace each low by the key's own counter where a slice holds it.
        base = sum(low for _, low in pieces)
        counts: Dict[str, int] = {}
        errors: Dict[str, int] = {}
        for piece, low in pieces:
            piece_errors = piece.errors
            for key, count in piece.counts.items():
                counts[key] = counts.get(key, base) + count - low
                errors[key] = errors.get(key, base) + piece_errors.get(key, 0) - low
        ranked = heapq.nsmallest(n, counts, key=lambda key: (-counts[key], errors[key], key))
        return [Offender(key, counts[key], errors[key]) for key in ranked]
