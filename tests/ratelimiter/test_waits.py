"""The adapters' waits (``max_wait``, ``max_queue``): the plan step by step, then its shells.

The plan (``Waits.plan``) is driven by hand: it yields ``("try", 0)``,
``("sleep", s)`` or ``("park", s)`` and is sent ``(now, result)``, so no
test needs a clock, a thread or a sleep to check what it decides.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any, List, Optional, Tuple

import pytest

from limiter import Concurrency, Lockout, ManualClock, RateLimiter, RateLimitResult
from limiter.events import DecisionEvent, Outcome
from limiter.http.guard import Guard, Held
from limiter.http.options import MAX_QUEUE, Options
from limiter.http.request import RequestInfo
from limiter.http.responses import Response
from limiter.waiting import SLOT_POLL, Lines, Ticket, Waits, line_of, slot_given

ID = (0, "api", "k")


def refused(retry: float, kind: str = "bucket") -> RateLimitResult:
    return RateLimitResult(False, 1, 0, retry, retry, 1.0, (), "p", kind)


ALLOWED = RateLimitResult(True, 1, 0, 1.0, 0.0, 1.0, (), "p", "bucket")


def waits(max_wait: float = 1.0, max_queue: int = 100) -> Waits:
    return Waits(max_wait, max_queue, Lines())


def ticket() -> Ticket:
    return Ticket(lambda: None)


def served(plan: Any, now: float) -> float:
    """Resume ``plan`` at ``now``: it tries, is admitted; the seconds it waited."""
    assert plan.send((now, None)) == ("try", 0.0)
    result, waited = finish(plan, (now, ALLOWED))
    assert result is ALLOWED
    return float(waited)


def empty(w: Waits) -> bool:
    """True when nobody waits in ``w`` and its key's line is gone."""
    return w.waiting == 0 and not w.lines.busy(ID)


def finish(plan: Any, sent: Tuple[float, Optional[RateLimitResult]]) -> Tuple[Any, float]:
    with pytest.raises(StopIteration) as done:
        plan.send(sent)
    return done.value.value


# -- the plan --------------------------------------------------------------------


def test_a_rate_refusal_waits_exactly_its_retry_after() -> None:
    w = waits(max_wait=1.0)
    plan = w.plan(ID, ticket(), refused(0.4), 10.0)
    assert next(plan) == ("sleep", 0.4)
    assert w.waiting == 1
    assert served(plan, 10.4) == pytest.approx(0.4)
    assert empty(w)


def test_a_wait_of_exactly_max_wait_is_waited_a_longer_one_refused_at_once() -> None:
    w = waits(max_wait=1.0)
    plan = w.plan(ID, ticket(), refused(1.0), 0.0)
    assert next(plan) == ("sleep", 1.0)
    plan.close()
    first = refused(1.5)
    plan = w.plan(ID, ticket(), first, 0.0)
    with pytest.raises(StopIteration) as done:
        next(plan)
    assert done.value.value == (first, 0.0)
    assert empty(w)  # never queued
    never = refused(math.inf)
    with pytest.raises(StopIteration):
        next(w.plan(ID, ticket(), never, 0.0))


def test_a_slot_refusal_tries_every_poll_until_max_wait_and_no_further() -> None:
    w = waits(max_wait=0.12)
    plan = w.plan(ID, ticket(), refused(60.0, "concurrency"), 0.0)  # 60: an upper bound
    now, steps = 0.0, []
    step = next(plan)
    while True:
        steps.append(step)
        kind, seconds = step
        if kind == "park":
            now += seconds
            step = plan.send((now, None))
            continue
        try:
            step = plan.send((now, refused(60.0, "concurrency")))
        except StopIteration as done:
            result, waited = done.value
            break
    assert steps == [
        ("park", SLOT_POLL),
        ("try", 0.0),
        ("park", SLOT_POLL),
        ("try", 0.0),
        ("park", pytest.approx(0.02)),
        ("try", 0.0),
    ]
    assert not result.allowed and waited == pytest.approx(0.12)


