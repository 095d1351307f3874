"""``Slot``: one holder's slot of a limiter's ``Concurrency`` policies."""

from __future__ import annotations

import random
import time
from typing import Any, Optional

from limiter.core.costs import Hold
from limiter.core.result import RateLimitResult
from limiter.events import Outcome, report
from limiter.store import is_async_only
from limiter.waiting import RateLimitExceeded, Waiter, slot_given


class Slot:
    """A slot of ``key`` for one holder: ``with limiter.slot(key):`` (``aslot``: ``async with``)
    takes it (a refusal raises ``RateLimitExceeded``) and gives it back on exit.
    ``result``: the store's last answer; ``held``: taken and not given back.  On an
    async-only store the sync methods are a ``TypeError``.
    """

    __slots__ = ("cost", "held", "holder", "key", "limiter", "quiet", "result")

    def __init__(self, limiter: Waiter, key: str, cost: Any) -> None:
        self.limiter = limiter
        self.key = key
        self.cost = cost
        # A whole float from 1 to 2**53, exact in every store (no secret: random, not secrets).
        self.holder = float(random.getrandbits(53) | 1)
        self.held = False
        self.result: Optional[RateLimitResult] = None
        #: True while its caller reports the take itself (an adapter's wait
        #: reports one decision, with the time waited, not each try).
        self.quiet = False

    def __repr__(self) -> str:
        return f"<Slot of {self.key!r} held={self.held}>"

    def _send(self, action: str) -> RateLimitResult:
        store: Any = self.limiter.store
        if is_async_only(store):
            raise TypeError(
                f"{store!r} is async only: use async with limiter.aslot(key) (atake, agive, arenew)"
            )
        one, keys, policies, cost, now = self._plan(action)
        send = store.apply if one else store.apply_many
        start = time.perf_counter()
        result = send(keys, policies, cost, now)
        return self._answer(action, result, time.perf_counter() - start)

    async def _asend(self, action: str) -> RateLimitResult:
        store: Any = self.limiter.store
        if self.limiter.nonblocking or not callable(getattr(store, "aapply", None)):
            return self._send(action)
        one, keys, policies, cost, now = self._plan(action)
        send = store.aapply if one else store.aapply_many
        start = time.perf_counter()
        result = await send(keys, policies, cost, now)
        return self._answer(action, result, time.perf_counter() - start)

    def _plan(self, action: str) -> Any:
        return self.limiter._slot_plan(self.key, self.cost, Hold(self.holder, action))

    def _answer(self, action: str, result: RateLimitResult, seconds: float) -> RateLimitResult:
        self.result = result
        was_held = self.held
        self.held = action != "give" and result[0]
        if action == "give":
            slot_given(self.limiter, self.key)  # wakes a request waiting for it
        if self.limiter.on_decision is None:
            return result
        # Takes and gives are reported; a renewal only when it took or lost the slot.
        moved = self.held - was_held
        if action == "give" or moved < 0:
            outcome = Outcome.GIVEN if result[0] else Outcome.EXPIRED
            report(self.limiter, self.key, self.cost, result, seconds, 0.0, outcome, moved)
        elif (action == "take" and not self.quiet) or (action == "renew" and moved):
            report(self.limiter, self.key, self.cost, result, seconds, slots=moved)
        return result

    def take(self) -> RateLimitResult:
        """Take the slot; the result says whether it was (``allowed``)."""
        return self._send("take")

    async def atake(self) -> RateLimitResult:
        """``take`` for asyncio."""
        return await self._asend("take")

    def give(self) -> bool:
        """Give the slot back; True when it was still held (its lease had not expired)."""
        return self._send("give")[0]

    async def agive(self) -> bool:
        """``give`` for asyncio."""
        return (await self._asend("give"))[0]

    def renew(self) -> RateLimitResult:
        """Extend the lease to ``lease`` seconds from now (take a free slot if it expired)."""
        return self._send("renew")

    async def arenew(self) -> RateLimitResult:
        """``renew`` for asyncio."""
        return await self._asend("renew")

    def __enter__(self) -> Slot:
        try:
            result = self.take()
        except BaseException:
            if self.held:  # taken, then the observer raised: no block will give it back
                self.give()
            raise
        if not result[0]:
            raise RateLimitExceeded(result)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.held:
            self.give()

    async def __aenter__(self) -> Slot:
        try:
            result = await self.atake()
        except BaseException:
            if self.held:  # as in __enter__
                await self.agive()
            raise
        if not result[0]:
            raise RateLimitExceeded(result)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.held:
            await self.agive()
