"""The command: ``python -m bench [--only SECTION ...] [--rounds N] [--quick] [--publish]``.

Runs the sections, writes ``bench/results/latest.json`` and renders it beside
itself as ``latest.md`` (charts ``bench-*.png`` in the same directory).  Only
``--publish`` renders into ``docs/benchmarks.md`` and ``docs/bench-*.png``.
Redis: see ``bench/redisenv.py`` (``REDIS_URL``, else a throwaway server);
PostgreSQL: ``bench/pgenv.py`` (``POSTGRES_URL``, else a throwaway cluster).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import pgenv, redisenv
from .common import Progress, Settings, Unavailable, new_section
from .peers import version

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"

#: section name -> module (``run(settings, progress) -> dict``)
SECTIONS: Dict[str, str] = {
    "core": "bench.core",
    "memory": "bench.memory",
    "middleware": "bench.middleware",
    "servers": "bench.servers",
    "redis": "bench.redis_bench",
    "sqlite": "bench.sqlite_bench",
    "postgres": "bench.postgres_bench",
    "scaling": "bench.scaling",
    "slots": "bench.slots_bench",
}

DISTS = [
    "tokenlimiter",
    "limits",
    "token-bucket",
    "pyrate-limiter",
    "slowapi",
    "flask-limiter",
    "starlette",
    "flask",
    "uvicorn",
    "gunicorn",
    "redis",
    "httpx",
    "psycopg",
    "psycopg-pool",
]


def machine(import_cost_runs: int = 0) -> Dict[str, Any]:
    """The setup: hardware, versions and what having tokenlimiter installed costs.

    ``import_cost_runs`` > 0 measures ``import limiter`` and the pytest plugin
    (``bench.importcost``, best of that many subprocess runs).
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": {dist: version(dist) for dist in DISTS},
        "redis_server": redisenv.describe(),
        "postgres_server": pgenv.describe(),
        "wrk": _which("wrk"),
        # Other jobs on the machine: the 1, 5 and 15 minute load averages at the end.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else [],
        "import_cost": _import_cost(import_cost_runs),
    }


def _import_cost(runs: int) -> Dict[str, Any]:
    if runs <= 0:
        return {}
    from .importcost import measure

    try:
        return measure(runs)
    except Exception as exc:  # a setup figure must not lose the run
        return {"error": repr(exc)}


def _which(cmd: str) -> str:
    import shutil

    return shutil.which(cmd) or "not found"


def run_sections(names: List[str], settings: Settings, progress: Progress) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name in names:
        started = time.perf_counter()
        try:
            module = importlib.import_module(SECTIONS[name])
            section = module.run(settings, progress)
        except Unavailable as exc:
            section = new_section(name)
            section["status"] = "unavailable"
            section["reason"] = str(exc)
        except Exception as exc:  # a broken section must not lose the others
            section = new_section(name)
            section["status"] = "error"
            section["reason"] = f"{exc!r}"
            section["traceback"] = traceback.format_exc()
            progress.write(f"section {name} failed:\n{section['traceback']}")
        section["seconds"] = round(time.perf_counter() - started, 1)
        out[name] = section
    return out


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="limiter side by side with limits, pyrate-limiter, token-bucket, "
        "slowapi and flask-limiter.",
        epilog="Redis: the server at REDIS_URL if set, else a throwaway redis-server on a "
        "free loopback port (if the binary is on PATH), else the Redis rows say why they "
        "were not measured. Nothing else is ever contacted.",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SECTIONS),
        metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per comparison")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and fewer rounds: under a minute"
    )
    # The smoke test's mode: a few hundred operations, no servers.
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also render docs/benchmarks.md, docs/scaling.md and docs/bench-*.png "
        "(otherwise only the results directory is written)",
    )
    parser.add_argument("--no-peers", action="store_true", help="measure limiter alone")
    parser.add_argument("--no-render", action="store_true", help="write the JSON only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS / "latest.json",
        help="results JSON path; the Markdown report is written beside it "
        "(latest.json -> latest.md)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="render again from the results JSON without measuring (with --publish: into docs/)",
    )
    return parser.parse_args(argv)


def _render(results: Dict[str, Any], output: Path, publish: bool) -> None:
    from .report import render

    paths = render(results, output.parent, page=output.with_suffix(".md").name)
    if publish:
        paths += render(results, DOCS)
    for path in paths:
        print(f"wrote {path}")


def measured_tree() -> str:
    """Where the ``limiter`` being measured comes from; warns when it is not this checkout's.

    An editable install made in another checkout (a git worktree's main tree,
    say) wins over this one's ``src`` unless ``PYTHONPATH=src`` is given, and
    the figures would then be another tree's.
    """
    import limiter

    where = Path(limiter.__file__).resolve().parent.parent
    if (ROOT / "src" / "limiter").is_dir() and where != ROOT / "src":
        print(
            f"warning: measuring limiter from {where}, not from this checkout's "
            f"{ROOT / 'src'} (run with PYTHONPATH=src to measure this tree)",
            file=sys.stderr,
        )
    return str(where)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.render_only:
        _render(json.loads(args.output.read_text()), args.output, args.publish)
        return 0
    tree = measured_tree()
    rounds = args.rounds if args.rounds is not None else (3 if args.quick or args.tiny else 5)
    settings = Settings(
        rounds=max(1, rounds), quick=args.quick, tiny=args.tiny, with_peers=not args.no_peers
    )
    names = args.only or [name for name in SECTIONS if not (args.tiny and name == "servers")]
    progress = Progress(enabled=not args.no_progress)
    started = time.perf_counter()
    try:
        sections = run_sections(names, settings, progress)
        setup = machine(import_cost_runs=0 if args.tiny else (1 if settings.quick else 5))
    finally:
        progress.close()
        redisenv.close()
        pgenv.close()
    results: Dict[str, Any] = {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {"rounds": settings.rounds, "quick": settings.quick, "tiny": settings.tiny},
        "limiter_source": tree,
        "machine": setup,
        "seconds": round(time.perf_counter() - started, 1),
        "sections": sections,
    }
    if args.only and args.output.exists():
        # Merge into the previous results so one section can be re-run alone.
        try:
            previous = json.loads(args.output.read_text())
            merged = dict(previous.get("sections", {}))
            merged.update(sections)
            results["sections"] = merged
        except (OSError, ValueError):
            pass
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1, default=str))
    print(f"results: {args.output}")
    if not args.no_render:
        _render(results, args.output, args.publish)
    return 0
