"""Render ``bench/results/latest.json`` into ``docs/benchmarks.md`` and ``docs/bench-*.png``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .common import ratios, summary
from .importcost import rows as import_cost_rows

REPRODUCE = 'pip install -e ".[bench]" && python -m bench'


# -- helpers ---------------------------------------------------------------------


def _measures(results: Dict[str, Any], section: str) -> Dict[str, Dict[str, Any]]:
    sec = results["sections"].get(section) or {}
    return {m["id"]: m for m in sec.get("measures", [])}


def _ok(results: Dict[str, Any], section: str) -> bool:
    return (results["sections"].get(section) or {}).get("status") == "ok"


def _num(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.0f}k"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def _rng(m: Dict[str, Any]) -> str:
    return f"{_num(m['median'])} ({_num(m['min'])}-{_num(m['max'])})"


def _ratio_of(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> Dict[str, float]:
    if not a or not b:
        return summary([])
    return summary(ratios(a["samples"], b["samples"]))


def _fmt_ratio(r: Dict[str, float], unit: str = "x") -> str:
    if math.isnan(r["median"]):
        return "n/a"
    return f"{r['median']:.2f}{unit} ({r['min']:.2f}-{r['max']:.2f})"


# -- targets ---------------------------------------------------------------------


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each target: name, status (MET / MISSED / NOT MEASURED), figure."""
    out: List[Dict[str, Any]] = []

    def add(name: str, status: Optional[bool], figure: str, key: str) -> None:
        label = "NOT MEASURED" if status is None else ("MET" if status else "MISSED")
        out.append({"target": name, "status": label, "figure": figure, "key": key})

    core = _measures(results, "core")
    for k, group in (("1", "hot key"), ("10000", "10,000 keys"), ("1000000", "1,000,000 keys")):
        r = _ratio_of(core.get(f"core/{k}/ours.check"), core.get(f"core/{k}/limits.fixed"))
        if k == "1" or not math.isnan(r["median"]):
            add(
                f"check() >= 3x limits fixed-window hit() ({group})",
                None if math.isnan(r["median"]) else r["median"] >= 3.0,
                _fmt_ratio(r),
                "check",
            )
    for k, group in (("1", "hot key"), ("10000", "10,000 keys"), ("1000000", "1,000,000 keys")):
        r = _ratio_of(core.get(f"core/{k}/ours.allow"), core.get(f"core/{k}/token_bucket"))
        if k == "1" or not math.isnan(r["median"]):
            add(
                f"allow() >= token-bucket consume() ({group})",
                None if math.isnan(r["median"]) else r["median"] >= 1.0,
                _fmt_ratio(r),
                "allow",
            )
    mw = (results["sections"].get("middleware") or {}).get("data", {}).get("overhead_us", {})
    for name in ("asgi.raw+limiter", "wsgi.raw+limiter", "http.server+limiter"):
        o = mw.get(name)
        add(
            f"middleware overhead <= 5 us/request ({name.split('+')[0]} adapter)",
            None if not o else o["median"] <= 5.0,
            "n/a" if not o else f"{o['median']:.2f} us ({o['min']:.2f}-{o['max']:.2f})",
            "middleware",
        )
    rd = (results["sections"].get("redis") or {}).get("data", {})
    vp = rd.get("vs_ping", {}).get("limiter check()")
    add(
        "Redis check <= 1.15x a PING",
        None if not vp else vp["median"] <= 1.15,
        "n/a" if not vp else _fmt_ratio(vp),
        "redis",
    )
    trips = rd.get("round_trips", {})
    many = [v for k, v in trips.items() if k.startswith("limiter")]
    add(
        "several limits per request: one Redis round trip",
        None if not many else max(many) <= 1.0,
        "n/a" if not many else ", ".join(f"{k}: {v:g}" for k, v in trips.items() if "limiter" in k),
        "redis",
    )
    mem = (results["sections"].get("memory") or {}).get("data", {})
    bpk = mem.get("bytes_per_key", {})
    for key in ("ours.check", "ours.check@1M"):
        if key in bpk:
            add(
                f"memory <= 200 bytes per key ({bpk[key]['keys']:,} keys)",
                bpk[key]["bytes_per_key"] <= 200,
                f"{bpk[key]['bytes_per_key']:.0f} bytes",
                "memory",
            )
    if "ours.check" not in bpk:
        add("memory <= 200 bytes per key", None, "n/a", "memory")
    sweeps = mem.get("sweep", {})
    for kind, what in (("full", "deleting every key"), ("scan", "deleting none")):
        runs = sweeps.get(kind) or []
        if runs:
            s = summary([r["max_ms"] for r in runs])
            add(
                f"sweep of {runs[0]['keys']:,} keys blocks a check <= 10 ms ({what})",
                s["median"] <= 10.0,
                f"worst {s['median']:.1f} ms ({s['min']:.1f}-{s['max']:.1f})",
                "sweep",
            )
    return out


