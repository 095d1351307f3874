"""Render a results JSON into a Markdown page and ``bench-*.png`` charts.

``python -m bench`` renders ``bench/results/latest.md`` (charts beside it);
``python -m bench --publish`` also renders ``docs/benchmarks.md`` and
``docs/bench-*.png``.
"""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .common import ratios, summary
from .importcost import rows as import_cost_rows
from .peers import ALGORITHM_PAIRS

REPRODUCE = 'pip install -e ".[bench]" && python -m bench --publish'

#: The key counts of the core section: measure id part -> column heading.
CORE_GROUPS = (("1", "hot key"), ("10000", "10,000 keys"), ("1000000", "1,000,000 keys"))


# -- helpers ---------------------------------------------------------------------


def _measures(results: Dict[str, Any], section: str) -> Dict[str, Dict[str, Any]]:
    sec = results["sections"].get(section) or {}
    return {m["id"]: m for m in sec.get("measures", [])}


def _data(results: Dict[str, Any], section: str) -> Dict[str, Any]:
    """The section's ``data`` ({} when the section did not run)."""
    data: Dict[str, Any] = (results["sections"].get(section) or {}).get("data", {})
    return data


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


def _span(s: Dict[str, float], unit: str = "") -> str:
    """``median<unit> (min-max)``, two decimals."""
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}-{s['max']:.2f})"