def test_waiters_on_one_key_are_served_in_arrival_order() -> None:
    w = waits(max_wait=5.0)
    a, b, c = ticket(), ticket(), ticket()
    plan_a = w.plan(ID, a, refused(1.0), 0.0)
    assert next(plan_a) == ("sleep", 1.0)
    # b and c arrive while a waits: they queue without trying (no overtaking).
    plan_b = w.plan(ID, b, None, 0.1)
    plan_c = w.plan(ID, c, None, 0.2)
    assert next(plan_b) == ("park", 5.0)  # up to its deadline, 5.1
    assert next(plan_c) == ("park", 5.0)
    assert w.waiting == 3
    # c woken early (a slot given back goes to the first waiter only): c parks again.
    assert plan_c.send((0.5, None)) == ("park", pytest.approx(4.7))
    assert plan_a.send((1.0, None)) == ("try", 0.0)
    assert not b.woken
    assert finish(plan_a, (1.0, ALLOWED))[0] is ALLOWED
    assert b.woken and not c.woken  # a's turn ended: b's began
    assert plan_b.send((1.0, None)) == ("try", 0.0)
    assert plan_b.send((1.0, refused(1.0))) == ("sleep", 1.0)
    assert served(plan_b, 2.0) == pytest.approx(1.9)
    assert c.woken
    assert served(plan_c, 2.0) == pytest.approx(1.8)
    assert empty(w)


def test_a_later_waiter_is_refused_at_once_when_its_turn_cannot_come_in_time() -> None:
    w = waits(max_wait=1.0)
    plan_a = w.plan(ID, ticket(), refused(0.9), 0.0)
    assert next(plan_a) == ("sleep", 0.9)  # a passes at 0.9 at the earliest
    late = Waits(0.3, 100, w.lines)  # another adapter, same process, same key
    plan_b = late.plan(ID, ticket(), None, 0.5)
    with pytest.raises(StopIteration) as done:
        next(plan_b)  # it would have to pass by 0.8
    result, waited = done.value.value
    assert not result.allowed and result.retry_after == pytest.approx(0.4) and waited == 0.0


def test_a_waiter_whose_turn_never_comes_is_refused_at_its_deadline() -> None:
    w = waits(max_wait=2.0)
    plan_a = w.plan(ID, ticket(), refused(60.0, "concurrency"), 0.0)
    assert next(plan_a)[0] == "park"
    plan_b = w.plan(ID, ticket(), None, 1.0)
    assert next(plan_b) == ("park", 2.0)
    result, waited = finish(plan_b, (3.0, None))
    assert not result.allowed and waited == 2.0
    plan_a.close()
    assert empty(w)


def test_beyond_max_queue_a_request_is_decided_at_once() -> None:
    w = waits(max_wait=5.0, max_queue=1)
    plan_a = w.plan(ID, ticket(), refused(1.0), 0.0)
    next(plan_a)
    first = refused(1.0)
    with pytest.raises(StopIteration) as done:
        next(w.plan((0, "api", "other"), ticket(), first, 0.0))
    assert done.value.value == (first, 0.0)  # refused at once, not queued
    plan_c = w.plan(ID, ticket(), None, 0.0)  # untried: it tries once, as without waiting
    assert next(plan_c) == ("try", 0.0)
    assert finish(plan_c, (0.0, refused(1.0)))[1] == 0.0
    assert w.waiting == 1


def test_a_slot_given_back_in_the_process_wakes_the_first_waiter() -> None:
    lines = Lines()
    first, second = ticket(), ticket()
    lines.join(ID, first)
    lines.join(ID, second)
    lines.given(ID)
    assert first.woken and not second.woken
    slot_given(RateLimiter("1/s", name="api"), "k")  # the process's lines are not these
    assert not second.woken


# -- the shells, on a real limiter ------------------------------------------------


def test_run_sleeps_on_the_limiters_clock_and_reports_one_decision() -> None:
    events: List[DecisionEvent] = []
    clock = ManualClock()
    limiter = RateLimiter("1/s", clock=clock, name="api", on_decision=events.append)
    w = Waits(2.0, 10)
    assert w.run(limiter, "k", 1).allowed
    assert w.run(limiter, "k", 1).allowed
    assert clock.now() == pytest.approx(1.0)
    assert [(e.outcome, e.waited) for e in events] == [
        (Outcome.ALLOWED, 0.0),
        (Outcome.ALLOWED, pytest.approx(1.0)),
    ]
    assert not Waits(0.5, 10).run(limiter, "k", 1).allowed
    assert clock.now() == pytest.approx(1.0)  # refused at once
    assert events[-1].outcome == Outcome.DENIED and events[-1].waited == 0.0


