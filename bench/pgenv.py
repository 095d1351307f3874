"""The one PostgreSQL server a bench run talks to (as ``redisenv`` is for Redis).

* ``POSTGRES_URL`` set: that server and nothing else (the bench's tables are
  named after its process and dropped afterwards).
* ``POSTGRES_URL`` unset and ``initdb``/``pg_ctl`` found (PATH, then
  ``/usr/lib/postgresql/*/bin``): a throwaway cluster in a temporary directory
  on a free loopback port, with PostgreSQL's default durability (``fsync``
  and ``synchronous_commit`` on: a logged table's commit waits for the disk),
  started the first time a section asks for it and removed when the run ends.
  As root it runs as the ``postgres`` system user, which PostgreSQL requires.
* Neither: the PostgreSQL section reports ``Unavailable`` with the reason.

Nothing here ever connects to a server the machine already runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from .common import Unavailable, server_url

_state: Dict[str, Any] = {}


def _binary(name: str) -> Optional[str]:
    found = shutil.which(name)
    if found:
        return found
    for directory in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (directory / name).exists():
            return str(directory / name)
    return None


def _as_owner(args: List[str]) -> List[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _run(args: List[str], cwd: str) -> None:
    done = subprocess.run(_as_owner(args), capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise Unavailable(f"{Path(args[0]).name} failed: {(done.stdout + done.stderr)[-500:]}")


def _start_throwaway() -> str:
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise Unavailable("POSTGRES_URL is not set and initdb/pg_ctl were not found")
    tmp = tempfile.mkdtemp(prefix="bench-postgres-")
    if os.geteuid() == 0:
        os.chmod(tmp, 0o755)
        shutil.chown(tmp, "postgres", "postgres")
    _state["tmp"] = tmp
    atexit.register(close)
    data = os.path.join(tmp, "data")
    _run([initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"], tmp)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={tmp}"
    log = os.path.join(tmp, "server.log")
    _run([pg_ctl, "-D", data, "-l", log, "-w", "-t", "60", "-o", options, "start"], tmp)
    _state["stop"] = [pg_ctl, "-D", data, "-m", "fast", "-w", "stop"]
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def _probe(found: str) -> None:
    import psycopg

    with psycopg.connect(found, connect_timeout=5) as conn:
        conn.execute("SELECT 1")


def url() -> str:
    """The URL of this run's PostgreSQL server, or raise ``Unavailable`` saying why none."""
    missing = "psycopg is not installed (pip install 'tokenlimiter[postgres]')"
    names = ("PostgreSQL", "cluster", missing)
    return server_url(_state, "POSTGRES_URL", _start_throwaway, _probe, names)


def describe() -> str:
    """The server used in this run (version, durability settings, origin), or why none was."""
    if "url" not in _state:
        return str(_state.get("error", "not used in this run"))
    try:
        import psycopg

        with psycopg.connect(_state["url"], connect_timeout=5) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            fsync = conn.execute("SHOW fsync").fetchone()[0]
            sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        return f"{version}, fsync={fsync}, synchronous_commit={sync} ({_state['origin']})"
    except Exception as exc:
        return f"unreachable at the end of the run ({exc})"


def close() -> None:
    """Stop and remove the throwaway cluster, if this run started one."""
    stop = _state.pop("stop", None)
    tmp = _state.pop("tmp", None)
    if stop is not None and tmp is not None:
        subprocess.run(_as_owner(stop), capture_output=True, cwd=tmp)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    _state.pop("url", None)
    _state.pop("error", None)