def _ratio_of(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> Dict[str, float]:
    if not a or not b:
        return summary([])
    return summary(ratios(a["samples"], b["samples"]))


def _fmt_ratio(r: Dict[str, float], unit: str = "x") -> str:
    if math.isnan(r["median"]):
        return "n/a"
    return _span(r, unit)


# -- targets ---------------------------------------------------------------------


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each target: name, status (MET / MISSED / NOT MEASURED), figure."""
    out: List[Dict[str, Any]] = []

    def add(name: str, status: Optional[bool], figure: str, key: str) -> None:
        label = "NOT MEASURED" if status is None else ("MET" if status else "MISSED")
        out.append({"target": name, "status": label, "figure": figure, "key": key})

    core = _measures(results, "core")
    for call, peer, claim, floor in (
        ("check", "limits.fixed", "check() >= 3x limits fixed-window hit()", 3.0),
        ("allow", "token_bucket", "allow() >= token-bucket consume()", 1.0),
    ):
        for k, group in CORE_GROUPS:
            r = _ratio_of(core.get(f"core/{k}/ours.{call}"), core.get(f"core/{k}/{peer}"))
            if k == "1" or not math.isnan(r["median"]):
                status = None if math.isnan(r["median"]) else r["median"] >= floor
                add(f"{claim} ({group})", status, _fmt_ratio(r), call)
    out += _window_targets(core)
    mw = _data(results, "middleware").get("overhead_us", {})
    for name in ("asgi.raw+limiter", "wsgi.raw+limiter", "http.server+limiter"):
        o = mw.get(name)
        add(
            f"middleware overhead <= 5 us/request ({name.split('+')[0]} adapter)",
            None if not o else o["median"] <= 5.0,
            "n/a" if not o else _span(o, " us"),
            "middleware",
        )
    # ops/s of check() over ops/s with the observer: how many times slower it is.
    r = _ratio_of(core.get("core/1/ours.check"), core.get("core/1/ours.check+observer"))
    add(
        "check() with a counting observer <= 1.25x the time of check() (hot key)",
        None if math.isnan(r["median"]) else r["median"] <= 1.25,
        _fmt_ratio(r),
        "core",
    )
    for ours, peer in INTEGRATION_PEERS:
        o, p = mw.get(ours), mw.get(peer)
        if not o or not p:
            add(f"{ours} overhead <= 1/10 of {peer}'s", None, "n/a", "middleware")
            continue
        if o["median"] <= 0 or p["median"] <= 0:  # below the noise of the bare app
            text = f"within noise ({o['median']:.1f} us vs {p['median']:.1f} us)"
            add(f"{ours} overhead <= 1/10 of {peer}'s", None, text, "middleware")
            continue
        ratio = p["median"] / o["median"]
        add(
            f"{ours} overhead <= 1/10 of {peer}'s",
            ratio >= 10.0,
            f"{ratio:.1f}x cheaper ({o['median']:.1f} us vs {p['median']:.1f} us)",
            "middleware",
        )
    floor = _ratio_of(core.get("core/1/floor"), core.get("core/1/ours.check"))
    add(
        "check() <= 2x the time of the floor bucket (hot key)",
        None if math.isnan(floor["median"]) else floor["median"] <= 2.0,
        _fmt_ratio(floor),
        "check",
    )
    rd = _data(results, "redis")
    for other, data_key, ceiling in (
        ("Redis.ping()", "vs_ping", 0.6),
        ("limits fixed-window hit()", "vs_limits", 0.5),
    ):
        vp = rd.get(data_key, {}).get("limiter check()")
        add(
            f"sequential Redis: check() <= {ceiling}x the time of {other}",
            None if not vp else vp["median"] <= ceiling,
            "n/a" if not vp else _fmt_ratio(vp),
            "redis",
        )
    out += _redis_window_targets(rd)
    out += _async_targets(rd)
    out += _flood_targets(rd.get("deny_flood", {}))
    trips = rd.get("round_trips", {})
    many = [v for k, v in trips.items() if k.startswith("limiter")]
    add(
        "several limits per request: one Redis round trip",
        None if not many else max(many) <= 1.0,
        "n/a" if not many else ", ".join(f"{k}: {v:g}" for k, v in trips.items() if "limiter" in k),
        "redis",
    )
    out += _server_targets(results)
    out += _postgres_targets(_data(results, "postgres"))
    mem = _data(results, "memory")
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


def _postgres_targets(pg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Issue 25: a check <= 2x a SELECT 1 (UNLOGGED: 1.5x), >= 2x pyrate-limiter's throughput."""
    from .postgres_bench import CEILINGS, OURS, PYRATE, TASKS, THREADS

    out = []
    for row, ceiling in CEILINGS.items():
        r = pg.get("vs_select1", {}).get(row)
        name = f"sequential PostgreSQL: {row} <= {ceiling}x the time of SELECT 1"
        status = None if not r else r["median"] <= ceiling
        out.append(_target(name, status, "n/a" if not r else _fmt_ratio(r), "postgres"))
    for kind, what in (("threads", f"{THREADS} threads"), ("async", f"{TASKS} asyncio tasks")):
        r = pg.get("vs_pyrate", {}).get(kind, {}).get(OURS)
        name = f"PostgreSQL, {what}: {OURS} >= 2x the checks/s of {PYRATE}"
        status = None if not r else r["median"] >= 2.0
        out.append(_target(name, status, "n/a" if not r else _fmt_ratio(r), "postgres"))
    return out


def _target(name: str, status: Optional[bool], figure: str, key: str) -> Dict[str, Any]:
    label = "NOT MEASURED" if status is None else ("MET" if status else "MISSED")
    return {"target": name, "status": label, "figure": figure, "key": key}


#: limits' rows of the in-memory table, as the targets name them.
PEER_NAMES = {
    "limits.fixed": "limits fixed-window",
    "limits.sliding": "limits sliding-window-counter",
}


def _core_groups(core: Dict[str, Dict[str, Any]]) -> List[Tuple[int, str]]:
    """``(key count, group)`` of each key count the core section ran, in order."""
    ks = sorted({int(i.split("/")[1]) for i in core if i.startswith("core/")})
    return [(k, "hot key" if k == 1 else f"{k:,} keys") for k in ks]


def _pair_ratios(core: Dict[str, Dict[str, Any]], ours: str, peer: str) -> List[Tuple[str, Any]]:
    """``(group, ops/s ratio)`` of row ``ours`` over ``peer`` for each key count both ran."""
    out = []
    for k, group in _core_groups(core):
        r = _ratio_of(core.get(f"core/{k}/{ours}"), core.get(f"core/{k}/{peer}"))
        if not math.isnan(r["median"]):
            out.append((group, r))
    return out


def _window_targets(core: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Issue 24: each window policy's check() and allow() >= 2x limits' strategy, in memory.

    One target per policy and call, met when it holds at every key count measured.
    """
    out = []
    for algorithm, check, allow, peer in ALGORITHM_PAIRS:
        if check == "ours.check":  # the token bucket has its own targets above
            continue
        for call, ours in (("check", check), ("allow", allow)):
            pairs = _pair_ratios(core, ours, peer)
            status = None if not pairs else all(r["median"] >= 2.0 for _, r in pairs)
            figure = "; ".join(f"{g}: {_fmt_ratio(r)}" for g, r in pairs) or "n/a"
            name = f"{algorithm} {call}() >= 2x {PEER_NAMES[peer]} hit() (in memory)"
            out.append(_target(name, status, figure, "window"))
    return out


def _redis_window_targets(rd: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Issue 24: on Redis each window policy's check() is no slower than limits' strategy,
    in one round trip."""
    from .redis_bench import WINDOW_ROWS

    windows = rd.get("windows", {})
    trips = rd.get("round_trips", {})
    out = []
    for name, (_, peer) in WINDOW_ROWS.items():
        r = windows.get("vs_limits_strategy", {}).get(name)
        target = f"sequential Redis: {name} <= 1x the time of {peer}, 1 round trip"
        if not r:
            why = "RedisStore refuses the policy" if name in windows.get("refused", {}) else "n/a"
            out.append(_target(target, None, why, "redis"))
            continue
        n = trips.get(name, float("nan"))
        figure = f"{_fmt_ratio(r)}, {n:g} round trips"
        out.append(_target(target, r["median"] <= 1.0 and n <= 1.0, figure, "redis"))
    return out


#: (tasks, our row, the other row, least throughput ratio, target text)
ASYNC_TARGETS = [
    (64, "limiter acheck()", "limits fixed window hit() (limits.aio)", 2.0, "limits.aio hit()"),
    (64, "limiter acheck()", "PING", 1.5, "un-pipelined PING"),
    (
        1,
        "limiter acheck()",
        "limiter acheck(), pipelining=False",
        0.97,
        "pipelining=False (no slower: 3% noise allowance)",
    ),
]


def _async_targets(rd: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for tasks, ours, other, least, text in ASYNC_TARGETS:
        r = rd.get("async", {}).get(str(tasks), {}).get(other, {}).get(ours)
        plural = "s" if tasks > 1 else ""
        name = f"asyncio + Redis, {tasks} task{plural}: acheck() >= {least}x {text}"
        if r is None or math.isnan(r["median"]):
            why = "n/a"
            if other.endswith("pipelining=False"):
                why = "AsyncRedisStore(pipelining=False) not in this tree"
            out.append(_target(name, None, why, "redis"))
        else:
            out.append(_target(name, r["median"] >= least, _fmt_ratio(r), "redis"))
    return out


def _flood_targets(flood: Dict[str, Any]) -> List[Dict[str, Any]]:
    why = flood.get("error", "n/a")
    default, unbounded = "DenyCache(RedisStore) (defaults)", "DenyCache(RedisStore, max_stale=None)"
    speed = flood.get("speedup", {}).get(default)
    out = [
        _target(
            "deny flood on Redis: checks/s with DenyCache (defaults) >= 10x without",
            None if not speed else speed["median"] >= 10.0,
            why if not speed else _fmt_ratio(speed),
            "flood",
        )
    ]
    for name, text in ((default, "defaults: max_stale=1 s"), (unbounded, "max_stale=None")):
        calls = flood.get("calls_per_window", {}).get(name)
        out.append(
            _target(
                f"deny flood on Redis: <= 1 Redis call per key per retry_after window ({text})",
                None if not calls else calls["max"] <= 1.0,
                why if not calls else _span(calls, " calls"),
                "flood",
            )
        )
    return out


def _server_targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    from .servers import TARGETS

    by = _measures(results, "servers")
    out = []
    for ours, (bare, least) in TARGETS.items():
        r = _ratio_of(by.get(f"servers/{ours}"), by.get(f"servers/{bare}"))
        status = None if math.isnan(r["median"]) else r["median"] >= least
        name = f"{ours} >= {least}x the requests/s of {bare}"
        out.append(_target(name, status, _fmt_ratio(r), "servers"))
    return out


# -- charts ----------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


OURS = "#1f77b4"
PEER = "#b0b0b0"
#: The lines of ours in the keys chart: a row id, or a window policy's kind.
OURS_COLORS = {
    "ours.allow": "#17becf",
    "ours.check+observer": "#08306b",
    "fixed": "#6baed6",
    "fixed-first": "#3182bd",
    "sliding": "#08519c",
}


def chart_throughput(results: Dict[str, Any], path: Path) -> Optional[Path]:
    core = results["sections"].get("core") or {}
    ms = core.get("measures", [])
    groups = [
        g for g in ("hot key", "10,000 keys", "1,000,000 keys") if any(m["group"] == g for m in ms)
    ]
    if not groups:
        return None
    plt = _plt()
    most = max(sum(1 for m in ms if m["group"] == g) for g in groups)
    height = max(4.8, 0.32 * most + 1.6)  # the window rows (issue 24) doubled the bars
    fig, axes = plt.subplots(1, len(groups), figsize=(6.2 * len(groups), height), sharey=False)
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
    peers = itertools.cycle(
        ["#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    )
    for lib_id, points in curve.items():
        if not points:
            continue
        xs = sorted(int(k) for k in points)
        ys = [points[str(x)] for x in xs]
        ours = lib_id.startswith("ours")
        # Ours in blues: a color per algorithm; the window rows (ours.<kind>.<call>)
        # dashed for check(), dotted for allow().
        parts = lib_id.split(".")
        ax.plot(
            xs,
            ys,
            marker="o",
            linewidth=2.5 if ours else 1.2,
            linestyle="-" if len(parts) < 3 else ("--" if parts[2] == "check" else ":"),
            color=OURS_COLORS.get(parts[1] if len(parts) == 3 else lib_id, OURS)
            if ours
            else next(peers),
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
#
# The page is a list of lines joined by newlines.  Every block ends with its own
# blank line: a paragraph (``_para``), a table (``_table``), a code block
# (``_code``).  Every results section has the same frame (``_section``): its
# heading, then either why it has no figures or the body built from its results.

Section = Dict[str, Any]


def _para(*texts: str) -> List[str]:
    """Each text as a paragraph: the text, then a blank line."""
    return [line for text in texts for line in (text, "")]


def _table(header: List[str], rows: List[List[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return [*out, ""]


def _code(text: str) -> List[str]:
    return ["```", text, "```", ""]


def _notes(sec: Section) -> List[str]:
    """The section's notes as a list (no blank line after it)."""
    return [f"- {n}" for n in sec.get("notes", [])]


def _name(m: Dict[str, Any]) -> str:
    """A measure's label, in bold when it is ours."""
    return f"**{m['label']}**" if m["library"] == "tokenlimiter" else m["label"]


def _section(
    name: str, title: str
) -> Callable[[Callable[[Section], List[str]]], Callable[[Dict[str, Any]], List[str]]]:
    """Make ``body(section) -> lines`` into ``md(results) -> lines`` under ``## title``.

    When the section was not run, is unavailable or failed, its heading is
    followed by the reason instead of the body.
    """

    def wrap(body: Callable[[Section], List[str]]) -> Callable[[Dict[str, Any]], List[str]]:
        @functools.wraps(body)
        def md(results: Dict[str, Any]) -> List[str]:
            heading = [f"## {title}", ""]
            sec = results["sections"].get(name)
            if sec is None:
                return heading + _para("Not run in this run (`--only`).")
            if sec["status"] == "unavailable":
                return heading + _para(f"**Not available in this tree:** {sec.get('reason', '')}")
            if sec["status"] == "error":
                return heading + _para(f"**Failed:** `{sec.get('reason', '')}`")
            return heading + body(sec)

        return md

    return wrap


@_section("core", "1. In-memory operations per second")
def md_core(sec: Section) -> List[str]:
    ms = sec["measures"]
    lines = _para(
        f"Limit: {sec['data'].get('limit')}, so every request is admitted (same work for "
        "everyone). Each round builds a fresh limiter, touches every key once (untimed), then "
        "times a pass over a shuffled sequence of the same keys. Figures: operations per "
        "second, median of the rounds (min-max)."
    )
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
    lines += _algorithm_table(sec)
    lines += _notes(sec)
    lines += [""]
    lines += _para(
        "pyrate-limiter and limits' moving window stop at 100,000 keys: one bucket object "
        "(or one list of entries) per key makes a million of them cost gigabytes and minutes.",
        "The **floor** row is not a library: it is `bench/floor.py`, the least a correct "
        "thread-safe per-key token bucket does in Python (a dict of `[tokens, last]` pairs, one "
        "`threading.Lock`, `time.monotonic()`, a bool back; no result object, no validation, "
        "no eviction). No in-memory limiter can be cheaper; `check()`'s ratio to it is what "
        "the library's extras cost.",
        "![Throughput by library](bench-throughput.png)",
        "![Cost against number of keys](bench-keys.png)",
    )
    curve = sec["data"].get("ns_per_op_by_keys", {}).get("ours.check", {})
    if curve:
        xs = sorted(int(k) for k in curve)
        growth = curve[str(xs[-1])] / curve[str(xs[1] if len(xs) > 1 else xs[0])]
        lines += _para(
            f"Growth of `check()` cost from {xs[1] if len(xs) > 1 else xs[0]:,} to "
            f"{xs[-1]:,} keys: {growth:.2f}x (ns/op: "
            + ", ".join(f"{x:,} keys {curve[str(x)]:.0f}" for x in xs)
            + "). Past the CPU caches every dict lookup is a cache miss, for every library."
        )
    return lines


def _algorithm_table(sec: Section) -> List[str]:
    """Each of our algorithms beside limits' nearest strategy (issue 24): ratios of ops/s."""
    by = {m["id"]: m for m in sec["measures"]}
    labels = {i.split("/")[-1]: m["label"] for i, m in by.items()}
    groups = [g for _, g in _core_groups(by)]
    rows = []
    for algorithm, check, allow, peer in ALGORITHM_PAIRS:
        for ours in (check, allow):
            if ours not in labels or peer not in labels:
                continue
            got = dict(_pair_ratios(by, ours, peer))
            cells = [_fmt_ratio(got[g]) if g in got else "not measured" for g in groups]
            rows.append([algorithm, f"**{labels[ours]}**", labels[peer], *cells])
    if not rows:
        return []
    lines = _para(
        "Each algorithm beside limits' nearest strategy, from the rows above (same run, same "
        "rounds): ops/s of ours over limits', per round, median (min-max); above 1 is faster. "
        "Windows: ours and limits' count 10^9 per one-second window, so windows roll over "
        "during a round for both. The token bucket keeps the pairing of its target (limits' "
        "fixed window: the moving window cannot run an always-admit limit); limits' `hit()` "
        "returns a bool, as `allow()` does, so `allow()` is the like-for-like call, `check()` "
        "also builds the full result (remaining, reset, retry-after)."
    )
    header = ["algorithm", "ours", "limits", *(f"vs limits, {g}" for g in groups)]
    return lines + _table(header, rows)


@_section("memory", "2. Memory")
def md_memory(sec: Section) -> List[str]:
    data = sec["data"]
    lines = _para(
        "Bytes each library keeps per tracked key (tracemalloc, after touching N new keys "
        "in a fresh process; the caller's own key strings are not counted, stored copies are):"
    )
    lines += _table(
        ["library", "keys", "bytes per key"],
        [
            [v["label"], f"{v['keys']:,}", f"{v['bytes_per_key']:.0f}"]
            for v in data.get("bytes_per_key", {}).values()
        ],
    )
    lines += _para(
        "Flood of distinct keys (10/s, burst 10: no bucket is full again during the flood, so "
        "eviction must drop live keys), `MemoryStore(max_keys=...)`, fresh process:"
    )
    lines += _table(
        [
            "max_keys",
            "distinct keys",
            "len(store) after",
            "max len(store)",
            "RSS growth",
            "checks/s",
        ],
        [
            [
                f"{f['max_keys']:,}" if f["max_keys"] else "None (unbounded)",
                f"{f['keys']:,}",
                f"{f['len_store']:,}",
                f"{f['max_len_store']:,}",
                f"{f['rss_growth_mib']:.0f} MiB",
                f"{f['ops_per_s'] / 1e3:.0f}k",
            ]
            for f in data.get("flood", [])
        ],
    )
    sweeps = data.get("sweep", {})
    lines += _para(
        "Worst `check()` latency on one thread while another runs `MemoryStore.sweep()` "
        "(issue 2: must stay near 10 ms or less); one row per round:"
    )
    lines += _table(
        ["sweep", "keys", "sweep time", "checks during sweep", "p50", "p99", "worst"],
        [
            [
                what,
                f"{r['keys']:,}",
                f"{r['sweep_seconds'] * 1e3:.0f} ms",
                f"{r['checks_during_sweep']:,}",
                f"{r['p50_ms'] * 1e3:.1f} us",
                f"{r['p99_ms']:.3f} ms",
                f"**{r['max_ms']:.1f} ms**",
            ]
            for kind, what in (
                ("full", "every bucket full: deletes all"),
                ("scan", "no bucket full: deletes none"),
            )
            for r in sweeps.get(kind, [])
        ],
    )
    return lines


#: (our integration, the peer it replaces): issue 12's target is a tenth of the peer's overhead.
INTEGRATION_PEERS = [
    ("flask+RateLimit(default)", "flask+flask-limiter"),
    ("flask+@rl.limit", "flask+@flask-limiter.limit"),
    ("fastapi+Depends(rl.limit)", "fastapi+@slowapi.limit"),
    ("django+@ratelimit", "django+@django-ratelimit"),
]


@_section("middleware", "3. Middleware overhead per request")
def md_middleware(sec: Section) -> List[str]:
    data = sec["data"]
    lines = _para(
        f"In-process, no sockets: {data.get('requests_per_batch', 0):,} requests per batch, "
        "each app interleaved with its bare twin; overhead per round = time with the "
        "middleware - time of the bare app. Every limiter keys on the client address and "
        "never denies. limiter adds `X-RateLimit-*` headers to every response; slowapi and "
        "flask-limiter run with their defaults (no headers)."
    )
    ov = data.get("overhead_us", {})
    rows = []
    for m in sec["measures"]:
        o = ov.get(m["label"])
        rows.append([m["group"], _name(m), _rng(m), "—" if not o else _span(o)])
    lines += _table(["stack", "app", "us per request", "overhead, us"], rows)
    lines += _para("![Middleware overhead](bench-overhead.png)")
    return [*lines, *_notes(sec), ""]


@_section("servers", "4. Real servers on loopback")
def md_servers(sec: Section) -> List[str]:
    data = sec["data"]
    gen = data.get("generator")
    lines = _para(
        f"One worker per server; load generator: **{gen}** ({data.get('connections')} "
        f"keep-alive connections, {data.get('seconds_per_run')} s per run); servers run in "
        "turn each round. The load generator and the server share the machine's cores."
    )
    if gen != "wrk":
        lines += _para(
            "**wrk was not found on this machine**: the load came from the bench's Python "
            "client, which is slower than the servers: compare rows, not absolutes."
        )
    if data.get("redis"):
        lines += _para(
            f"The `(redis)` rows keep their limits in Redis ({data['redis']}): limiter's "
            "middleware with `AsyncRedisStore` (its defaults) beside slowapi (limits' Redis "
            "storage), both with the same connection settings."
        )
    lat = data.get("latency_ms", {})
    by = {m["label"]: m for m in sec["measures"]}
    rows = []
    for name, m in by.items():
        server = name.split("+")[0] + "+" + name.split("+")[1]
        bare = by.get(server)
        rel = _ratio_of(m, bare) if bare and bare is not m else None
        rows.append(
            [
                _name(m),
                _rng(m),
                "—" if rel is None else _fmt_ratio(rel),
                f"{lat.get(name, {}).get('p50', float('nan')):.2f}",
                f"{lat.get(name, {}).get('p99', float('nan')):.2f}",
            ]
        )
    lines += _table(["server + app", "requests/s", "vs bare", "p50 ms", "p99 ms"], rows)
    ours = by.get("uvicorn+starlette+limiter(redis)")
    peer = by.get("uvicorn+starlette+slowapi(redis)")
    if ours and peer and ours["samples"] and peer["samples"]:
        lines += _para(
            "On the same Redis, limiter with `AsyncRedisStore` served "
            f"{_fmt_ratio(_ratio_of(ours, peer))} the requests/s of slowapi."
        )
    return [*lines, *_notes(sec), ""]


@_section("redis", "5. Redis")
def md_redis(sec: Section) -> List[str]:
    data = sec["data"]
    opts = data.get("client_options", {})
    lines = _para(
        f"Server: {data.get('url')}. Every client, limiter's and the peers', has the same "
        f"settings: {', '.join(f'`{k}={v}`' for k, v in opts.items()) or 'n/a'}. Round trips "
        "are counted at the socket. Sequential: one connection, hot key. asyncio: N tasks on "
        "one event loop sharing one client, each awaiting its operation in a loop; PING is "
        "redis-py's `await client.ping()`, not pipelined."
    )

    def ratio(table: Dict[str, Any], other: str, label: str) -> str:
        if label == other:
            return "1"
        r = table.get(other, {}).get(label)
        return _fmt_ratio(r) if r else "n/a"

    trips = data.get("round_trips", {})
    lines += _table(
        ["operation (sequential)", "us per op", "round trips", "time vs PING"],
        [
            [
                _name(m),
                _rng(m),
                f"{trips.get(m['label'], float('nan')):g}",
                ratio({"PING": data.get("vs_ping", {})}, "PING", m["label"]),
            ]
            for m in sec["measures"]
            if m["id"].startswith("redis/sync/")
        ],
    )
    lines += _redis_windows(data)
    for tasks, table in data.get("async", {}).items():
        rows = [m for m in sec["measures"] if m["id"].startswith(f"redis/async{tasks}/")]
        lines += _table(
            [
                f"operation (asyncio, {tasks} task{'s' if tasks != '1' else ''})",
                "ops per s",
                "vs PING",
                "vs limits.aio",
                "vs pipelining=False",
            ],
            [
                [
                    _name(m),
                    _rng(m) if m["samples"] else f"failed: {m['note']}",
                    ratio(table, "PING", m["label"]),
                    ratio(table, "limits fixed window hit() (limits.aio)", m["label"]),
                    ratio(table, "limiter acheck(), pipelining=False", m["label"]),
                ]
                for m in rows
            ],
        )
    lines += _notes(sec) + ([""] if sec.get("notes") else [])
    bd = data.get("breakdown")
    if bd:
        lines += _para("Where a sequential check's time goes (us per call, median):")
        lines += _table(["step", "us"], [[k, f"{v:.1f}"] for k, v in bd.items()])
    flood = data.get("deny_flood", {})
    lines += ["### Deny flood", ""]
    if "error" in flood or not flood:
        lines += _para(f"Not measured: {flood.get('error', 'not run')}.")
    else:
        cps, calls = flood["checks_per_s"], flood["calls_per_window"]
        lines += _para(
            f"One client hammering one denied key ({flood['limit']}, so retry_after is up to "
            f"{flood['window']:g} s and one check is admitted each window) for "
            f"{flood['seconds']:g} s per round, through `RateLimiter.check` on a `RedisStore`, "
            "bare and behind `DenyCache`. Redis calls are the EVALSHA calls the server counted "
            "(`INFO commandstats`) less the admitted checks (only Redis admits), per window "
            "the flood started. `DenyCache`'s `max_stale` (1 s by default) "
            "bounds how long a denial is replayed without asking Redis, so that a reset from "
            "another process is seen within it; `max_stale=None` replays until retry_after. "
            f"Same answers in every row: {'yes' if flood.get('same_answers') else 'NO'} "
            "(allowed, remaining and limit of the first denial), and each row admits about "
            "one check per window (the cache must not deny what Redis would admit)."
        )
        lines += _table(
            [
                "store",
                "checks per s",
                "vs RedisStore",
                "denials Redis answered per window",
                "admitted per window",
            ],
            [
                [
                    name if name == "RedisStore" else f"**{name}**",
                    _rng(cps[name]),
                    "1" if name == "RedisStore" else _fmt_ratio(flood["speedup"][name]),
                    _rng(calls[name]),
                    _rng(flood.get("admitted_per_window", {}).get(name, calls[name])),
                ]
                for name in cps
            ],
        )
    return lines


def _redis_windows(data: Dict[str, Any]) -> List[str]:
    """Our window rows on Redis beside limits' matching strategy (issue 24)."""
    from .redis_bench import WINDOW_ROWS

    windows = data.get("windows", {})
    vs, refused = windows.get("vs_limits_strategy", {}), windows.get("refused", {})
    trips = data.get("round_trips", {})
    rows = []
    for name, (_, peer) in WINDOW_ROWS.items():
        if name in vs:
            rows.append([f"**{name}**", peer, _fmt_ratio(vs[name]), f"{trips.get(name, 0):g}"])
        elif name in refused:
            rows.append([f"**{name}**", peer, "not measured: RedisStore refuses it (notes)", "n/a"])
    if not rows:  # results from before the window rows
        return []
    lines = _para(
        "Window policies beside limits' matching strategy on the same server (the rows above; "
        "time of ours over limits', per round, median (min-max): below 1 is faster):"
    )
    return lines + _table(["ours (sequential)", "limits", "time vs limits", "round trips"], rows)


@_section("sqlite", "6. SQLite")
def md_sqlite(sec: Section) -> List[str]:
    lines = _para(
        f"One database file, 1,000 keys, {sec['data'].get('seconds_per_run')} s per run, "
        f"{sec['data'].get('cores')} cores. The 4-process figure is the sum of four concurrent "
        "processes (with 2 cores: write-lock contention, not scaling). No peer ships a "
        "per-client SQLite token bucket to compare with."
    )
    return lines + _table(
        ["setup", "checks per second"], [[m["label"], _rng(m)] for m in sec["measures"]]
    )


@_section("postgres", "8. PostgreSQL")
def md_postgres(sec: Section) -> List[str]:
    from .postgres_bench import CEILINGS, PYRATE, REDIS, SELECT_1, SELECT_1_LIBPQ

    data = sec["data"]
    lines = _para(
        f"Server: {data.get('server')}. Every limiter checks one hot key at a rate that "
        "admits everything (each check writes). Sequential: one connection, the store's; "
        "SELECT 1 is psycopg's `execute` on that connection, taken from the pool and put "
        "back per call as a check does. Threads and tasks share one limiter each. Ratios "
        "first, per round, median (min-max); then the figures."
    )
    rows = []
    for name, r in data.get("vs_select1", {}).items():
        goal = f"<= {CEILINGS[name]}x" if name in CEILINGS else ""
        rows.append([f"**{name}**", f"time / {SELECT_1}", _fmt_ratio(r), goal])
    for name, r in data.get("vs_select1_libpq", {}).items():
        rows.append([f"**{name}**", f"time / {SELECT_1_LIBPQ}", _fmt_ratio(r), ""])
    for other, table, goal in ((PYRATE, "vs_pyrate", ">= 2x"), (REDIS, "vs_redis", "")):
        for kind, by in data.get(table, {}).items():
            for name, r in by.items():
                rows.append([f"**{name}**", f"{kind}: speed / {other}'s", _fmt_ratio(r), goal])
    lines += _table(["ours", "ratio", "median (min-max)", "target"], rows)
    shares = data.get("admitted_share", {})
    units = (("seq", "us per check"), ("threads", "checks per s"), ("async", "checks per s"))
    for kind, unit in units:
        ms = [m for m in sec["measures"] if m["id"].startswith(f"postgres/{kind}/")]
        if not ms:
            continue
        share = shares.get(kind, {})
        lines += _table(
            [ms[0]["group"], unit, "admitted share"],
            [
                [_name(m), _rng(m), _span(share[m["label"]]) if m["label"] in share else ""]
                for m in ms
            ],
        )
    return lines + _notes(sec) + ([""] if sec.get("notes") else [])


@_section("slots", "9. Concurrency slots against check()")
def md_slots(sec: Section) -> List[str]:
    from .slots_bench import ratio_rows

    lines = _para(
        "What a `Concurrency` slot costs: `with limiter.slot(key): pass` (a `Slot`, one step "
        "to take, one to give back) against a plain `check()` of a rate that admits "
        "everything, on a hot key, interleaved in the same run on each store. Ratios first "
        "(slot time / check time, per round, median (min-max)); then the figures. "
        "docs/concurrency.md."
    )
    data = sec["data"]
    rows = [
        [store, pair, "**NOT MEASURED**" if r is None else _fmt_ratio(r)]
        for store, pair, r in ratio_rows(data)
    ]
    lines += _table(["store", "slot against check()", "time ratio"], rows)
    trips = (data.get("redis") or {}).get("round_trips", {})
    figures = []
    for m in sec["measures"]:
        store = m["id"].split("/")[1]
        trip = trips.get(m["label"]) if store == "redis" else None
        figures.append(
            [store, _name(m), f"{_rng(m)} {m['unit']}", "" if trip is None else f"{trip:g}"]
        )
    lines += _table(["store", "operation", "time per operation", "Redis round trips"], figures)
    why = (data.get("redis") or {}).get("not_measured")
    return lines + (_para(f"Redis: NOT MEASURED, {why}") if why else [])


@_section("scaling", "7. Scaling: what a check costs the Redis server")
def md_scaling(sec: Section) -> List[str]:
    data = sec["data"]
    lua, cpu, net = data.get("lua", {}), data.get("server_cpu", {}), data.get("network", {})
    mem, model = data.get("memory", {}), data.get("model", {})
    lines = _para(
        "Differences of the server's own counters over a run of checks (`INFO commandstats`, "
        "`INFO cpu`, `INFO stats`, `INFO memory`, `MEMORY USAGE`); what they mean for a "
        "deployment is in [scaling.md](scaling.md)."
    )
    lines += _table(
        ["check", "Lua us per call (EVALSHA)", "bytes per client (MEMORY USAGE, keys)",
         "used_memory per client"],
        [
            [
                name,
                f"{lua.get(name, {}).get('usec_per_call', float('nan')):.1f}",
                f"{mem.get(name, {}).get('memory_usage_per_key', float('nan')):.0f} x "
                f"{mem.get(name, {}).get('redis_keys_per_client', 0)}",
                f"{mem.get(name, {}).get('used_memory_per_client', float('nan')):.0f}",
            ]
            for name in ("1 limit", "3 limits")
        ],
    )  # fmt: skip
    lines += _table(
        ["client", "server CPU us per check", "checks per s (client)"],
        [
            [name, f"{v['server_cpu_us_per_check']:.1f}", _num(v["checks_per_s"])]
            for name, v in cpu.items()
            if isinstance(v, dict)
        ],
    )
    if cpu.get("note"):
        lines += _para(cpu["note"])
    if net:
        lines += _para(
            f"Network per check (1 limit): {net['in_bytes_per_check']:.0f} bytes in, "
            f"{net['out_bytes_per_check']:.0f} bytes out (the packed EVALSHA alone: "
            f"{net['packed_command_bytes']:.0f} bytes)."
        )
    if model:
        a = model.get("assumptions", {})
        lines += _para(
            f"The model of [scaling.md](scaling.md): {a.get('clients', 0):,} active clients, "
            f"{a.get('checks_per_s', 0):,} checks/s, each node planned at "
            f"{a.get('cpu_headroom', 0):.0%} of its measured capacity:"
        )
        rows = []
        for name in ("un-pipelined", "pipelined"):
            m = model.get(name)
            if m:
                rows.append(
                    [
                        name,
                        f"{m['server_cpu_us_per_check']:.1f}",
                        _num(m["checks_per_s_per_node_at_full_cpu"]),
                        str(m["nodes_for_target"]),
                    ]
                )
        lines += _table(
            ["clients send", "server CPU us per check", "checks/s per node (100% CPU)", "nodes"],
            rows,
        )
        lines += _para(
            f"Memory for the clients: {model.get('memory_bytes_for_clients', 0) / 2**20:.0f} MiB; "
            f"network: {model.get('network_bytes_per_check', 0):.0f} bytes per check, "
            f"{model.get('network_mbit_per_s', 0):.0f} Mbit/s in all."
        )
    return lines


# The missed targets whose explanation is prose alone, in the order md_profiles gives them:
# (target, results section, the field it needs (None: the section ran), heading, text).
_WHY_MISSED: List[Tuple[str, str, Optional[str], str, str]] = [
    (
        "redis",
        "redis",
        "breakdown",
        "Redis",
        (
            "A check is one round trip, like a PING; the difference is the Lua script's run "
            "time on the server plus the client-side work (building ARGV, parsing the reply). "
            "See the breakdown table in section 5: the PING row is redis-py's `Redis.ping()` "
            "(its full command path), and the EVALSHA rows show what the script adds on the "
            "server. With 1 asyncio task, auto-pipelining has nothing to batch, so the "
            "`pipelining=False` comparison is within the run's noise either way."
        ),
    ),
    (
        "flood",
        "redis",
        "deny_flood",
        "Deny flood",
        (
            "`DenyCache` replays a denial without asking Redis until the denial's retry_after "
            "or `max_stale` seconds, whichever comes first. `max_stale` (1 s by default) "
            "bounds how stale a replayed denial can be: a `reset` from another process, or "
            "a limit changed elsewhere, is seen within it. With the default, a key denied for "
            "a minute therefore costs Redis about one call a second, not one a minute; "
            "`max_stale=None` trades that bound for one call per retry_after window (the "
            "other row of the targets)."
        ),
    ),
    (
        "servers",
        "servers",
        None,
        "Real servers",
        (
            "A real server's request costs tens of microseconds of Python (HTTP parsing, the "
            "framework, the response), so the middleware's few microseconds should cost a few "
            "percent of requests/s (section 3 has the per-request overhead, measured in "
            "process). The load generator shares the 2 cores with the server, and the machine "
            "was shared with other jobs: with one short run per server (`--quick`) or a busy "
            "machine, one run's noise is larger than the gap being measured. Judge this target "
            "on the min-max range of a full run."
        ),
    ),
    (
        "sweep",
        "memory",
        "sweep",
        "Sweeping",
        (
            "`MemoryStore.sweep` walks each generation's order list in slices of 2,048 keys, "
            "deletes full buckets in place (no copy of the key set, no dict resize under the "
            "lock: each lock hold is about 1.5 ms) and yields with `time.sleep(0)` between "
            "slices, since `threading.Lock` is not fair. What remains of the worst case is "
            "CPython's thread scheduling: while the sweeper runs Python code, a thread that "
            "wants the GIL waits up to the switch interval (5 ms), and a check can be "
            "preempted more than once; the p99 stays in microseconds."
        ),
    ),
]


#: Why a window policy misses its in-memory target (the profiles follow it on the page).
WINDOW_WHY = (
    "A token bucket's `check()` is two Python calls on a `MemoryStore` (the function "
    "`MemoryStore.bind` makes, then `step`, which inlines the usual cost-1 request). A "
    "window's is about a dozen: `RateLimiter.check` -> `MemoryStore.apply` -> `bucket.step` "
    "(which hands the request over) -> the policy's `step` -> `policy_cost` -> `cost_or_inf` "
    "-> `validate_cost`, then `bounds`, `open_window` -> `read_count`, `count_in_window` -> "
    "`count_state` and `_count_result` (the sliding window: `slide` and `_sliding_result`), "
    "each some 50-100 ns of call overhead on this machine. `allow()` is no faster than "
    "`check()`: `step(..., detail=False)` still builds the full result and drops it. limits' "
    "fixed window is cheap (a dict increment under a lock), so the fixed window feels these "
    "calls most; its sliding-window counter costs twice as much, so ours clears 2x there."
)


POSTGRES_WHY = (
    "A check writes its row and commits. The store commits each check asynchronously (its "
    "default): with `synchronous_commit=True` (the server's setting, on by default) the "
    "commit waits for the WAL to reach the disk (an fdatasync, whose time is the disk's), "
    "which `SELECT 1` never does; an `UNLOGGED` table writes no WAL for its rows. "
    "The rest is the server's own work per check (about 35 us "
    'on a small machine, the `UPDATE` of the row a third of it: docs/stores.md, "What a check '
    "costs\") and the client's; on a virtual machine whose idle CPUs are slow to wake, a round "
    "trip itself varies severalfold, and the ratios with it."
)


def md_profiles(results: Dict[str, Any], missed: List[str]) -> List[str]:
    """Why each missed target was missed, with the profile measured for it."""
    if not missed:
        return []
    lines = ["## Why targets were missed", ""]
    core = _data(results, "core")
    if ("check" in missed or "allow" in missed) and core.get("breakdown"):
        lines += ["### In-memory `check()` / `allow()`", ""]
        lines += _para(
            "Each piece of the hot path timed alone (ns per call, hot key, median of rounds; "
            "the loop itself is in every row):"
        )
        lines += _table(
            ["piece", "ns per call"], [[k, f"{v:.0f}"] for k, v in core["breakdown"].items()]
        )
        lines += _para(
            "token-bucket's `consume()` is a dict lookup, a `time.monotonic()` and a few float "
            "operations on a two-element list, with no lock and no result object; its own "
            "source notes that concurrent threads can race between its replenish and consume "
            "steps. limiter's `check()` pays for a lock, the `step()` call (argument "
            "validation, an 8-field result tuple) and two more Python-level calls (`check` → "
            "`MemoryStore.apply` → `step`); `allow()` builds no result (`step(..., "
            "detail=False)` through `MemoryStore.allow`) but keeps the lock, the validation "
            "and the calls. Past 100,000 keys, cache misses dominate and limiter leads.",
            "The floor (`bench/floor.py`) pays for the same lock, clock read and dict lookup "
            "as `check()`, so the gap to it is the rest: the `check` -> `apply` -> `step` "
            "calls, the validation and the result tuple (see the rows above).",
        )
        if core.get("profile"):
            lines += _para("cProfile of `check()` over 10,000 keys:") + _code(core["profile"])
    if "window" in missed and core.get("window_profiles"):
        lines += ["### Window policies in memory", ""]
        lines += _para(WINDOW_WHY)
        for kind, text in core["window_profiles"].items():
            lines += _para(f"cProfile of `check()` under the {kind} window over 10,000 keys:")
            lines += _code(text)
    if "postgres" in missed:
        lines += ["### PostgreSQL", ""]
        lines += _para(POSTGRES_WHY)
    mw = _data(results, "middleware")
    if "middleware" in missed and mw.get("profile"):
        lines += ["### Middleware", ""]
        lines += _para(
            "The `http.server` adapter's own work, the request view and the decision, costs "
            "about 3.8 us when timed alone (0.5 us for `request_info`, 3.3 us for "
            "`Guard.decide`). The rest is what hooking `BaseHTTPRequestHandler` costs: the "
            "adapter is a subclass overriding `parse_request` and `end_headers`, and on this "
            "machine even a plain subclass that only calls `super()` in those two methods adds "
            "about 2.5 us per request to the standard library's 40 us. The stdlib server "
            "itself is slow (40-50 us per request), so the adapter stays a small share of it.",
            "cProfile of the ASGI adapter around a raw ASGI app:",
        )
        lines += _code(mw["profile"])
    for target, section, field, title, text in _WHY_MISSED:
        data = _data(results, section)
        if target in missed and (data.get(field) if field else data):
            lines += [f"### {title}", ""]
            lines += _para(text)
    return lines


def render(results: Dict[str, Any], docs: Path, page: str = "benchmarks.md") -> List[Path]:
    """Write ``page`` and the ``bench-*.png`` charts into the directory ``docs``."""
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
    sections = (
        "core",
        "memory",
        "middleware",
        "servers",
        "redis",
        "sqlite",
        "scaling",
        "postgres",
        "slots",
    )
    only = ", ".join(f"`{s}`" for s in sections)
    lines = ["# Benchmarks", ""]
    lines += _para(
        "<!-- Generated by `python -m bench` from bench/results/latest.json. -->",
        "*This page is generated by the benchmark suite (`bench/`); edits are overwritten.*",
        f"Reproduce: `{REPRODUCE}` (about 10-15 minutes; without `--publish` the results "
        "go to `bench/results/latest.json` and `latest.md` only; `python -m bench --quick` "
        f"for a smoke run under a minute, `--only SECTION` for some sections: {only}). "
        "Redis: the server at `REDIS_URL`, else a throwaway `redis-server` the bench starts "
        "on a free loopback port, else the Redis rows say why they were not measured.",
        f"Run: {results['generated']}, `{results['command'].strip()}`, "
        f"{results['settings']['rounds']} rounds, {results['seconds']:.0f} s.",
        "Peers and limiter run in the same process run, interleaved (A B C, B C A, ...), and "
        "every figure is the median of the rounds with the min-max range. **Ratios are the "
        "headline; absolute figures depend on the machine** (this one was shared with other "
        "jobs while it ran).",
    )
    lines += ["## Targets", ""]
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
            ["PostgreSQL server", m.get("postgres_server", "")],
            ["wrk", m.get("wrk", "")],
            [
                "load average at the end (1, 5, 15 min)",
                ", ".join(f"{x:.1f}" for x in m.get("load_average", [])) or "n/a",
            ],
            ["packages", ", ".join(f"{k} {v}" for k, v in pk.items())],
            *import_cost_rows(m.get("import_cost")),
        ],
    )
    for part in (
        md_core,
        md_memory,
        md_middleware,
        md_servers,
        md_redis,
        md_sqlite,
        md_scaling,
        md_postgres,
        md_slots,
    ):
        lines += part(results)
    lines += md_profiles(results, missed)
    out = docs / page
    out.write_text("\n".join(lines).rstrip() + "\n")
    written.append(out)
    scaling = results["sections"].get("scaling") or {}
    if scaling.get("status") == "ok":
        from .scaling_doc import page as scaling_page

        redis_data = (results["sections"].get("redis") or {}).get("data") or {}
        text = scaling_page(
            scaling["data"],
            results["generated"],
            results["command"].strip(),
            redis_data.get("cluster"),
        )
        (docs / "scaling.md").write_text(text.rstrip() + "\n")
        written.append(docs / "scaling.md")
    return written
