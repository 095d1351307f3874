"""The concurrency step against a plain model: a dict of holders to lease ends."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.core.concurrency import Concurrency, slot_step
from limiter.core.costs import Hold
from limiter.core.state import read_leases

T0 = 1_700_000_000.0

_ops = st.lists(
    st.tuples(
        st.floats(0.0, 8.0),  # seconds on (the clock never goes back here)
        st.sampled_from(["take", "give", "renew", "peek"]),
        st.integers(1, 6),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 4), ops=_ops)
def test_the_step_keeps_what_a_dict_of_leases_keeps(
    limit: int, ops: List[Tuple[float, str, int]]
) -> None:
    policy = Concurrency(limit, lease=5.0)
    model: Dict[float, float] = {}
    state = None
    now = T0
    for seconds, action, number in ops:
        now += seconds
        holder = float(number)
        model = {h: end for h, end in model.items() if now < end}
        if action == "peek":
            expected = True
        elif action == "give":
            expected = model.pop(holder, None) is not None
        elif holder in model or len(model) < limit:
            model[holder] = now + policy.lease
            expected = True
        else:
            expected = False
        cost = 0 if action == "peek" else Hold(holder, action)
        state, result = slot_step(state, now, policy, cost)
        assert result.allowed is expected
        assert result.remaining == limit - len(model)
        assert len(model) <= limit
        if state is not None:
            pairs = read_leases(state)
            assert dict(zip(pairs[::2], pairs[1::2])) == model
        if not expected and action != "give":
            assert result.retry_after == min(model.values()) - now


def test_a_hold_says_what_it_is_survives_pickling_and_refuses_bad_values() -> None:
    import pickle

    give = Hold(5.0, "give")
    assert repr(give) == "Hold(5.0, 'give')" and float(give) == 0.0
    assert repr(Hold(7.0)) == "Hold(7.0, 'take')" and float(Hold(7.0)) == 1.0
    again = pickle.loads(pickle.dumps(give))
    assert (again.__class__, again.holder, again.action) == (Hold, 5.0, "give")
    with pytest.raises(ValueError, match="hold action must be 'take', 'give' or 'renew'"):
        Hold(5.0, "steal")
    with pytest.raises(ValueError, match="holder must be a whole float from 1 to 2\\*\\*53"):
        Hold(0.5)
