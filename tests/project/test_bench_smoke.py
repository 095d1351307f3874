"""Smoke test of the benchmark suite: tiny runs yield well-formed results in a results dir.

No timing is asserted: only that every measurement has samples, positive figures
and the fields ``docs/benchmarks.md`` is rendered from, that a run writes its
JSON and Markdown where it is told, and that only ``--publish`` touches docs/.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

bench_common = pytest.importorskip("bench.common")
bench_core = pytest.importorskip("bench.core")


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap() -> Iterator[None]:
    """The bench collects garbage before every case; in a worker that has run hundreds of
    tests first, each collection walked the whole heap (seconds per section). Freezing
    what exists leaves it only this module's new objects to walk."""
    gc.freeze()
    yield
    gc.unfreeze()


def _fast_libs(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import peers

    # Peers are optional here: keep those importable, and never the slow ones.
    monkeypatch.setattr(peers, "LIBS", [lib for lib in peers.LIBS if lib.id != "pyrate"])
    monkeypatch.setattr(bench_core, "LIBS", peers.LIBS)


def _docs_state() -> Dict[str, str]:
    docs = ROOT / "docs"
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(docs.iterdir())
        if p.name in ("benchmarks.md", "scaling.md")
        or (p.name.startswith("bench-") and p.suffix == ".png")
    }