def test_arun_waits_on_the_clock_too() -> None:
    clock = ManualClock()
    limiter = RateLimiter("2/s", clock=clock)
    w = Waits(1.0, 10)

    async def three() -> List[bool]:
        return [(await w.arun(limiter, "k", 1)).allowed for _ in range(3)]

    assert asyncio.run(three()) == [True, True, True]
    assert clock.now() == pytest.approx(0.5)


def test_a_lockout_limiter_cannot_wait() -> None:
    limiter = RateLimiter("1/s", lockout=Lockout(3, within=60, duration=3600))
    with pytest.raises(TypeError, match="lockout"):
        Waits(1.0, 10).run(limiter, "k", 1)
    with pytest.raises(TypeError, match="lockout"):
        Guard(limiter, max_wait=1.0)


def test_a_lockout_limiter_refused_for_max_wait_names_the_middleware_s_max_wait() -> None:
    # It said "waiting for tokens (acquire, throttle)": neither was used.
    limiter = RateLimiter("1/s", lockout=Lockout(3, within=60, duration=3600), name="login")
    shown = (
        "'login' has a lockout: waiting for a turn under Guard(max_wait=1.5) would count "
        "each refusal on the way as a breach and lock the caller out; a limiter with a "
        "lockout must refuse at once: drop max_wait there, or wait on a limiter without a "
        "lockout"
    )
    with pytest.raises(TypeError) as refused:
        Guard(limiter, max_wait=1.5)
    assert str(refused.value) == shown
    with pytest.raises(TypeError) as refused:
        Options({"max_wait": 2}, owner="RateLimitMiddleware", limiter=limiter)
    assert "under RateLimitMiddleware(max_wait=2) would count" in str(refused.value)
    # Options built without the limiter (the integrations' view limits): the Guard refuses it.
    with pytest.raises(TypeError) as refused:
        Guard(limiter, Options({"max_wait": 1.5}, owner="Guard"))
    assert str(refused.value) == shown
    # Chosen per request by a limiter function: refused then, with the same words.
    guard = Guard(lambda request: limiter, max_wait=1.5)
    with pytest.raises(TypeError) as refused:
        guard.decide(RequestInfo("GET", "/", {}, "198.51.100.7", None))
    assert str(refused.value) == shown


def queued(w: Waits, limiter: RateLimiter, slot: Any, waiting: int) -> Tuple[Any, List[Any]]:
    """A thread waiting in ``w`` for ``slot`` of "k", once ``waiting`` requests wait there:
    the thread, and what its wait returned or raised."""
    got: List[Any] = []

    def wait() -> None:
        try:
            got.append(w.run(limiter, "k", 1, slot.take))
        except Exception as exc:  # the test reports it
            got.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    while not (w.waiting == waiting and w.lines.busy(line_of(limiter, "k"))):
        if not thread.is_alive():
            break
        thread.join(0.001)  # until it queues
    return thread, got


def held(monkeypatch: pytest.MonkeyPatch, name: str) -> Tuple[RateLimiter, Any]:
    """A limiter of one slot of "k", and its holder; a poll of an hour: only a wake
    can let a waiter in before the test times out."""
    monkeypatch.setattr("limiter.waiting.SLOT_POLL", 3600.0)
    limiter = RateLimiter({"inflight": Concurrency(1, lease=60)}, name=name)
    holder = limiter.slot("k")
    assert holder.take().allowed
    return limiter, holder


def test_a_local_give_wakes_a_thread_waiting_for_the_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limiter, holder = held(monkeypatch, "wake")
    w = Waits(30.0, 10)
    waiter = limiter.slot("k")
    thread, got = queued(w, limiter, waiter, 1)
    assert holder.give()
    thread.join(20)
    assert got and got[0].allowed and waiter.held


def test_a_wait_longer_than_a_thread_may_block_parks_in_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # max_wait=1e10 is accepted; the second waiter parked 1e10 s at once, beyond
    # threading.TIMEOUT_MAX, and its request failed with an OverflowError.
    limiter, holder = held(monkeypatch, "huge")
    w = Waits(1e10, 10)
    first, second = limiter.slot("k"), limiter.slot("k")
    head, got_first = queued(w, limiter, first, 1)
    behind, got_second = queued(w, limiter, second, 2)
    assert holder.give()
    head.join(20)
    assert got_first[0].allowed and first.held
    assert first.give()  # the second one's turn, and the slot
    behind.join(20)
    assert not isinstance(got_second[0], Exception), got_second
    assert got_second[0].allowed and second.held
    assert w.waiting == 0


