"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot.

A block whose first line is ``# needs: redis`` needs a Redis server: for a doc
with such a block, the test starts a throwaway redis-server on a free loopback
port (``helpers/redis_servers.py``) and the doc's blocks find it in ``REDIS_URL``
(``"redis://127.0.0.1:<port>/0"``, also set in the environment), ``REDIS_HOST``
and ``REDIS_PORT``.  Without a ``redis-server`` binary the whole doc is skipped
with the reason (its blocks share one namespace), except under ``CI=true``.
No block may count on a server at 6379.  ``# needs: postgres`` does the same
with a throwaway PostgreSQL (``helpers/postgres_servers.py``): its URL, for the
application's role, is ``POSTGRES_URL``.

``# needs: slowapi`` (or ``flask-limiter``, ``django-ratelimit``) names a peer
library a block runs beside ours: they are in the ``full`` extra, and without
one the doc is skipped with how to install it, except under ``CI=true``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Iterator, List, Set

import pytest

from helpers.needs import need_module

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
# "# needs: redis" or "# needs: redis, other", optionally followed by a comment
# in parentheses or after " -- ".
NEEDS = re.compile(r"\A#\s*needs:\s*([a-z][a-z0-9-]*(?:\s*,\s*[a-z][a-z0-9-]*)*)")
#: The peer libraries a block may need: the name in "# needs:" -> the module to import.
PEERS = {
    "slowapi": "slowapi",
    "flask-limiter": "flask_limiter",
    "django-ratelimit": "django_ratelimit",
}
KNOWN_NEEDS = {"redis", "postgres", *PEERS}


def python_blocks(path: Path) -> List[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def block_needs(block: str) -> Set[str]:
    """What a block declares it needs on its first line (``# needs: redis``)."""
    match = NEEDS.match(block)
    if match is None:
        return set()
    return {need.strip() for need in match.group(1).split(",")}


def doc_needs(path: Path) -> Set[str]:
    return set().union(*(block_needs(block) for block in python_blocks(path)))


@pytest.fixture(scope="module")
def docs_redis() -> Iterator[Any]:
    """One throwaway redis-server for the docs; skips without the binary (fails if CI=true)."""
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[dev]'")
    from helpers.redis_servers import redis_server

    yield from redis_server()


@pytest.fixture(scope="module")
def docs_postgres() -> Iterator[Any]:
    """One throwaway PostgreSQL for the docs; skips without initdb (fails if CI=true)."""
    need_module("psycopg")
    from helpers.postgres_servers import postgres_server

    yield from postgres_server()


@pytest.mark.usefixtures("current_loop")  # Python 3.9: redis.asyncio asks for the current loop
@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Blocks of one file run in order, in one namespace, in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    needs = doc_needs(path)
    assert needs <= KNOWN_NEEDS, f"unknown '# needs:' in {path.name}: {needs - KNOWN_NEEDS}"
    for peer in sorted(needs & PEERS.keys()):
        need_module(PEERS[peer])  # skips the doc without it
    if "redis" in needs:
        server = request.getfixturevalue("docs_redis")  # skips the doc without redis-server
        client = server.client()
        client.flushall()  # each doc starts from an empty server
        client.close()
        namespace.update(REDIS_URL=server.url, REDIS_HOST="127.0.0.1", REDIS_PORT=server.port)
        monkeypatch.setenv("REDIS_URL", server.url)
    if "postgres" in needs:
        url = request.getfixturevalue("docs_postgres").url()  # skips the doc without initdb
        namespace.update(POSTGRES_URL=url)
        monkeypatch.setenv("POSTGRES_URL", url)
    sys.modules.setdefault(namespace["__name__"], type(sys)(namespace["__name__"]))
    for number, block in enumerate(python_blocks(path), 1):
        code = compile(block, f"{path.name}[block {number}]", "exec")
        exec(code, namespace)
        # Functions named test_* in a block are examples of user tests: run them
        # with the fixtures they name, so they are checked too.
        for name, func in list(namespace.items()):
            if name.startswith("test_") and callable(func) and not getattr(func, "_ran", False):
                run_example_test(func)
                func._ran = True


def run_example_test(func: object) -> None:
    import inspect

    from limiter import ManualClock

    fixtures = {"limiter_clock": ManualClock}
    params = inspect.signature(func).parameters  # type: ignore[arg-type]
    func(**{name: fixtures[name]() for name in params})  # type: ignore[operator]


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -e . && python -m limiter demo" in readme
    assert '\npip install -e ".[dev]" && python -m pytest -n auto\n' in readme
    # .ci/run takes the command from README.md (the first line that starts so).
    assert """grep -m1 -E '^pip install -e "\\.\\[dev\\]" && python -m pytest' README.md""" in ci
    assert 'eval "$test_cmd"' in ci
    # ... after the full extra: the tests that dev leaves out fail under CI=true.
    assert ci.index('pip install -q -e ".[full]"') < ci.index('eval "$test_cmd"')
    assert 'pip install -e ".[full]"' in readme
    # README says what the full suite needs; CI also runs it where Redis is absent.
    assert "redis-server" in readme and "apt-get install redis-server" in readme
    assert "unshare -n -m" in ci and 'eval "$pytest_cmd"' in ci


def test_no_doc_counts_on_a_redis_at_6379() -> None:
    """Docs blocks reach Redis through REDIS_URL / REDIS_PORT (see the module docstring)."""
    offending = [
        f"{path.relative_to(ROOT)} block {number}"
        for path in DOCS
        for number, block in enumerate(python_blocks(path), 1)
        if re.search(r"(?<!\d)6379(?!\d)", block)  # (not 26379, Sentinel's port)
    ]
    assert offending == [], (
        "these blocks use a server at 6379: start them with `# needs: redis` and use "
        "REDIS_URL (or REDIS_HOST/REDIS_PORT), which the tests point at a throwaway server"
    )


def test_needs_marker_parsing() -> None:
    assert block_needs("# needs: redis\nimport redis\n") == {"redis"}
    assert block_needs("# needs: redis (the tests start one)\n") == {"redis"}
    assert block_needs("# needs: redis, sqlite -- why\n") == {"redis", "sqlite"}
    assert block_needs("import redis\n# needs: redis\n") == set()  # first line only


def test_every_doc_has_runnable_code() -> None:
    without = [p.name for p in DOCS if p.name != "benchmarks.md" and not python_blocks(p)]
    assert without == []
