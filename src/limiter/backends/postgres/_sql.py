"""The SQL of the PostgreSQL stores: names, the table, the check function, the sweep.

``apply.sql`` holds the PL/pgSQL (``bucket.lua`` translated); this module fills
in its names and constants and writes the other statements.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, List, NamedTuple, Optional, Sequence

from limiter.clock import finite_seconds
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON

#: The version in every function's name: a change of ``apply.sql`` that changes
#: results bumps it, so that an upgrade installs new functions beside the old.
VERSION = 6

#: The first key of the stores' advisory locks (``pg_advisory_xact_lock(LOCK_CLASS, hash)``):
#: "LIMI" in ASCII, apart from an application's own single-key locks.
LOCK_CLASS = 0x4C494D49

#: Each function's name after the table's: ``limiter`` gives ``limiter_apply_v6``.
_FUNCTIONS = ("apply", "lockstatus", "breach", "mul", "div", "slots")
_LONGEST = max(len(f"_{name}_v{VERSION}") for name in _FUNCTIONS)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _quoted(name: str) -> str:
    return '"' + name + '"'


class Names(NamedTuple):
    """The quoted, qualified names of one table and of its functions."""

    table: str  # "schema"."table" or "table"
    apply: str
    functions: List[str]  # every function, in apply.sql's placeholders' order (_FUNCTIONS)


def names(table: str) -> Names:
    """The names for ``table`` (``"name"`` or ``"schema.name"``): ``ValueError`` for another.

    Each part is a plain identifier (letters, digits, ``_``; case kept) short
    enough for its functions' names (at most 63 bytes).
    """
    if not isinstance(table, str):
        raise TypeError(f"table must be a str, got {table!r:.100}")
    parts = table.split(".")
    limit = 63 - _LONGEST
    if (
        len(parts) > 2
        or not all(_IDENTIFIER.match(part) for part in parts)
        or len(parts[-1]) > limit
        or len(parts[0]) > 63
    ):
        raise ValueError(
            f"table must be a name or schema.name of letters, digits and _ (the name at most "
            f"{limit} characters), got {table!r:.100}"
        )
    schema = _quoted(parts[0]) + "." if len(parts) == 2 else ""
    functions = [schema + _quoted(f"{parts[-1]}_{name}_v{VERSION}") for name in _FUNCTIONS]
    return Names(schema + _quoted(parts[-1]), functions[0], functions)


def _load() -> str:
    from importlib.resources import files  # Python >= 3.9

    return files(__package__).joinpath("apply.sql").read_text(encoding="utf-8")


_SOURCE = _load()
_CONSTANTS = {
    "EPSILON": f"{TIME_EPSILON!r}::float8",
    "TOLERANCE": f"{CLOCK_TOLERANCE!r}::float8",
    "LOCKCLASS": str(LOCK_CLASS),
    # As float8 literals: a bare decimal would be numeric, whose arithmetic is not IEEE's.
    "QSCALE": f"{2.0**-600!r}::float8",
    "QUNSCALE": f"{2.0**600!r}::float8",
    "LOCKED": f"{-(2.0**-600)!r}::float8",
}


def functions_sql(names: Names) -> str:
    """``apply.sql`` for ``names``: the CREATE OR REPLACE FUNCTION statements."""
    text = _SOURCE
    replacements = dict(_CONSTANTS, TABLE=names.table)
    for name, qualified in zip(_FUNCTIONS, names.functions):
        replacements[name.upper()] = qualified
    for placeholder, value in replacements.items():
        marker = f"@{placeholder}@"
        if marker not in text:
            raise RuntimeError(f"limiter/backends/postgres/apply.sql lacks {marker}")
        text = text.replace(marker, value)
    return text


def table_sql(names: Names, unlogged: bool) -> str:
    """The CREATE TABLE IF NOT EXISTS of the state table (``to_row``'s numbers, leases)."""
    # fillfactor 70: room on each page for HOT updates (no index is touched,
    # as keep_until has none); COLLATE "C": keys compare as bytes.
    return (
        f"CREATE {'UNLOGGED ' if unlogged else ''}TABLE IF NOT EXISTS {names.table} (\n"
        '    key text COLLATE "C" PRIMARY KEY,\n'
        "    a double precision NOT NULL,\n"
        "    b double precision NOT NULL,\n"
        "    c double precision,\n"
        "    keep_until double precision NOT NULL,\n"
        "    leases double precision[]\n"
        ") WITH (fillfactor = 70);\n" + _add_leases_sql(names)
    )


def _add_leases_sql(names: Names) -> str:
    """ALTER TABLE ... ADD COLUMN IF NOT EXISTS leases, only when it is missing.

    Only then: ALTER TABLE needs the table's owner even when the column
    exists, and the role installing the functions may not be its owner.
    """
    table = names.table.replace("'", "''")
    return (
        "DO $add$ BEGIN\n"
        "  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = "
        f"'{table}'::regclass AND attname = 'leases' AND NOT attisdropped) THEN\n"
        f"    ALTER TABLE {names.table} ADD COLUMN IF NOT EXISTS leases double precision[];\n"
        "  END IF;\n"
        "END $add$"
    )


def install_statements(names: Names, unlogged: bool = False) -> List[str]:
    """What ``install()`` runs, in order, in one transaction."""
    return [
        f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0)",  # one installer at a time
        table_sql(names, unlogged),
        functions_sql(names),
        f"COMMENT ON FUNCTION {names.apply}(text[], text) IS '{fingerprint(names)}'",
    ]