@pytest.fixture(scope="module")
def core_section() -> Dict[str, Any]:
    """One tiny run of the core section, shared: each run takes seconds."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _fast_libs(monkeypatch)
        settings = bench_common.Settings(rounds=1, tiny=True)
        section: Dict[str, Any] = bench_core.run(settings, bench_common.Progress(enabled=False))
    return section


def test_core_section_tiny_is_well_formed(core_section: Dict[str, Any]) -> None:
    section = copy.deepcopy(core_section)
    assert section["name"] == "core" and section["status"] == "ok"
    ids = {m["id"] for m in section["measures"]}
    assert {"core/1/ours.check", "core/1/ours.allow", "core/100/ours.check"} <= ids
    assert {"core/1/floor", "core/100/floor"} <= ids  # the floor is published beside the peers
    # Issue 24: a row per window policy and call, in the same run as limits' strategies.
    for kind in ("fixed", "fixed-first", "sliding"):
        assert {f"core/1/ours.{kind}.check", f"core/100/ours.{kind}.allow"} <= ids
    for m in section["measures"]:
        assert m["unit"] == "ops/s"
        assert len(m["samples"]) == 1, m
        assert all(math.isfinite(x) and x > 0 for x in m["samples"]), m
        assert m["min"] <= m["median"] <= m["max"]
    curve = section["data"]["ns_per_op_by_keys"]["ours.check"]
    assert set(curve) == {"1", "100"}


def test_floor_bucket_admits_exactly_burst_then_denies() -> None:
    from bench.floor import FloorBucket

    bucket = FloorBucket(rate=1e-9, burst=3)
    assert [bucket.allow("k") for _ in range(5)] == [True, True, True, False, False]
    assert bucket.allow("other") is True
    with pytest.raises(ValueError, match="rate=0"):
        FloorBucket(rate=0, burst=1)


def test_run_writes_results_dir_and_never_docs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, core_section: Dict[str, Any]
) -> None:
    from bench import report, run

    # The section's own run is tested above: this test is about what run.main writes.
    monkeypatch.setattr(bench_core, "run", lambda settings, progress: copy.deepcopy(core_section))
    for chart in ("chart_throughput", "chart_overhead", "chart_keys"):  # slow; rendered below
        monkeypatch.setattr(report, chart, lambda results, path: None)
    monkeypatch.setattr(run, "DOCS", tmp_path / "must-not-exist")
    before = _docs_state()
    output = tmp_path / "results" / "latest.json"
    argv = ["--tiny", "--rounds", "1", "--only", "core", "--no-progress", "--output", str(output)]
    assert run.main(argv) == 0
    results = json.loads(output.read_text())
    assert results["settings"]["tiny"] is True
    assert set(results["sections"]) == {"core"}
    md = (output.parent / "latest.md").read_text()
    assert md.startswith("# Benchmarks\n")
    assert "python -m bench --publish" in md
    assert not (tmp_path / "must-not-exist").exists()
    assert _docs_state() == before

    # --publish renders the same page into the docs directory (a temporary one here).
    assert run.main([*argv, "--render-only", "--publish"]) == 0
    published = (tmp_path / "must-not-exist" / "benchmarks.md").read_text()
    assert published == md
    assert _docs_state() == before


def test_report_renders_targets_from_partial_results(
    tmp_path: Path, core_section: Dict[str, Any]
) -> None:
    from bench import report

    section = copy.deepcopy(core_section)
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
    names = {t["target"]: t["status"] for t in targets}
    # Targets of sections that did not run are listed, not dropped.
    flood = "deny flood on Redis: checks/s with DenyCache (defaults) >= 10x without"
    assert names[flood] == "NOT MEASURED"
    assert names["uvicorn+starlette+limiter >= 0.93x the requests/s of uvicorn+starlette"] == (
        "NOT MEASURED"
    )
    assert names["check() <= 2x the time of the floor bucket (hot key)"] in ("MET", "MISSED")
    text = report.md_core(results)
    assert any("limiter check()" in line for line in text)
    # Each window policy's check() and allow() against limits' nearest strategy: a target
    # each, and a row each of the ratios table (when limits is installed).
    windows = [t for t in targets if t["key"] == "window"]
    assert len(windows) == 6
    table = [line for line in text if line.startswith("| sliding window | **limiter check()")]
    if "core/1/limits.sliding" in {m["id"] for m in section["measures"]}:
        assert all(t["status"] in ("MET", "MISSED") for t in windows)
        assert len(table) == 1 and table[0].count("x (") == 2  # hot key and 100 keys
    else:
        assert all(t["status"] == "NOT MEASURED" for t in windows) and not table
    # The whole page renders too (charts are optional: matplotlib is in the bench extra).
    assert tmp_path / "latest.md" in report.render(results, tmp_path, page="latest.md")
    md = (tmp_path / "latest.md").read_text()
    assert "## 1. In-memory operations per second\n\nLimit: " in md
    assert "## 5. Redis\n\nNot run in this run (`--only`).\n" in md
    assert "## 7. Scaling: what a check costs the Redis server\n\nNot run" in md


def test_scaling_model_and_page_show_the_measured_figures() -> None:
    from bench import scaling, scaling_doc

    figures = {
        "lua": {"1 limit": {"usec_per_call": 10.0}, "3 limits": {"usec_per_call": 25.0}},
        "server_cpu": {
            "sequential (one connection)": {"server_cpu_us_per_check": 20.0, "checks_per_s": 9e3},
            "asyncio, 64 tasks, auto-pipelining": {
                "server_cpu_us_per_check": 12.5,
                "checks_per_s": 2e4,
            },
        },
        "memory": {"1 limit": {"used_memory_per_client": 120.0, "memory_usage_per_key": 100.0}},
        "network": {"in_bytes_per_check": 120.0, "out_bytes_per_check": 30.0},
    }
    model = scaling.model(figures)
    # 20 us per check: 50,000 checks/s per node, planned at half: 4 nodes for 100,000/s.
    assert model["un-pipelined"]["nodes_for_target"] == 4
    assert model["pipelined"]["nodes_for_target"] == 3  # 80,000/s per node, 40,000 planned
    assert model["network_mbit_per_s"] == 120.0  # 150 bytes x 100,000/s x 8
    figures["model"] = model
    text = scaling_doc.page(figures, "now", "python -m bench --only scaling")
    assert "| masters for 100,000 checks/s | **4** | **3** |" in text
    assert "| Lua, 1 limit | 10.0 |" in text


def test_redis_is_only_redis_url_or_a_throwaway(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import redisenv
    from bench.common import Unavailable

    redisenv.close()
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    with pytest.raises(Unavailable, match=r"redis://127\.0\.0\.1:1/0"):
        redisenv.url()
    assert "proc" not in redisenv._state  # no server started when REDIS_URL is given
    redisenv.close()

    pytest.importorskip("redis")
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    monkeypatch.delenv("REDIS_URL")
    try:
        url = redisenv.url()
        assert url.startswith("redis://127.0.0.1:") and ":6379/" not in url
        assert redisenv.sync_client().ping() is True
        proc = redisenv._state["proc"]
    finally:
        redisenv.close()
    assert proc.poll() is not None  # the throwaway is stopped with the run


def test_redis_window_rows_are_measured_in_one_round_trip() -> None:
    """Each window row on Redis is measured beside limits' strategy, one round trip each."""
    pytest.importorskip("redis")
    pytest.importorskip("limits")
    import os
    import shutil

    from bench import redis_bench, redisenv, report

    if shutil.which("redis-server") is None and not os.environ.get("REDIS_URL"):
        pytest.skip("redis-server is not installed and REDIS_URL is not set")
    settings = bench_common.Settings(rounds=1, tiny=True)
    try:
        section = redis_bench.run(settings, bench_common.Progress(enabled=False))
    finally:
        redisenv.close()
    rows = set(redis_bench.WINDOW_ROWS)
    measured = {m["label"] for m in section["measures"] if m["id"].startswith("redis/sync/")}
    assert rows <= measured and not section["data"]["windows"]["refused"]
    data = section["data"]
    assert set(data["windows"]["vs_limits_strategy"]) == rows
    assert {data["round_trips"][name] for name in rows} == {1.0}
    statuses = {t["target"]: t["status"] for t in report.targets({"sections": {"redis": section}})}
    for name, (_, peer) in redis_bench.WINDOW_ROWS.items():
        target = f"sequential Redis: {name} <= 1x the time of {peer}, 1 round trip"
        assert statuses[target] in ("MET", "MISSED")
    assert "Window policies beside limits' matching strategy" in "\n".join(
        report.md_redis({"sections": {"redis": section}})
    )


