"""``dir(limiter)`` lists the public names, loaded lazily (issue 22 item 19)."""

from __future__ import annotations

import subprocess
import sys

import limiter


def test_dir_lists_every_public_name() -> None:
    names = dir(limiter)
    assert set(limiter.__all__) <= set(names)
    assert names == sorted(names)
    assert "__version__" in names


def test_dir_loads_nothing() -> None:
    code = (
        "import sys, limiter; names = dir(limiter); "
        "assert 'RateLimiter' in names and 'store_from_url' in names; "
        "assert 'limiter.ratelimiter' not in sys.modules, 'dir imported the core'; "
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