def install_sql(names: Names, unlogged: bool = False) -> str:
    """Every statement ``install()`` runs, as one script for a DBA (psql -f)."""
    statements = install_statements(names, unlogged)
    ended = [s + ("\n" if s.endswith(";\n") else ";\n") for s in statements]
    return "BEGIN;\n" + "".join(ended) + "COMMIT;\n"


def fingerprint(names: Names) -> str:
    """What ``COMMENT ON FUNCTION apply`` holds once installed: the functions' digest."""
    digest = hashlib.sha256(functions_sql(names).encode("utf-8")).hexdigest()[:32]
    return f"limiter v{VERSION} {digest}"


def installed_sql(names: Names) -> str:
    """A query of ``(table exists, apply's comment or NULL)``; escaped names as SQL literals."""
    table = names.table.replace("'", "''")
    function = f"{names.apply}(text[], text)".replace("'", "''")
    return (
        f"SELECT to_regclass('{table}') IS NOT NULL, "
        f"obj_description(to_regprocedure('{function}'), 'pg_proc')"
    )


#: What a check's statement adds, unless the store keeps synchronous commits: its
#: transaction (only it) commits without waiting for the WAL to reach the disk.
#: In the statement, not in the function: a function's SET clause, or its own
#: setting, would be undone before the commit reads it.
ASYNC_COMMIT = ", set_config('synchronous_commit', 'off', true)"


def apply_sql(names: Names, synchronous_commit: bool = True) -> str:
    """The one statement of a check, ``SELECT apply(keys, argv)``, with psycopg's placeholders.

    The keys come as the UTF-8 bytes of a ``text[]`` literal, whatever the
    client_encoding; ``synchronous_commit`` False adds ``ASYNC_COMMIT``.
    """
    tail = "" if synchronous_commit else ASYNC_COMMIT
    return f"SELECT {names.apply}(convert_from(%s::bytea, 'UTF8')::text[], %s::text){tail}"


class Statement(NamedTuple):
    """The prepared statement of a check on libpq's level: its name and text."""

    name: bytes
    text: bytes


def apply_statement(names: Names, synchronous_commit: bool = True) -> Statement:
    """``apply_sql`` with ``$1``, ``$2``, named after its own digest (one per table, version
    and commit mode)."""
    sql = apply_sql(names, synchronous_commit).replace("%s", "$1", 1).replace("%s", "$2", 1)
    text = sql.encode("utf-8")
    return Statement(b"limiter_" + hashlib.sha1(text).hexdigest()[:20].encode("ascii"), text)


