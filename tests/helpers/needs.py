"""Skip for want of something, saying how to get it; under ``CI=true``, fail instead.

The README's test command (``pip install -e ".[dev]"``) installs what most
tests need; the browser, the docs site and the peer libraries are in the
heavier ``full`` extra, which ``.ci/run`` installs.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

#: The command that installs every Python package the whole suite uses.
FULL = "pip install -e '.[full]'"


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``), where nothing may be skipped for want of it."""
    return os.environ.get("CI", "").lower() == "true"


def need(reason: str) -> NoReturn:
    """Skip the test with ``reason`` (what is missing and how to get it); fail it under CI."""
    __tracebackhide__ = True  # the report names the caller's line
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so it must run", pytrace=False)
    pytest.skip(reason)


def need_module(name: str, install: str = FULL) -> ModuleType:
    """The module ``name``; without it, ``need`` says to run ``install``."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(name)
    except ImportError:
        need(f"{name} is not installed: {install}")
