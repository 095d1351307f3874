"""Section ``servers``: real servers on loopback under a load generator.

uvicorn + Starlette (bare, with ``limiter``'s ASGI middleware, with slowapi)
and gunicorn + Flask (bare, with ``limiter``'s WSGI middleware, with
flask-limiter), one worker each; then uvicorn + Starlette with ``limiter``'s
middleware on ``AsyncRedisStore`` beside slowapi, both on this run's one Redis
(``bench/redisenv.py``) with the same connection settings.  The load
generator is ``wrk`` when it is on PATH, else a small asyncio HTTP/1.1
client (which is itself slower than the servers: its figures compare the
servers with each other, nothing more).
Every server is started once; rounds run them in turn (A B C A B C ...).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import redisenv
from .common import Measure, Progress, Settings, Unavailable, interleave, new_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONNECTIONS = 16

#: name -> (server, app factory, library, needs)
SERVERS: Dict[str, Tuple[str, str, str, str]] = {
    "uvicorn+starlette": ("uvicorn", "starlette_bare", "", "starlette"),
    "uvicorn+starlette+limiter": (
        "uvicorn",
        "starlette_ours",
        "tokenlimiter",
        "limiter.adapters.asgi",
    ),
    "uvicorn+starlette+slowapi": ("uvicorn", "starlette_slowapi", "slowapi", "slowapi"),
    "gunicorn+flask": ("gunicorn", "flask_bare", "", "flask"),
    "gunicorn+flask+limiter": ("gunicorn", "flask_ours", "tokenlimiter", "limiter.adapters.wsgi"),
    "gunicorn+flask+flask-limiter": (
        "gunicorn",
        "flask_flask_limiter",
        "flask-limiter",
        "flask_limiter",
    ),
    "uvicorn+starlette+limiter(redis)": (
        "uvicorn",
        "starlette_ours_redis",
        "tokenlimiter",
        "redis",
    ),
    "uvicorn+starlette+slowapi(redis)": ("uvicorn", "starlette_slowapi_redis", "slowapi", "redis"),
}

#: Servers that need this run's Redis.
ON_REDIS = {name for name, spec in SERVERS.items() if spec[3] == "redis"}

#: The bare app each server is compared with, and the least share of its requests/s it must keep.
TARGETS = {
    "uvicorn+starlette+limiter": ("uvicorn+starlette", 0.93),
    "gunicorn+flask+limiter": ("gunicorn+flask", 0.95),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _command(server: str, factory: str, port: int) -> List[str]:
    if server == "uvicorn":
        return [
            sys.executable, "-m", "uvicorn", "--factory", f"bench.apps:{factory}",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "gunicorn", "--workers", "1", "--bind", f"127.0.0.1:{port}",
        "--log-level", "warning", f"bench.apps:{factory}()",
    ]  # fmt: skip


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {err[-1500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server on port {port} not ready after {timeout}s")


# -- load generators -------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    match = re.match(r"([\d.]+)(us|ms|s|m)$", text.strip())
    if not match:
        return float("nan")
    return float(match.group(1)) * _UNITS[match.group(2)]


def wrk(port: int, seconds: float) -> Dict[str, float]:
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{CONNECTIONS}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            f"http://127.0.0.1:{port}/",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    ).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if not rps or not p50 or not p99:
        raise RuntimeError(f"cannot parse wrk output: {out[-800:]}")
    return {
        "rps": float(rps.group(1)),
        "p50_ms": _ms(p50.group(1)),
        "p99_ms": _ms(p99.group(1)),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


async def _client(port: int, until: float, latencies: List[float], bad: List[int]) -> None:
    request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
    reader: Optional[asyncio.StreamReader] = None
    writer: Optional[asyncio.StreamWriter] = None
    perf = time.perf_counter
    while perf() < until:
        if writer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert reader is not None
        start = perf()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        if length:
            await reader.readexactly(int(length.group(1)))
        latencies.append(perf() - start)
        if not head.startswith(b"HTTP/1.1 200"):
            bad.append(1)
        if re.search(rb"(?i)connection:\s*close", head) or not length:
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


def python_load(port: int, seconds: float) -> Dict[str, float]:
    latencies: List[float] = []
    bad: List[int] = []

    async def main() -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(*(_client(port, until, latencies, bad) for _ in range(CONNECTIONS)))

    start = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "non_2xx": float(len(bad)),
    }


# -- the section -----------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    if settings.tiny:
        raise Unavailable("not run in tiny mode")
    section = new_section("servers")
    generator = "wrk" if shutil.which("wrk") else "python"
    load = wrk if generator == "wrk" else python_load
    # --quick: one short round, and only our rows with their bare twins (no peers)
    # so that the whole quick run stays under a minute.
    seconds = 5.0 if not settings.quick else 1.0
    rounds = min(settings.rounds, 3) if not settings.quick else 1
    procs: Dict[str, subprocess.Popen[bytes]] = {}
    ports: Dict[str, int] = {}
    try:
        for name, (server, factory, library, needs) in SERVERS.items():
            if library not in ("", "tokenlimiter") and (not settings.with_peers or settings.quick):
                continue
            if name in ON_REDIS and settings.quick:
                continue
            try:
                __import__(server)
                __import__(needs)
            except ImportError as exc:
                section["notes"].append(f"{name}: not available in this tree ({exc})")
                continue
            if name in ON_REDIS:
                try:
                    redisenv.url()  # exported to the servers as BENCH_REDIS_URL
                except Unavailable as exc:
                    section["notes"].append(f"{name}: not measured, {exc}")
                    continue
            port = _free_port()
            proc = subprocess.Popen(
                _command(server, factory, port),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            procs[name] = proc
            try:
                _wait_ready(port, proc)
                ports[name] = port
            except RuntimeError as exc:
                section["notes"].append(f"{name}: {exc}")
        if not any(SERVERS[name][2] == "tokenlimiter" for name in ports):
            raise Unavailable(
                "no limiter adapter server could start: " + "; ".join(section["notes"])
            )
        progress.plan(len(ports))
        for name, port in ports.items():
            if not settings.quick:  # --quick: a smoke run, its one round warms up too
                load(port, 1.0)
            progress.step(f"servers: warm-up {name}")
        details: Dict[str, List[Dict[str, float]]] = {name: [] for name in ports}

        def case(name: str) -> Any:
            def go() -> float:
                result = load(ports[name], seconds)
                if result["non_2xx"]:
                    raise RuntimeError(f"{name}: {result['non_2xx']:.0f} non-2xx responses")
                details[name].append(result)
                return result["rps"]

            return go

        errors: Dict[str, str] = {}
        samples = interleave(
            {name: case(name) for name in ports},
            rounds,
            progress,
            "servers",
            lambda name, exc: errors.update({name: repr(exc)}),
        )
        for name, values in samples.items():
            section["measures"].append(
                Measure(
                    id=f"servers/{name}",
                    label=name,
                    library=SERVERS[name][2] or "(bare)",
                    unit="requests/s",
                    samples=values,
                    group=SERVERS[name][0],
                    note=errors.get(name, ""),
                ).as_dict()
            )
        section["data"] = {
            "redis": redisenv.origin() if ON_REDIS & set(ports) else "",
            "generator": generator,
            "connections": CONNECTIONS,
            "seconds_per_run": seconds,
            "runs": details,
            "latency_ms": {
                name: {
                    "p50": statistics.median(r["p50_ms"] for r in runs),
                    "p99": statistics.median(r["p99_ms"] for r in runs),
                }
                for name, runs in details.items()
                if runs
            },
        }
        return section
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