def array_literal(keys: Sequence[str]) -> bytes:
    """``keys`` as a ``text[]`` literal in UTF-8 (row keys hold no NUL and no lone surrogate)."""
    quoted = []
    for key in keys:
        if '"' in key or "\\" in key:
            key = key.replace("\\", "\\\\").replace('"', '\\"')
        quoted.append('"' + key + '"')
    return ("{" + ",".join(quoted) + "}").encode("utf-8")


def sweep_sql(names: Names) -> str:
    """Delete up to ``%(batch)s`` rows no longer needed, skipping rows a check holds.

    Parameters ``now`` (NULL: the server's clock), ``horizon`` (idle before
    it: forgotten too; ``-Infinity`` for none) and ``batch``.
    """
    t = names.table
    return (
        f"DELETE FROM {t} WHERE ctid = ANY(ARRAY("
        f"SELECT ctid FROM {t} WHERE keep_until <= coalesce(%(now)s::float8, "
        "extract(epoch FROM clock_timestamp())::float8) "
        "OR coalesce(c, b) < %(horizon)s::float8 "
        "LIMIT %(batch)s FOR UPDATE SKIP LOCKED))"
    )


def reset_sql(names: Names) -> str:
    return f"DELETE FROM {names.table} WHERE key = %s"


def sweep_params(now: Optional[float], max_age: Optional[float], batch: int) -> dict:  # type: ignore[type-arg]
    """``sweep_sql``'s parameters, or the error for a bad ``batch`` or ``max_age``."""
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise TypeError(f"batch must be an int, got {batch!r:.100}")
    if not 1 <= batch <= 2**31 - 1:  # a LIMIT the server takes as an integer
        raise ValueError(f"batch must be from 1 to 2**31 - 1, got {batch!r}")
    if now is not None:
        now = seconds(now, "now")  # NaN is above every number in SQL: all rows would go
    if max_age is None:
        horizon = float("-inf")
    elif now is None:
        raise ValueError("max_age needs now (the clock of the checks), got now=None")
    else:
        horizon = now - seconds(max_age, "max_age", ">= 0")
    return {"now": now, "horizon": horizon, "batch": batch}


def seconds(value: Any, name: str, bound: Optional[str] = None) -> float:
    """``finite_seconds(value, name)``, and ``> 0`` or ``>= 0`` as ``bound`` says."""
    checked = finite_seconds(value, name)
    if bound is not None and not (checked > 0 if bound == "> 0" else checked >= 0):
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return checked


#: The privileges a store needs on its table: checks read and write, reset and sweep delete.
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def ping_sql(names: Names) -> str:
    """``ping``'s one statement: a peek (``apply_sql``'s parameters), the role, the
    privileges it lacks on the table, and whether the session is read-only."""
    table = names.table.replace("'", "''")
    lacks = ", ".join(
        f"CASE WHEN NOT has_table_privilege('{table}', '{p}') THEN '{p}' END" for p in PRIVILEGES
    )
    return (
        f"SELECT ({apply_sql(names)[len('SELECT ') :]}), current_user, "
        f"array_to_string(ARRAY[{lacks}], ', '), current_setting('transaction_read_only')"
    )


def ping_problem(row: Sequence[object], names: Names) -> Optional[str]:
    """Why ``ping_sql``'s ``row`` says checks cannot run, or ``None``."""
    _, role, lacks, read_only = row
    if lacks:
        return (
            f"the role {role} may not {lacks} the table {names.table}: grant it "
            f"({', '.join(PRIVILEGES)}; docs/stores.md, PostgreSQL)"
        )
    if read_only == "on":
        return (
            "the server is read-only (a replica, or default_transaction_read_only) and "
            "checks write: point the store at the primary (target_session_attrs=read-write)"
        )
    return None