def test_ab_times_both_trees_of_a_revision(tmp_path: Path) -> None:
    """bench.ab exports a revision and times a case on it and on this checkout alike."""
    from bench import ab

    src = ab.export("HEAD", tmp_path)
    assert (src / "limiter" / "core" / "bucket.py").is_file()
    for tree in (src, ROOT / "src"):
        ns = ab.measure(tree, "memory check() denied", 0.001)
        assert 0 < ns < 1e7
    for case in ("memory fixed window check()", "memory sliding window check()"):
        assert 0 < ab.measure(ROOT / "src", case, 0.001) < 1e7


def test_slots_section_measures_memory_and_redis_or_says_why_not() -> None:
    """A slot (take + give back) beside check() on each store, ratios per pair; Redis rows
    are measured (two round trips a slot, one a check) or NOT MEASURED with the reason."""
    from bench import redisenv, report, slots_bench

    settings = bench_common.Settings(rounds=1, tiny=True)
    try:
        section = slots_bench.run(settings, bench_common.Progress(enabled=False))
    finally:
        redisenv.close()
    data = section["data"]
    rows = {row for pair in slots_bench.PAIRS.values() for row in pair}
    by_store: Dict[str, set] = {"memory": set(), "redis": set()}
    for m in section["measures"]:
        by_store[m["id"].split("/")[1]].add(m["label"])
        assert len(m["samples"]) == 1 and all(x > 0 for x in m["samples"]), m
    assert by_store["memory"] == rows
    assert set(data["memory"]["vs_check"]) == set(slots_bench.PAIRS)
    redis = data["redis"]
    if "not_measured" in redis:
        assert redis["not_measured"] and by_store["redis"] == set()
    else:
        assert by_store["redis"] == rows
        trips = redis["round_trips"]
        assert trips[slots_bench.CHECK] == trips[slots_bench.CHECK2] == 1.0
        assert (
            trips[slots_bench.SLOT] == trips[slots_bench.REUSED] == trips[slots_bench.SLOT2] == 2.0
        )
    text = "\n".join(report.md_slots({"sections": {"slots": section}}))
    assert "| memory | one policy | " in text and "| redis | rate + Concurrency | " in text
    assert ("**NOT MEASURED**" in text) == ("not_measured" in redis)
