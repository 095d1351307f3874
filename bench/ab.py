"""This checkout against another revision of itself: is a change free where it must be?

``python -m bench.ab --against REF`` exports ``REF`` (any git revision, default
``HEAD``) with ``git archive`` to a temporary directory and times the same
calls on both source trees: the plain single-limit ``check()`` and
``allow()`` on a ``MemoryStore`` (admitted and denied), a ``FixedWindow``
and a ``SlidingWindow`` check, a two-limit check, a ``SQLiteStore`` check,
and a ``RedisStore`` check when a Redis server is available
(``bench.redisenv``: ``REDIS_URL`` or a throwaway ``redis-server``).  A case
that fails on either tree (``REF`` predates the window policies, say) is
left out, with the error's last line.

Each measurement runs in a fresh interpreter (``PYTHONPATH`` pointing at one
tree), and the two trees alternate, round after round, so drift in the
machine's speed hits both alike.  The table gives the ratios first (this
checkout / ``REF``; below 1.0 is faster): of the best rounds (a virtual
machine's noise only ever adds time, so the best is the steadiest estimate
of the code's own cost) and of the medians; then the nanoseconds per call of
each, and the spread between rounds, the noise against which a ratio must be
read.  ``--rounds`` (default 7) and ``--quick`` (3 rounds, fewer
calls) trade time for precision.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent

#: name -> (setup, statement): timed in a child interpreter; ``n`` calls per sample.
CASES: Dict[str, Tuple[str, str]] = {
    "memory check() admitted": (
        "from limiter import RateLimiter\nlim = RateLimiter(1e12, 10**15)\ncheck = lim.check",
        "check('user:1')",
    ),
    "memory check() denied": (
        "from limiter import RateLimiter, ManualClock\n"
        "lim = RateLimiter('1/hour', clock=ManualClock())\ncheck = lim.check\ncheck('user:1')",
        "check('user:1')",
    ),
    "memory allow() admitted": (
        "from limiter import RateLimiter\nlim = RateLimiter(1e12, 10**15)\nallow = lim.allow",
        "allow('user:1')",
    ),
    # The window policies (issue 24): admitted checks under a limit that never denies, as
    # the first case's, in one-second windows (a pass of calls crosses a few boundaries).
    "memory fixed window check()": (
        "from limiter import RateLimiter, FixedWindow\n"
        "lim = RateLimiter(FixedWindow(10**12, 1))\ncheck = lim.check",
        "check('user:1')",
    ),
    "memory sliding window check()": (
        "from limiter import RateLimiter, SlidingWindow\n"
        "lim = RateLimiter(SlidingWindow(10**12, 1))\ncheck = lim.check",
        "check('user:1')",
    ),
    "memory check() cost 2.5": (
        "from limiter import RateLimiter\nlim = RateLimiter(1e12, 10**15)\ncheck = lim.check",
        "check('user:1', 2.5)",
    ),
    "memory check() two limits": (
        "from limiter import RateLimiter\n"
        "lim = RateLimiter('1000000/second;100000000/hour')\ncheck = lim.check",
        "check('user:1')",
    ),
    "memory check() cost mapping": (
        "from limiter import RateLimiter\n"
        "lim = RateLimiter({'requests': '1000000/second'})\ncheck = lim.check",
        "check('user:1', {'requests': 1})",
    ),
    "wsgi middleware": (
        "from limiter import RateLimiter\nfrom limiter.adapters.wsgi import RateLimitMiddleware\n"
        "def app(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Type', 'text/plain')])\n    return [b'ok']\n"
        "mw = RateLimitMiddleware(app, RateLimiter(1e12, 10**15))\n"
        "env = {'REQUEST_METHOD': 'GET', 'PATH_INFO': '/', 'REMOTE_ADDR': '203.0.113.7'}\n"
        "def start_response(status, headers, exc_info=None): pass",
        "mw(env, start_response)",
    ),
    "sqlite check()": (
        "import tempfile, os\nfrom limiter import RateLimiter, SQLiteStore\n"
        "path = os.path.join(tempfile.mkdtemp(), 'ab.db')\n"
        "lim = RateLimiter(1e12, 10**15, store=SQLiteStore(path))\ncheck = lim.check",
        "check('user:1')",
    ),
    "redis check()": (
        "import redis\nfrom limiter import RateLimiter, RedisStore\n"
        "client = redis.Redis.from_url(os.environ['AB_REDIS_URL'], socket_timeout=5.0)\n"
        "lim = RateLimiter(1e12, 10**15, store=RedisStore(client, prefix='ab:'))\n"
        "check = lim.check",
        "check('user:1')",
    ),
}

#: Calls per sample: the in-process cases are fast, the stores are not.
CALLS = {"sqlite check()": 20_000, "redis check()": 5_000, "wsgi middleware": 100_000}
DEFAULT_CALLS = 300_000

CHILD = """
import os, sys, time
{setup}
def run(n):
    start = time.perf_counter()
    for _ in range(n):
        {statement}
    return time.perf_counter() - start
