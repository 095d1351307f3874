"""What having tokenlimiter installed costs, asserted by structure, never by timing.

``import limiter`` loads nothing until a name is used; using the core never
imports asyncio, typing_extensions, sqlite3, redis or pytest; the pytest
plugin (loaded in every pytest run wherever the package is installed) imports
only ``limiter`` and ``limiter.testing``.  The figures themselves are in the
setup section of docs/benchmarks.md (``bench/importcost.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List

import pytest

import limiter

#: Modules the core must not drag in: each costs milliseconds or is optional.
HEAVY = ("asyncio", "typing_extensions", "sqlite3", "redis", "valkey", "pytest", "hypothesis")

#: The names that used to be imported eagerly by ``limiter/__init__.py``.
CORE = [
    "AsyncStore",
    "Clock",
    "Limit",
    "ManualClock",
    "MemoryStore",
    "RateLimitExceeded",
    "RateLimitResult",
    "RateLimiter",
    "Rule",
    "Store",
    "StoreError",
    "SystemClock",
    "rate_limit_headers",
    "step",
]


def _env() -> Dict[str, str]:
    drop = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _modules_after(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; return what it prints as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_limiter_loads_nothing_else() -> None:
    loaded = _modules_after(
        f"""
        import json, sys
        import limiter
        roots = ("limiter",) + {HEAVY!r}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in roots)))
        """
    )
    assert loaded == ["limiter"]


def test_using_the_core_and_the_adapters_imports_nothing_heavy() -> None:
    loaded = _modules_after(
        f"""
        import json, sys
        from limiter import {", ".join(CORE)}
        import limiter.adapters.asgi, limiter.adapters.httpserver, limiter.adapters.wsgi
        limiter = RateLimiter("2/second", clock=ManualClock())
        assert [limiter.allow("k") for _ in range(3)] == [True, True, False]
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
        """
    )
    assert loaded == []


def test_every_public_name_resolves() -> None:
    for name in limiter.__all__:
        assert getattr(limiter, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        limiter.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def _plugin_installed() -> bool:
    eps: Any = metadata.entry_points()
    group: List[Any] = (
        list(eps.select(group="pytest11")) if hasattr(eps, "select") else eps.get("pytest11", [])
    )
    return any(ep.name == "limiter" and ep.value == "limiter.testing" for ep in group)


UNRELATED_TESTS = """
import sys


def test_plugin_is_loaded_and_tiny(request):
    assert request.config.pluginmanager.hasplugin("limiter")
    ours = sorted(m for m in sys.modules if m == "limiter" or m.startswith("limiter."))
    assert ours == ["limiter", "limiter.testing"]


def test_fixture_still_works(limiter_clock):
    from limiter import RateLimiter

    limiter = RateLimiter("1/second", clock=limiter_clock)
    assert limiter.allow("k") and not limiter.allow("k")
    limiter_clock.advance(1)
    assert limiter.allow("k")
"""


@pytest.mark.skipif(not _plugin_installed(), reason="tokenlimiter is not pip-installed here")
def test_plugin_in_an_unrelated_project_imports_only_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_unrelated.py").write_text(UNRELATED_TESTS)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_testing_without_pytest_says_pytest_is_needed() -> None:
    result = _modules_after(
        """
        import json, sys
        sys.modules["pytest"] = None  # as if pytest were not installed
        import limiter.testing
        out = {"T0": limiter.testing.T0}
        for name in ("StoreConformance", "limiter_clock"):
            try:
                getattr(limiter.testing, name)
            except ImportError as exc:
                out[name] = str(exc)
        try:
            limiter.testing.nope
        except AttributeError:
            out["nope"] = "AttributeError"
        print(json.dumps(out))
        """
    )
    assert result["T0"] == 1_700_000_000.0
    for name in ("StoreConformance", "limiter_clock"):
        assert "needs pytest" in result[name] and "pip install pytest" in result[name], result
    assert result["nope"] == "AttributeError"


def test_the_suite_loads_on_first_use() -> None:
    from limiter.testing._adapter_suite import AdapterConformance
    from limiter.testing._store_suite import StoreConformance

    assert StoreConformance.__module__ == "limiter.testing._store_suite"
    assert AdapterConformance.__module__ == "limiter.testing._adapter_suite"
    assert callable(StoreConformance.test_matches_the_pure_step)


def test_bench_setup_figures_are_measured_and_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures of docs/benchmarks.md's setup section: shape only, one quick run."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    importcost = pytest.importorskip("bench.importcost")
    cost = importcost.measure(runs=1, conditions=("compiled",))
    figures = cost["conditions"]["compiled"]
    assert figures["from limiter import RateLimiter"]["cumulative_us"] > 0
    if _plugin_installed():
        assert figures["plugin"]["status"] == "ok"
        assert figures["plugin"]["modules"] == ["limiter", "limiter.testing"]
    rows = importcost.rows(cost)
    assert [row[0] for row in rows][:1] == ["`import limiter`"]
    assert "from limiter import RateLimiter" in rows[0][1]
    assert importcost.rows(None) == [] and importcost.rows({"error": "x"})