def test_a_local_give_wakes_a_task_waiting_for_the_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("limiter.waiting.SLOT_POLL", 3600.0)
    limiter = RateLimiter({"inflight": Concurrency(1, lease=60)}, name="awake")
    w = Waits(30.0, 10)

    async def main() -> RateLimitResult:
        holder = limiter.aslot("k")
        assert (await holder.atake()).allowed
        waiter = limiter.aslot("k")
        task = asyncio.ensure_future(w.arun(limiter, "k", 1, waiter.atake))
        while not w.lines.busy(line_of(limiter, "k")):
            await asyncio.sleep(0)
        assert await holder.agive()
        return await asyncio.wait_for(task, 20)

    assert asyncio.run(main()).allowed


def test_limiters_of_one_name_on_different_stores_wait_in_different_lines() -> None:
    # Two apps' limiters of the same policies share a name, not their slots; a
    # request to the second one queued behind the first one's waiter and was
    # refused with its refusal, a slot of its own free all along.
    clock = ManualClock()
    first = RateLimiter(Concurrency(1, lease=600), clock=clock)
    other = RateLimiter(Concurrency(1, lease=600), clock=clock)
    assert first.name == other.name

    async def main() -> Tuple[RateLimitResult, RateLimitResult]:
        assert (await first.aslot("k").atake()).allowed
        head = asyncio.ensure_future(Waits(1.0, 10).arun(first, "k", 1, first.aslot("k").atake))
        await asyncio.sleep(0)  # it waits for the first limiter's slot
        mine = await Waits(0.5, 10).arun(other, "k", 1, other.aslot("k").atake)
        return mine, await head

    mine, head = asyncio.run(main())
    assert mine.allowed and (mine.limit, mine.remaining) == (1, 0)
    assert not head.allowed
    assert clock.now() == pytest.approx(1.0)  # only the head waited: its max_wait


def test_a_slot_reports_takes_and_gives_in_time_or_expired() -> None:
    events: List[DecisionEvent] = []
    clock = ManualClock()
    limiter = RateLimiter(
        {"inflight": Concurrency(1, lease=10)}, clock=clock, name="s", on_decision=events.append
    )
    slot = limiter.slot("k")
    assert slot.take().allowed
    assert not limiter.slot("k").take().allowed
    assert slot.give()  # in time
    assert slot.take().allowed
    clock.advance(11)
    assert not slot.give()
    assert [e.outcome for e in events] == ["allowed", "denied", "given", "allowed", "expired"]
    assert {e.policy for e in events} == {"inflight"}


# -- the options, and the guard ----------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"max_wait": "1"}, TypeError, "'1'"),
        ({"max_wait": True}, TypeError, "True"),
        ({"max_wait": 0}, ValueError, "0"),
        ({"max_wait": -1.0}, ValueError, "-1.0"),
        ({"max_wait": math.inf}, ValueError, "inf"),
        ({"max_wait": math.nan}, ValueError, "nan"),
        ({"max_wait": 1, "max_queue": 1.5}, TypeError, "1.5"),
        ({"max_wait": 1, "max_queue": True}, TypeError, "True"),
        ({"max_wait": 1, "max_queue": 0}, ValueError, "0"),
        ({"max_queue": 10}, ValueError, "max_wait"),
    ],
)
def test_bad_waiting_options_are_refused_naming_the_value(
    options: Any, error: type, named: str
) -> None:
    with pytest.raises(error, match=named):
        Options(options)


def test_waiting_options() -> None:
    assert Options().waits is None
    default = Options({"max_wait": 2})
    assert default.waits is not None
    assert (default.waits.max_wait, default.waits.max_queue) == (2.0, MAX_QUEUE)
    assert Options({"max_wait": 0.5, "max_queue": 3}).waits.max_queue == 3  # type: ignore[union-attr]


def request() -> RequestInfo:
    return RequestInfo("GET", "/", {}, "198.51.100.7", None)


def test_a_guard_with_max_wait_waits_and_never_takes_the_sync_shortcut() -> None:
    clock = ManualClock()
    limiter = RateLimiter("1/s", clock=clock)
    guard = Guard(limiter, max_wait=1.0)
    assert not guard.nonblocking and guard.peer_decider() is None
    assert not isinstance(guard.decide(request()), Response)
    assert not isinstance(guard.decide(request()), Response)  # waited a second
    assert clock.now() == pytest.approx(1.0)
    assert isinstance(Guard(limiter).decide(request()), Response)  # no max_wait: 429
    assert clock.now() == pytest.approx(1.0)
    outcome = asyncio.run(guard.adecide(request()))
    assert not isinstance(outcome, Response)
    assert clock.now() == pytest.approx(2.0)