run(max(1, {n} // 10))
print(min(run({n}) for _ in range(3)) / {n} * 1e9)
"""


def export(ref: str, into: Path) -> Path:
    """``ref``'s tree under ``into`` (``git archive``); returns its ``src`` directory."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def measure(src: Path, case: str, scale: float) -> float:
    """Nanoseconds per call of ``case`` with ``limiter`` imported from ``src``."""
    setup, statement = CASES[case]
    n = max(1, int(CALLS.get(case, DEFAULT_CALLS) * scale))
    code = CHILD.format(setup=setup, statement=statement, n=n)
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds of fewer calls")
    parser.add_argument("--json", help="also write the samples to this file")
    args = parser.parse_args(argv)
    rounds, scale = (3, 0.3) if args.quick else (args.rounds, 1.0)
    cases = list(CASES)
    try:
        from . import redisenv

        os.environ["AB_REDIS_URL"] = redisenv.url()
    except Exception as exc:  # Unavailable, or redis-py missing
        print(f"redis check(): skipped ({exc})")
        cases.remove("redis check()")
    samples: Dict[str, Dict[str, List[float]]] = {c: {"new": [], "old": []} for c in cases}
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        old_src = export(args.against, Path(tmp))
        new_src = ROOT / "src"
        for i in range(rounds):
            for case in list(cases):
                # Alternate which tree goes first, so neither always runs warm.
                order = [("new", new_src), ("old", old_src)]
                for label, src in order if i % 2 == 0 else order[::-1]:
                    try:
                        samples[case][label].append(measure(src, case, scale))
                    except subprocess.CalledProcessError as exc:
                        tree = "this checkout" if label == "new" else args.against
                        why = (exc.stderr or "").strip().splitlines()[-1:] or ["no output"]
                        print(f"{case}: skipped, fails on {tree} ({why[0]})")
                        cases.remove(case)
                        break
            print(f"round {i + 1}/{rounds} done", file=sys.stderr)
    print(f"\nthis checkout vs {args.against}: {rounds} rounds, ns per call\n")
    print(
        "| case | ratio of bests (this / ref) | ratio of medians | this best / median (ns) "
        "| ref best / median (ns) | spread between rounds |"
    )
    print("|---|---|---|---|---|---|")
    for case in cases:
        new, old = samples[case]["new"], samples[case]["old"]
        m_new, m_old = statistics.median(new), statistics.median(old)
        spread = max((max(s) - min(s)) / statistics.median(s) for s in (new, old))
        print(
            f"| {case} | {min(new) / min(old):.3f} | {m_new / m_old:.3f} | "
            f"{min(new):.0f} / {m_new:.0f} | {min(old):.0f} / {m_old:.0f} | {spread * 100:.1f}% |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
