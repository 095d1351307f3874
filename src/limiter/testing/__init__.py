"""Test helpers: the ``limiter_clock`` pytest fixture (a plugin, entry point
``pytest11``) and the conformance suites ``StoreConformance`` and
``AdapterConformance``.  Without pytest, ``T0`` still works and the rest raise
``ImportError``.  See docs/testing.md.
"""

# The plugin: pytest imports it in every run of every project that installs
# tokenlimiter, so it imports nothing from limiter at load time and the suites
# load on first access.

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

try:
    import pytest
except ImportError:  # pragma: no cover - exercised in a subprocess without pytest
    _PYTEST_MISSING = True
else:
    _PYTEST_MISSING = False

if TYPE_CHECKING:
    from limiter.clock import ManualClock
    from limiter.testing._adapter_suite import AdapterConformance
    from limiter.testing._store_suite import StoreConformance

__all__ = ["T0", "AdapterConformance", "StoreConformance", "limiter_clock"]

#: Where each suite lives; pytest rewrites their asserts when they load.
_SUITES = {
    "AdapterConformance": "limiter.testing._adapter_suite",
    "StoreConformance": "limiter.testing._store_suite",
}
#: Every module of the suites (``StoreConformance`` inherits the window and slot cases).
_REWRITTEN = (
    *_SUITES.values(),
    *(f"limiter.testing._{module}" for module in ("window_suite", "slot_suite", "shared")),
)

#: A realistic Unix time, so float precision at today's epoch is exercised.
T0 = 1_700_000_000.0

if not _PYTEST_MISSING:

    @pytest.fixture
    def limiter_clock() -> ManualClock:
        """A ``ManualClock`` at 0.0 seconds; move it with ``advance()`` or ``set()``."""
        from limiter.clock import ManualClock

        return ManualClock()


def __getattr__(name: str) -> object:
    # PEP 562: called only for names not defined above.  No ``__dir__`` on
    # purpose: pytest scans a plugin's ``dir()`` for fixtures and hooks, and
    # listing the suites there would load them in every run.
    if name not in ("AdapterConformance", "StoreConformance", "limiter_clock"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _PYTEST_MISSING:
        raise ImportError(
            f"limiter.testing.{name} needs pytest, which is not installed "
            "(pip install pytest); limiter.ManualClock and limiter.testing.T0 work without it",
            name=__name__,
        )
    # limiter_clock is defined above whenever pytest is there: only the suites are left.
    # Plain asserts in the suites explain their failures, as in the user's own tests.
    unloaded = [module for module in _REWRITTEN if module not in sys.modules]
    if unloaded:
        pytest.register_assert_rewrite(*unloaded)
    suite: object = getattr(importlib.import_module(_SUITES[name]), name)
    return suite