def test_a_guard_refuses_what_would_wait_too_long() -> None:
    clock = ManualClock()
    limiter = RateLimiter("1/minute", clock=clock)
    guard = Guard(limiter, max_wait=5.0)
    guard.decide(request())
    refused_response = guard.decide(request())
    assert isinstance(refused_response, Response) and refused_response.status == 429
    assert clock.now() == 0.0


def test_a_shadow_limiter_never_waits_and_reports_a_shadow_denial() -> None:
    events: List[DecisionEvent] = []
    clock = ManualClock()
    limiter = RateLimiter("1/minute", clock=clock, on_decision=events.append).shadowed()
    w = Waits(60.0, 10)
    w.run(limiter, "k", 1)
    assert not w.run(limiter, "k", 1).allowed  # the guard lets it through
    assert clock.now() == 0.0
    assert [e.outcome for e in events] == ["allowed", "shadow_denied"]


# -- review: clock steps, cancellation ----------------------------------------------


class SteppedBack(ManualClock):
    """A clock set back ``by`` seconds at the first sleep (an NTP step, say)."""

    def __init__(self, by: float) -> None:
        super().__init__(1000.0)
        self.by = by
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        super().sleep(seconds)
        if self.by:
            self.set(self.now() - self.by)
            self.by = 0.0


def test_a_clock_set_back_while_waiting_does_not_stretch_max_wait() -> None:
    clock = SteppedBack(by=100.0)
    limiter = RateLimiter({"inflight": Concurrency(1, lease=600)}, clock=clock, name="back")
    assert limiter.slot("k").take().allowed
    waiter = limiter.slot("k")
    result = Waits(1.0, 10).run(limiter, "k", 1, waiter.take)
    assert not result.allowed and not waiter.held
    # Not 101 s: the poll slept across the step back counts as no time.
    assert clock.slept == pytest.approx(1.0 + SLOT_POLL)


def test_a_cancelled_waiter_leaves_the_line_and_holds_no_slot() -> None:
    limiter = RateLimiter({"inflight": Concurrency(1, lease=60)}, name="cancel")
    w = Waits(30.0, 10)

    async def main() -> None:
        holder = limiter.aslot("k")
        assert (await holder.atake()).allowed
        first, second = limiter.aslot("k"), limiter.aslot("k")
        head = asyncio.ensure_future(w.arun(limiter, "k", 1, first.atake))
        while not w.lines.busy(line_of(limiter, "k")):
            await asyncio.sleep(0)
        behind = asyncio.ensure_future(w.arun(limiter, "k", 1, second.atake))
        while w.waiting < 2:
            await asyncio.sleep(0)
        head.cancel()  # the head of the line goes: the next one is served
        with pytest.raises(asyncio.CancelledError):
            await head
        assert w.waiting == 1 and not first.held
        assert await holder.agive()
        assert (await asyncio.wait_for(behind, 20)).allowed and second.held
        assert w.waiting == 0 and not w.lines.busy(line_of(limiter, "k"))
        assert await second.agive()

    asyncio.run(main())
    assert limiter.peek("k").remaining == 1


def test_a_request_waiting_for_a_slot_is_reported_once_with_its_wait() -> None:
    # Each try of the wait used to be reported as a denial, and the admission as
    # not having waited: limiter_wait_seconds never saw a slot wait.
    events: List[DecisionEvent] = []
    clock = ManualClock()
    limiter = RateLimiter(Concurrency(1, lease=3), clock=clock, on_decision=events.append)
    guard = Guard(limiter, max_wait=5.0)
    first = guard.decide(request())
    assert isinstance(first, Held)  # holds the slot; its holder never gives it back
    second = guard.decide(request())  # waits until the first one's lease has run out
    assert isinstance(second, Held) and second.slot is not None and second.slot.held
    assert [(e.outcome, e.waited) for e in events] == [
        (Outcome.ALLOWED, 0.0),
        (Outcome.ALLOWED, pytest.approx(3.0, abs=SLOT_POLL)),
    ]
    second.release()
    assert [e.outcome for e in events[2:]] == [Outcome.GIVEN]
