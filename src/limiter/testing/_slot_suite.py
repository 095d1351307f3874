"""``SlotConformance``: ``Concurrency`` slots on a store, cases ``StoreConformance``
inherits (private: import the suites from ``limiter.testing``).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from limiter.core.concurrency import Concurrency
from limiter.core.costs import Hold
from limiter.core.limits import Limit
from limiter.testing._shared import T0, StoreDriver, property_test


def _slot_steps(st: Any) -> Dict[str, Any]:
    return {
        "policy": st.builds(Concurrency, st.integers(1, 4), st.sampled_from([0.5, 2.0, 60.0])),
        # (seconds on, in leases: back beyond the clock tolerance too; action; holder)
        "ops": st.lists(
            st.tuples(
                st.floats(-3.0, 1.5),
                st.sampled_from(["take", "take", "give", "renew", "peek"]),
                st.integers(1, 6),
            ),
            min_size=1,
            max_size=30,
        ),
    }


class SlotConformance(StoreDriver):
    """The ``Concurrency`` cases of ``StoreConformance`` (which defines the ``store`` fixture)."""

    @property_test(_slot_steps)
    def test_slots_match_the_pure_step(
        self, policy: Concurrency, ops: List[Any], store: Any
    ) -> None:
        """The store computes what ``step`` computes for slots, expiry and clock steps included."""
        steps = [
            (leases_on * policy.lease, 0 if action == "peek" else Hold(float(holder), action))
            for leases_on, action, holder in ops
        ]
        self.replay(store, "slot-prop", policy, steps)

    def test_slots_are_taken_up_to_the_limit_and_come_back(self, store: Any) -> None:
        slots = Concurrency(3, lease=30)
        taken = [self.apply(store, "s", slots, Hold(float(h))) for h in (1, 2, 3, 4)]
        assert [r.allowed for r in taken] == [True, True, True, False]
        assert [r.remaining for r in taken] == [2, 1, 0, 0]
        assert all((r.limit, r.window, r.kind) == (3, 30.0, "concurrency") for r in taken)
        refused = taken[3]  # a hint: the first lease ends 30 s after it was taken
        assert refused.retry_after == pytest.approx(30, abs=1e-6)
        assert refused.reset_after == pytest.approx(30, abs=1e-6)
        given = self.apply(store, "s", slots, Hold(2.0, "give"), T0 + 5)
        assert (given.allowed, given.remaining) == (True, 1)
        again = self.apply(store, "s", slots, Hold(4.0), T0 + 5)
        assert (again.allowed, again.remaining) == (True, 0)
        assert not self.apply(store, "s", slots, Hold(5.0), T0 + 5).allowed

    def test_a_lease_expires_and_frees_its_slot(self, store: Any) -> None:
        slots = Concurrency(1, lease=10)
        assert self.apply(store, "e", slots, Hold(1.0)).allowed
        assert not self.apply(store, "e", slots, Hold(2.0), T0 + 9.99).allowed
        assert self.apply(store, "e", slots, Hold(2.0), T0 + 10).allowed  # rule 2
        late = self.apply(store, "e", slots, Hold(1.0, "give"), T0 + 11)
        assert (late.allowed, late.remaining) == (False, 0)  # its lease had expired
        # ... and that give freed nobody else's slot:
        assert not self.apply(store, "e", slots, Hold(3.0), T0 + 11).allowed

    def test_renewing_extends_a_lease(self, store: Any) -> None:
        slots = Concurrency(1, lease=10)
        assert self.apply(store, "r", slots, Hold(1.0)).allowed
        renewed = self.apply(store, "r", slots, Hold(1.0, "renew"), T0 + 8)
        assert renewed.allowed
        assert renewed.reset_after == pytest.approx(10, abs=1e-6)
        assert not self.apply(store, "r", slots, Hold(2.0), T0 + 17).allowed
        assert self.apply(store, "r", slots, Hold(2.0), T0 + 18).allowed
        lapsed = self.apply(store, "r", slots, Hold(1.0, "renew"), T0 + 19)
        assert not lapsed.allowed  # its lease expired and the one slot is taken

    def test_slots_are_all_or_nothing_beside_a_rate(self, store: Any) -> None:
        rate, slots = Limit(1, 2, name="rate"), Concurrency(1, lease=60, name="inflight")
        keys, policies = ["k:slot-rate", "k:slot-inflight"], [rate, slots]
        first = self.apply_many(store, keys, policies, (1, Hold(1.0)))
        assert first.allowed
        # Refused for want of a slot: no token taken.
        busy = self.apply_many(store, keys, policies, (1, Hold(2.0)))
        assert (busy.allowed, busy.policy) == (False, "inflight")
        assert self.apply(store, keys[0], rate, 0).remaining == 1
        assert self.apply(store, keys[1], slots, Hold(1.0, "give")).allowed
        # Refused by the rate: no slot taken.
        assert self.apply_many(store, keys, policies, (2, Hold(3.0))).policy == "rate"
        assert self.apply(store, keys[1], slots, 0).remaining == 1

    def test_slots_are_exact_under_load(self, store: Any) -> None:
        """As many holders as the threads (or tasks) take at once: exactly ``limit`` get one."""
        slots, copies = Concurrency(3, lease=60), max(self.threads, 8)
        holds = [("load", slots, Hold(float(i + 1))) for i in range(copies * 4)]
        assert self.at_once(store, [holds[i::copies] for i in range(copies)]) == 3
