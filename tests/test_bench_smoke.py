"""Smoke test of the benchmark suite: the core section in tiny mode yields well-formed results.

No timing is asserted: only that every measurement has samples, positive figures
and the fields ``docs/benchmarks.md`` is rendered from.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

bench_common = pytest.importorskip("bench.common")
bench_core = pytest.importorskip("bench.core")


def test_core_section_tiny_is_well_formed(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import peers

    # Peers are optional here: keep those importable, and never the slow ones.
    monkeypatch.setattr(peers, "LIBS", [lib for lib in peers.LIBS if lib.id != "pyrate"])
    monkeypatch.setattr(bench_core, "LIBS", peers.LIBS)
    settings = bench_common.Settings(rounds=1, tiny=True)
    section = bench_core.run(settings, bench_common.Progress(enabled=False))
    assert section["name"] == "core" and section["status"] == "ok"
    ids = {m["id"] for m in section["measures"]}
    assert {"core/1/ours.check", "core/1/ours.allow", "core/100/ours.check"} <= ids
    for m in section["measures"]:
        assert m["unit"] == "ops/s"
        assert len(m["samples"]) == 1, m
        assert all(math.isfinite(x) and x > 0 for x in m["samples"]), m
        assert m["min"] <= m["median"] <= m["max"]
    curve = section["data"]["ns_per_op_by_keys"]["ours.check"]
    assert set(curve) == {"1", "100"}


def test_report_renders_targets_from_partial_results(tmp_path: Path) -> None:
    from bench import report

    settings = bench_common.Settings(rounds=1, tiny=True)
    section = bench_core.run(settings, bench_common.Progress(enabled=False))
    results = {
        "generated": "now",
        "command": "python -m bench",
        "settings": {"rounds": 1, "quick": False},
        "machine": {"packages": {}},
        "seconds": 0.0,
        "sections": {"core": section},
    }
    targets = report.targets(results)
    assert targets and all(t["status"] in ("MET", "MISSED", "NOT MEASURED") for t in targets)
    text = report.md_core(results)
    assert any("limiter check()" in line for line in text)
    # The whole page renders too (charts are optional: matplotlib is in the bench extra).
    assert tmp_path / "benchmarks.md" in report.render(results, tmp_path)
    md = (tmp_path / "benchmarks.md").read_text()
    assert "## 1. In-memory operations per second\n\nLimit: " in md
    assert "## 5. Redis\n\nNot run in this run (`--only`).\n" in md
