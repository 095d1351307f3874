"""What having tokenlimiter installed costs: ``import limiter`` and the pytest plugin.

Every figure comes from fresh subprocesses of this interpreter, best of ``runs``:

- **import**: the cumulative microseconds of every import a statement triggers
  (``python -X importtime -c STATEMENT``: the top-level entries after start-up,
  summed), and the wall time of ``python -c STATEMENT`` less that of
  ``python -c pass``.  ``import limiter`` alone loads nothing (the names load on
  first use), so ``from limiter import RateLimiter`` is measured too: it is
  what an application pays.
- **plugin**: pytest loads the ``pytest11`` entry point ``limiter`` in every
  run of every project that has tokenlimiter installed.  Timed inside a pytest
  run of an unrelated one-test project (``EntryPoint.load`` and the plugin's
  registration wrapped), with the modules the load imported.  Comparing whole
  runs with and without ``-p no:limiter`` cannot show it: a pytest run with
  this environment's plugins takes ~0.7 s of CPU, give or take 0.1 s.

Two bytecode conditions: ``cached`` (a warm ``__pycache__`` in a private
``PYTHONPYCACHEPREFIX``, as an installed wheel has) and ``compiled``
(``PYTHONDONTWRITEBYTECODE=1``, as this machine's environment and many
containers set: modules without a cached ``.pyc``, an editable checkout's, are
compiled from source in every process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: The statements timed; the first is the headline figure.
STATEMENTS = ("import limiter", "from limiter import RateLimiter")

_IMPORTTIME = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|( +)(\S.*)$")

# Runs pytest on an unrelated project and reports how long loading and
# registering the limiter entry point took and which modules the load imported
# (JSON on stdout).
_PLUGIN_DRIVER = r"""
import contextlib, io, json, sys, time
import importlib.metadata as md
import pytest
from _pytest.config import PytestPluginManager

seen = {"seconds": 0.0}
load, register = md.EntryPoint.load, PytestPluginManager.register

def timed_load(self):
    if self.group != "pytest11" or self.name != "limiter":
        return load(self)
    before = set(sys.modules)
    start = time.perf_counter()
    try:
        return load(self)
    finally:
        seen["seconds"] += time.perf_counter() - start
        seen["modules"] = sorted(set(sys.modules) - before)

def timed_register(self, plugin, name=None):
    if name != "limiter":
        return register(self, plugin, name)
    start = time.perf_counter()
    try:
        return register(self, plugin, name)
    finally:
        seen["seconds"] += time.perf_counter() - start

md.EntryPoint.load = timed_load
PytestPluginManager.register = timed_register
with contextlib.redirect_stdout(io.StringIO()):
    code = pytest.main(sys.argv[1:])
print(json.dumps({"exit": int(code), **seen}))
"""


def statement_us(stderr: str) -> int:
    """Cumulative µs of the imports after start-up in ``-X importtime`` output.

    Start-up ends with the top-level ``site`` entry; every top-level entry
    after it is an import the statement triggered (a lazily loaded name shows
    as its own top-level entry, hence the sum).
    """
    total = 0
    started = False
    for line in stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if m is None or len(m.group(2)) != 1:  # nested entries are in their parent's figure
            continue
        if not started:
            started = m.group(3) == "site"
            continue
        total += int(m.group(1))
    return total


def _env(condition: str, cache: str) -> Dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    if condition == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(cmd: Sequence[str], env: Dict[str, str], cwd: Optional[str] = None) -> Tuple[float, float]:
    """Wall and CPU (user + system) seconds of one subprocess run.

    CPU time barely moves when other jobs share the machine; wall time does.
    """
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def _delta_ms(runs: List[Tuple[float, float]], base: List[Tuple[float, float]], i: int) -> float:
    return round((min(r[i] for r in runs) - min(b[i] for b in base)) * 1e3, 2)


def _import_figures(statement: str, env: Dict[str, str], runs: int) -> Dict[str, Any]:
    exe = sys.executable
    cumulative: List[int] = []
    timed: List[Tuple[float, float]] = []
    base: List[Tuple[float, float]] = []
    for _ in range(runs):
        proc = subprocess.run(
            [exe, "-X", "importtime", "-c", statement],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        cumulative.append(statement_us(proc.stderr))
        base.append(_run([exe, "-c", "pass"], env))
        timed.append(_run([exe, "-c", statement], env))
    return {
        "cumulative_us": min(cumulative),
        "wall_ms": _delta_ms(timed, base, 0),
        "cpu_ms": _delta_ms(timed, base, 1),
        "samples_us": cumulative,
    }


def unrelated_project(root: Path) -> Path:
    """A one-test pytest project that has nothing to do with limiter."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_unrelated.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    return root