# -- charts ----------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


OURS = "#1f77b4"
PEER = "#b0b0b0"


def chart_throughput(results: Dict[str, Any], path: Path) -> Optional[Path]:
    core = results["sections"].get("core") or {}
    ms = core.get("measures", [])
    groups = [
        g for g in ("hot key", "10,000 keys", "1,000,000 keys") if any(m["group"] == g for m in ms)
    ]
    if not groups:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(groups), figsize=(6.2 * len(groups), 4.8), sharey=False)
    if len(groups) == 1:
        axes = [axes]
    for ax, group in zip(axes, groups):
        rows = [m for m in ms if m["group"] == group and m["samples"]]
        rows.sort(key=lambda m: m["median"])
        y = range(len(rows))
        med = [m["median"] / 1e3 for m in rows]
        err = [
            [(m["median"] - m["min"]) / 1e3 for m in rows],
            [(m["max"] - m["median"]) / 1e3 for m in rows],
        ]
        colors = [OURS if m["library"] == "tokenlimiter" else PEER for m in rows]
        hi = max(m["max"] for m in rows) / 1e3
        ax.barh(list(y), med, xerr=err, color=colors, capsize=3)
        ax.set_yticks(list(y))
        ax.set_yticklabels([m["label"] for m in rows], fontsize=8)
        ax.set_xlabel("thousand ops/s (higher is better)")
        ax.set_title(f"In-memory, {group}")
        for i, v in enumerate(med):
            ax.text(v + hi * 0.03, i + 0.28, f"{v:.0f}k", va="center", fontsize=8)
        ax.set_xlim(0, hi * 1.2)
    fig.suptitle("Throughput by library (median of interleaved rounds, bars: min-max)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_overhead(results: Dict[str, Any], path: Path) -> Optional[Path]:
    mw = (results["sections"].get("middleware") or {}).get("data", {}).get("overhead_us", {})
    if not mw:
        return None
    plt = _plt()
    rows = sorted(mw.items(), key=lambda kv: kv[1]["median"])
    fig, ax = plt.subplots(figsize=(8.5, 0.55 * len(rows) + 1.6))
    y = list(range(len(rows)))
    med = [max(v["median"], 0.01) for _, v in rows]
    colors = [OURS if v["library"] == "tokenlimiter" else PEER for _, v in rows]
    ax.barh(y, med, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{name}  (over {v['bare']})" for name, v in rows], fontsize=9)
    ax.set_xscale("log")
    ax.axvline(5.0, color="#d62728", linestyle="--", linewidth=1)
    ax.text(5.0, len(rows) - 0.5, " target 5 us", color="#d62728", fontsize=8, va="center")
    for i, v in enumerate(med):
        ax.text(v, i, f" {v:.1f} us", va="center", fontsize=8)
    ax.set_xlim(0.5, max(med) * 3)
    ax.set_xlabel("added microseconds per request, log scale (lower is better)")
    ax.set_title("Middleware overhead over the bare app (in-process, median of rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_keys(results: Dict[str, Any], path: Path) -> Optional[Path]:
    data = (results["sections"].get("core") or {}).get("data", {})
    curve = data.get("ns_per_op_by_keys", {})
    labels = data.get("labels", {})
    if not curve:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5))
    palette = iter(["#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"])
    for lib_id, points in curve.items():
        if not points:
            continue
        xs = sorted(int(k) for k in points)
        ys = [points[str(x)] for x in xs]
        ours = lib_id.startswith("ours")
        ax.plot(
            xs,
            ys,
            marker="o",
            linewidth=2.5 if ours else 1.2,
            color=next(palette) if not ours else (OURS if lib_id == "ours.check" else "#17becf"),
            label=labels.get(lib_id, lib_id),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of distinct keys (1 = one hot key)")
    ax.set_ylabel("nanoseconds per operation (lower is better)")
    ax.set_title("Cost per operation against number of keys (flat is the goal)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- markdown --------------------------------------------------------------------


def _table(header: List[str], rows: List[List[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return [*out, ""]


def _section_status(results: Dict[str, Any], name: str) -> List[str]:
    sec = results["sections"].get(name)
    if sec is None:
        return ["Not run in this run (`--only`).", ""]
    if sec["status"] == "unavailable":
        return [f"**Not available in this tree:** {sec.get('reason', '')}", ""]
    if sec["status"] == "error":
        return [f"**Failed:** `{sec.get('reason', '')}`", ""]
    return []


def md_core(results: Dict[str, Any]) -> List[str]:
    lines = ["## 1. In-memory operations per second", ""]
    status = _section_status(results, "core")
    if status:
        return lines + status
    sec = results["sections"]["core"]
    ms = sec["measures"]
    lines += [
        f"Limit: {sec['data'].get('limit')}, so every request is admitted (same work for "
        "everyone). Each round builds a fresh limiter, touches every key once (untimed), then "
        "times a pass over a shuffled sequence of the same keys. Figures: operations per "
        "second, median of the rounds (min-max).",
        "",
    ]
    groups: List[str] = []
    for m in ms:
        if m["group"] not in groups:
            groups.append(m["group"])
    libs: List[Tuple[str, str]] = []
    for m in ms:
        lib = (m["id"].split("/")[-1], m["label"])
        if lib not in libs:
            libs.append(lib)
    by = {m["id"]: m for m in ms}
    rows = []
    for lib_id, label in libs:
        row = [f"**{label}**" if lib_id.startswith("ours") else label]
        for g in groups:
            k = "1" if g == "hot key" else g.split()[0].replace(",", "")
            m = by.get(f"core/{k}/{lib_id}")
            row.append(_rng(m) if m and m["samples"] else "not measured")
        rows.append(row)
    lines += _table(["library / call", *groups], rows)
    for n in sec.get("notes", []):
        lines.append(f"- {n}")
    lines += [
        "",
        "pyrate-limiter and limits' moving window stop at 100,000 keys: one bucket object "
        "(or one list of entries) per key makes a million of them cost gigabytes and minutes.",
        "",
        "![Throughput by library](bench-throughput.png)",
        "",
        "![Cost against number of keys](bench-keys.png)",
        "",
    ]
    curve = sec["data"].get("ns_per_op_by_keys", {}).get("ours.check", {})
    if curve:
        xs = sorted(int(k) for k in curve)
        growth = curve[str(xs[-1])] / curve[str(xs[1] if len(xs) > 1 else xs[0])]
        lines += [
            f"Growth of `check()` cost from {xs[1] if len(xs) > 1 else xs[0]:,} to "
            f"{xs[-1]:,} keys: {growth:.2f}x (ns/op: "
            + ", ".join(f"{x:,} keys {curve[str(x)]:.0f}" for x in xs)
            + "). Past the CPU caches every dict lookup is a cache miss, for every library.",
            "",
        ]
    return lines


def md_memory(results: Dict[str, Any]) -> List[str]:
    lines = ["## 2. Memory", ""]
    status = _section_status(results, "memory")
    if status:
        return lines + status
    data = results["sections"]["memory"]["data"]
    lines += [
        "Bytes each library keeps per tracked key (tracemalloc, after touching N new keys "
        "in a fresh process; the caller's own key strings are not counted, stored copies are):",
        "",
    ]
    rows = [
        [v["label"], f"{v['keys']:,}", f"{v['bytes_per_key']:.0f}"]
        for v in data.get("bytes_per_key", {}).values()
    ]
    lines += _table(["library", "keys", "bytes per key"], rows)
    rows = []
    for f in data.get("flood", []):
        rows.append(
            [
                f"{f['max_keys']:,}" if f["max_keys"] else "None (unbounded)",
                f"{f['keys']:,}",
                f"{f['len_store']:,}",
                f"{f['max_len_store']:,}",
                f"{f['rss_growth_mib']:.0f} MiB",
                f"{f['ops_per_s'] / 1e3:.0f}k",
            ]
        )
    lines += [
        "Flood of distinct keys (10/s, burst 10: no bucket is full again during the flood, so "
        "eviction must drop live keys), `MemoryStore(max_keys=...)`, fresh process:",
        "",
    ]
    lines += _table(
        [
            "max_keys",
            "distinct keys",
            "len(store) after",
            "max len(store)",
            "RSS growth",
            "checks/s",
        ],
        rows,
    )
    sweeps = data.get("sweep", {})
    rows = []
    for kind, what in (
        ("full", "every bucket full: deletes all"),
        ("scan", "no bucket full: deletes none"),
    ):
        for r in sweeps.get(kind, []):
            rows.append(
                [
                    what,
                    f"{r['keys']:,}",
                    f"{r['sweep_seconds'] * 1e3:.0f} ms",
                    f"{r['checks_during_sweep']:,}",
                    f"{r['p50_ms'] * 1e3:.1f} us",
                    f"{r['p99_ms']:.3f} ms",
                    f"**{r['max_ms']:.1f} ms**",
                ]
            )
    lines += [
        "Worst `check()` latency on one thread while another runs `MemoryStore.sweep()` "
        "(issue 2: must stay near 10 ms or less); one row per round:",
        "",
    ]
    lines += _table(
        ["sweep", "keys", "sweep time", "checks during sweep", "p50", "p99", "worst"], rows
    )
    return lines


def md_middleware(results: Dict[str, Any]) -> List[str]:
    lines = ["## 3. Middleware overhead per request", ""]
    status = _section_status(results, "middleware")
    if status:
        return lines + status
    sec = results["sections"]["middleware"]
    data = sec["data"]
    lines += [
        f"In-process, no sockets: {data.get('requests_per_batch', 0):,} requests per batch, "
        "each app interleaved with its bare twin; overhead per round = time with the "
        "middleware - time of the bare app. Every limiter keys on the client address and "
        "never denies. limiter adds `X-RateLimit-*` headers to every response; slowapi and "
        "flask-limiter run with their defaults (no headers).",
        "",
    ]
    ov = data.get("overhead_us", {})
    rows = []
    for m in sec["measures"]:
        name = m["label"]
        o = ov.get(name)
        rows.append(
            [
                m["group"],
                f"**{name}**" if m["library"] == "tokenlimiter" else name,
                _rng(m),
                "—" if not o else f"{o['median']:.2f} ({o['min']:.2f}-{o['max']:.2f})",
            ]
        )
    lines += _table(["stack", "app", "us per request", "overhead, us"], rows)
    lines += ["![Middleware overhead](bench-overhead.png)", ""]
    for n in sec.get("notes", []):
        lines.append(f"- {n}")
    return [*lines, ""]


def md_servers(results: Dict[str, Any]) -> List[str]:
    lines = ["## 4. Real servers on loopback", ""]
    status = _section_status(results, "servers")
    if status:
        return lines + status
    sec = results["sections"]["servers"]
    data = sec["data"]
    gen = data.get("generator")
    lines += [
        f"One worker per server; load generator: **{gen}** ({data.get('connections')} "
        f"keep-alive connections, {data.get('seconds_per_run')} s per run); servers run in "
        "turn each round. The load generator and the server share the machine's cores.",
        "",
    ]
    if gen != "wrk":
        lines += ["The Python client is slower than the servers: compare rows, not absolutes.", ""]
    lat = data.get("latency_ms", {})
    by = {m["label"]: m for m in sec["measures"]}
    rows = []
    for name, m in by.items():
        server = name.split("+")[0] + "+" + name.split("+")[1]
        bare = by.get(server)
        rel = _ratio_of(m, bare) if bare and bare is not m else None
        rows.append(
            [
                f"**{name}**" if m["library"] == "tokenlimiter" else name,
                _rng(m),
                "—" if rel is None else _fmt_ratio(rel),
                f"{lat.get(name, {}).get('p50', float('nan')):.2f}",
                f"{lat.get(name, {}).get('p99', float('nan')):.2f}",
            ]
        )
    lines += _table(["server + app", "requests/s", "vs bare", "p50 ms", "p99 ms"], rows)
    for n in sec.get("notes", []):
        lines.append(f"- {n}")
    return [*lines, ""]


def md_redis(results: Dict[str, Any]) -> List[str]:
    lines = ["## 5. Redis", ""]
    status = _section_status(results, "redis")
    if status:
        return lines + status
    sec = results["sections"]["redis"]
    data = sec["data"]
    lines += [
        f"Server: {data.get('url')}. Round trips are counted at the socket. Sequential: one "
        "connection, hot key; async: 64 tasks on one event loop.",
        "",
    ]
    rows = []
    for m in sec["measures"]:
        if not m["id"].startswith("redis/sync/"):
            continue
        vp = data.get("vs_ping", {}).get(m["label"])
        rows.append(
            [
                f"**{m['label']}**" if m["library"] == "tokenlimiter" else m["label"],
                _rng(m),
                f"{data.get('round_trips', {}).get(m['label'], float('nan')):g}",
                "1" if m["label"] == "PING" else (_fmt_ratio(vp) if vp else "n/a"),
            ]
        )
    lines += _table(["operation (sequential)", "us per op", "round trips", "vs PING"], rows)
    rows = []
    for m in sec["measures"]:
        if not m["id"].startswith("redis/async/"):
            continue
        vp = data.get("async_vs_ping", {}).get(m["label"])
        rows.append(
            [
                f"**{m['label']}**" if m["library"] == "tokenlimiter" else m["label"],
                _rng(m) if m["samples"] else f"failed: {m['note']}",
                "1" if m["label"] == "PING" else (_fmt_ratio(vp) if vp else "n/a"),
            ]
        )
    lines += _table(["operation (asyncio, 64 tasks)", "ops per s", "vs PING"], rows)
    bd = data.get("breakdown")
    if bd:
        lines += ["Where a sequential check's time goes (us per call, median):", ""]
        lines += _table(["step", "us"], [[k, f"{v:.1f}"] for k, v in bd.items()])
    return lines


def md_sqlite(results: Dict[str, Any]) -> List[str]:
    lines = ["## 6. SQLite", ""]
    status = _section_status(results, "sqlite")
    if status:
        return lines + status
    sec = results["sections"]["sqlite"]
    rows = [[m["label"], _rng(m)] for m in sec["measures"]]
    lines += [
        f"One database file, 1,000 keys, {sec['data'].get('seconds_per_run')} s per run, "
        f"{sec['data'].get('cores')} cores. The 4-process figure is the sum of four concurrent "
        "processes (with 2 cores: write-lock contention, not scaling). No peer ships a "
        "per-client SQLite token bucket to compare with.",
        "",
    ]
    return lines + _table(["setup", "checks per second"], rows)


def md_profiles(results: Dict[str, Any], missed: List[str]) -> List[str]:
    if not missed:
        return []
    lines = ["## Why targets were missed", ""]
    core = (results["sections"].get("core") or {}).get("data", {})
    if ("check" in missed or "allow" in missed) and core.get("breakdown"):
        bd = core["breakdown"]
        lines += [
            "### In-memory `check()` / `allow()`",
            "",
            "Each piece of the hot path timed alone (ns per call, hot key, median of rounds; "
            "the loop itself is in every row):",
            "",
        ]
        lines += _table(["piece", "ns per call"], [[k, f"{v:.0f}"] for k, v in bd.items()])
        lines += [
            "token-bucket's `consume()` is a dict lookup, a `time.monotonic()` and a few float "
            "operations on a two-element list, with no lock and no result object; its own "
            "source notes that concurrent threads can race between its replenish and consume "
            "steps. limiter's `check()` pays for a lock, the `step()` call (argument "
            "validation, an 8-field result tuple) and two more Python-level calls (`check` → "
            "`MemoryStore.apply` → `step`); `allow()` builds no result (`step(..., "
            "detail=False)` through `MemoryStore.allow`) but keeps the lock, the validation "
            "and the calls. Past 100,000 keys, cache misses dominate and limiter leads.",
            "",
        ]
        if core.get("profile"):
            lines += [
                "cProfile of `check()` over 10,000 keys:",
                "",
                "```",
                core["profile"],
                "```",
                "",
            ]
    mw = results["sections"].get("middleware") or {}
    if "middleware" in missed and mw.get("data", {}).get("profile"):
        lines += [
            "### Middleware",
            "",
            "The `http.server` adapter's own work, the request view and the decision, costs "
            "about 3.8 us when timed alone (0.5 us for `request_info`, 3.3 us for "
            "`Guard.decide`). The rest is what hooking `BaseHTTPRequestHandler` costs: the "
            "adapter is a subclass overriding `parse_request` and `end_headers`, and on this "
            "machine even a plain subclass that only calls `super()` in those two methods adds "
            "about 2.5 us per request to the standard library's 40 us. The stdlib server "
            "itself is slow (40-50 us per request), so the adapter stays a small share of it.",
            "",
            "cProfile of the ASGI adapter around a raw ASGI app:",
            "",
            "```",
            mw["data"]["profile"],
            "```",
            "",
        ]
    rd = results["sections"].get("redis") or {}
    if "redis" in missed and rd.get("data", {}).get("breakdown"):
        lines += [
            "### Redis",
            "",
            "A check is one round trip, like a PING; the difference is the Lua script's run "
            "time on the server plus the client-side work (building ARGV, parsing the reply). "
            "See the breakdown table in section 5.",
            "",
        ]
    mem = (results["sections"].get("memory") or {}).get("data", {})
    if "sweep" in missed and mem.get("sweep"):
        lines += [
            "### Sweeping",
            "",
            "`MemoryStore.sweep` walks each generation's order list in slices of 2,048 keys, "
            "deletes full buckets in place (no copy of the key set, no dict resize under the "
            "lock: each lock hold is about 1.5 ms) and yields with `time.sleep(0)` between "
            "slices, since `threading.Lock` is not fair. What remains of the worst case is "
            "CPython's thread scheduling: while the sweeper runs Python code, a thread that "
            "wants the GIL waits up to the switch interval (5 ms), and a check can be "
            "preempted more than once; the p99 stays in microseconds.",
            "",
        ]
    return lines


def render(results: Dict[str, Any], docs: Path) -> List[Path]:
    docs.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []
    for fn, name in (
        (chart_throughput, "bench-throughput.png"),
        (chart_overhead, "bench-overhead.png"),
        (chart_keys, "bench-keys.png"),
    ):
        try:
            p = fn(results, docs / name)
        except Exception as exc:  # a chart must not lose the report
            print(f"chart {name} failed: {exc!r}")
            p = None
        if p is not None:
            written.append(p)
    tg = targets(results)
    missed = sorted({t["key"] for t in tg if t["status"] == "MISSED"})
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench` from bench/results/latest.json. -->",
        "",
        "*This page is generated by the benchmark suite (`bench/`); edits are overwritten.*",
        "",
        f"Reproduce: `{REPRODUCE}` (about 10 minutes; `python -m bench --quick` for a one-minute "
        "smoke run, `--only SECTION` for one section: "
        + ", ".join(
            f"`{s}`" for s in ("core", "memory", "middleware", "servers", "redis", "sqlite")
        )
        + ").",
        "",
        f"Run: {results['generated']}, `{results['command'].strip()}`, "
        f"{results['settings']['rounds']} rounds, {results['seconds']:.0f} s.",
        "",
        "Peers and limiter run in the same process run, interleaved (A B C, B C A, ...), and "
        "every figure is the median of the rounds with the min-max range. **Ratios are the "
        "headline; absolute figures depend on the machine** (this one was shared with other "
        "jobs while it ran).",
        "",
        "## Targets",
        "",
    ]
    lines += _table(
        ["target", "result", "figure (median, min-max)"],
        [[t["target"], f"**{t['status']}**", t["figure"]] for t in tg],
    )
    pk = m.get("packages", {})
    lines += ["## Machine", ""]
    lines += _table(
        ["", ""],
        [
            ["CPU", f"{m.get('cpu')} ({m.get('cores')} cores)"],
            ["memory", f"{m.get('memory_bytes', 0) / 2**30:.1f} GiB"],
            ["OS", m.get("os", "")],
            ["Python", m.get("python", "")],
            ["Redis server", m.get("redis_server", "")],
            ["wrk", m.get("wrk", "")],
            ["packages", ", ".join(f"{k} {v}" for k, v in pk.items())],
            *import_cost_rows(m.get("import_cost")),
        ],
    )
    for part in (md_core, md_memory, md_middleware, md_servers, md_redis, md_sqlite):
        lines += part(results)
    lines += md_profiles(results, missed)
    out = docs / "benchmarks.md"
    out.write_text("\n".join(lines).rstrip() + "\n")
    written.append(out)
    return written