def _plugin_figures(project: Path, env: Dict[str, str], runs: int) -> Dict[str, Any]:
    exe = sys.executable
    args = [str(project), "-q", "-p", "no:cacheprovider"]
    loads: List[float] = []
    modules: List[str] = []
    for _ in range(runs):
        proc = subprocess.run(
            [exe, "-c", _PLUGIN_DRIVER, *args],
            env=env,
            cwd=project,
            check=True,
            capture_output=True,
            text=True,
        )
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        if "modules" not in report:
            return {"status": "not loaded: the limiter pytest11 entry point is not installed"}
        loads.append(report["seconds"])
        modules = report["modules"]
    return {
        "status": "ok",
        "load_ms": round(min(loads) * 1e3, 2),
        "samples_ms": [round(x * 1e3, 2) for x in loads],
        "modules": modules,
    }


def measure(runs: int = 5, conditions: Sequence[str] = ("cached", "compiled")) -> Dict[str, Any]:
    """Both figures in each bytecode condition (about 30 s for both at 5 runs)."""
    out: Dict[str, Any] = {"runs": runs, "conditions": {}}
    with tempfile.TemporaryDirectory(prefix="limiter-importcost-") as tmp:
        cache = str(Path(tmp) / "pycache")
        project = unrelated_project(Path(tmp) / "unrelated")
        has_pytest = importlib.util.find_spec("pytest") is not None
        for condition in conditions:
            env = _env(condition, cache)
            # Warm up: fills the private cache (``cached``) and the OS page cache.
            for statement in STATEMENTS:
                subprocess.run([sys.executable, "-c", statement], env=env, check=True)
            figures: Dict[str, Any] = {
                statement: _import_figures(statement, env, runs) for statement in STATEMENTS
            }
            if has_pytest:
                subprocess.run(
                    [sys.executable, "-m", "pytest", str(project), "-q", "-p", "no:cacheprovider"],
                    env=env,
                    cwd=project,
                    capture_output=True,
                )
                figures["plugin"] = _plugin_figures(project, env, runs)
            else:
                figures["plugin"] = {"status": "not measured: pytest is not installed"}
            out["conditions"][condition] = figures
    return out


def _ms(us: float) -> str:
    return f"{us / 1e3:.1f} ms"


def _delta(fig: Dict[str, Any]) -> str:
    """A process's extra cost against the baseline: CPU, then wall (noisier when shared)."""

    def one(ms: float) -> str:
        # Below a millisecond the difference of two best-of-N process times is noise.
        return f"+{ms:.0f} ms" if ms >= 1 else "<1 ms"

    return f"{one(fig['cpu_ms'])} CPU, {one(fig['wall_ms'])} wall"


#: How each bytecode condition is named in the report.
CONDITIONS = {
    "cached": "bytecode cached",
    "compiled": "sources compiled each time (`PYTHONDONTWRITEBYTECODE=1`)",
}


def rows(cost: Optional[Dict[str, Any]]) -> List[List[str]]:
    """The setup rows of ``docs/benchmarks.md`` (none for results without the figures)."""
    if cost and cost.get("error"):
        return [["`import limiter`, pytest plugin", f"not measured: {cost['error']}"]]
    if not cost or not cost.get("conditions"):
        return []
    best = f"best of {cost.get('runs', '?')}"
    imports: List[str] = []
    plugins: List[str] = []
    for condition, figures in cost["conditions"].items():
        label = CONDITIONS.get(condition, condition)
        parts = [
            f"`{s}` {_ms(figures[s]['cumulative_us'])} ({_delta(figures[s])})"
            for s in STATEMENTS
            if s in figures
        ]
        if parts:
            imports.append(f"{label}: " + ", ".join(parts))
        plugin = figures.get("plugin") or {}
        if plugin.get("status") == "ok":
            modules = plugin["modules"]
            shown = ", ".join(f"`{m}`" for m in modules[:12]) + (
                ", ..." if len(modules) > 12 else ""
            )
            plugins.append(
                f"{label}: {plugin['load_ms']:.1f} ms, importing {len(modules)} modules ({shown})"
            )
        elif plugin:
            plugins.append(f"{label}: {plugin.get('status', '')}")
    out: List[List[str]] = []
    if imports:
        out.append(
            [
                "`import limiter`",
                f"cumulative import time (`-X importtime`, {best}; in brackets: a fresh "
                "interpreter's extra CPU and wall time): " + "; ".join(imports),
            ]
        )
    if plugins:
        out.append(
            [
                "pytest plugin",
                "added to the start of an unrelated project's pytest run (entry point "
                f"loaded and registered, timed inside the run, {best}): " + "; ".join(plugins),
            ]
        )
    return out


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=1))
