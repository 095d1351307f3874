"""``inspect`` and ``reset``: the operator's tools (docs/cli.md); they act on the
shared store (never its fallback) through the app's limiter or its twin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple, Union
from urllib.parse import unquote

from limiter.backends._url import redact_url, split_userinfo
from limiter.cli._output import algorithm_name, printable, quiet_store_logs
from limiter.clock import Clock
from limiter.core.bucket import peek_view
from limiter.core.limits import Policy
from limiter.core.result import RateLimitResult
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError, is_async_only
from limiter.urls import STORAGE_URL_ENV, store_from_url

#: The exit status of ``inspect`` and ``reset`` when the store holds nothing for the key.
NO_STATE = 3


def _rate(text: str) -> Union[str, float]:
    """``--limit`` as RateLimiter takes it: the string, or a bare number as tokens per second."""
    try:
        number = float(text)
    except ValueError:
        return text
    return number if number == number else text  # NaN: the string, refused by RateLimiter


def store_url(given: Optional[str]) -> Tuple[Optional[str], str]:
    """``(url, where it comes from)``: ``--store``, else ``$LIMITER_STORAGE_URL``."""
    if given is not None:
        return given.strip(), "--store"
    return os.environ.get(STORAGE_URL_ENV, "").strip() or None, STORAGE_URL_ENV


def _private_store(url: str) -> Optional[str]:
    """Why the store of ``url`` cannot be another process's, or ``None``."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "memory":
        return "memory:// is the memory of one process"
    if scheme == "sqlite" and _sqlite_path(url) == ":memory:":
        return "sqlite:///:memory: is the memory of one process"
    return None


def _sqlite_path(url: str) -> Optional[str]:
    """The file of an ``sqlite:///path`` URL (as ``store_from_url`` reads it), else ``None``."""
    if not url.lower().startswith("sqlite:///"):
        return None  # not sqlite, or a host: store_from_url explains
    return unquote(url[len("sqlite:///") :].partition("?")[0]) or None


def _one_line(exc: BaseException, url: str) -> str:
    """``exc`` as one line, without the URL's password should a client library echo it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    password = (split_userinfo(url)[1] or "").partition(":")[2]
    for secret in {password, unquote(password)} - {""}:
        text = text.replace(secret, "***")
    return text


def _load_limiter(spec: str, sub: argparse.ArgumentParser) -> RateLimiter:
    """The ``RateLimiter`` that ``module:attribute`` names (a usage error otherwise)."""
    import importlib

    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        sub.error(f"argument --limiter: expected MODULE:ATTRIBUTE (myapp.limits:rl), got {spec!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        sub.error(f"argument --limiter: cannot import {module_name!r}: {exc}")
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            sub.error(f"argument --limiter: {module_name!r} has no attribute {attribute!r}")
    if not isinstance(found, RateLimiter):
        sub.error(f"argument --limiter: {spec!r} is no RateLimiter, got {found!r:.100}")
    return found


def bucket_command(args: argparse.Namespace, sub: argparse.ArgumentParser) -> int:
    """``inspect`` or ``reset``: usage errors exit 2, a store that fails exits 1,
    no stored state for the key exits 3."""
    if args.limiter is not None:
        for option in ("limit", "burst", "algorithm"):
            if getattr(args, option) is not None:
                sub.error(f"argument --{option}: not with --limiter, which gives the limits")
        if args.name is not None:
            sub.error("argument --name: not with --limiter, which gives the name")
        like = _load_limiter(args.limiter, sub)
    elif args.limit is None:
        sub.error("give the application's limiter as --limiter MODULE:ATTRIBUTE, or --limit RATE")
    else:
        try:  # the limiter and the key first: a usage error opens no store
            algorithm = args.algorithm or "token-bucket"
            like = RateLimiter(_rate(args.limit), args.burst, name=args.name, algorithm=algorithm)
        except (TypeError, ValueError) as exc:
            sub.error(f"argument --limit: {exc}")
    try:
        like.storage_key(args.key)
    except TypeError as exc:
        sub.error(f"argument KEY: {exc}")
    if args.limiter is not None and args.store is None:
        return _through_the_app(args, sub, like)
    url, source = store_url(args.store)
    if url is None:
        sub.error(f"no store: give --store URL or set {STORAGE_URL_ENV}")
    return _on_store(args, sub, url, source, like)


def _through_the_app(
    args: argparse.Namespace, sub: argparse.ArgumentParser, app: RateLimiter
) -> int:
    """``inspect`` or ``reset`` through the application's own limiter and store."""
    from limiter.backends.memory import MemoryStore

    store_of = f"{args.limiter}'s store, {type(app.store).__name__},"
    if isinstance(app.store, MemoryStore) or getattr(app.store, "path", None) == ":memory:":
        sub.error(
            f"argument --limiter: {store_of} is the memory of one process: give "
            "--store URL, the shared store the application uses"
        )
    if is_async_only(app.store):
        sub.error(f"argument --limiter: {store_of} is async only: give --store URL")
    path = getattr(app.store, "path", None)
    own = f"sqlite:///{path}" if isinstance(path, str) else ""
    return _run_bucket_command(args, app, own or type(app.store).__name__, "--limiter", own)


def _on_store(
    args: argparse.Namespace, sub: argparse.ArgumentParser, url: str, source: str, like: RateLimiter
) -> int:
    """Open the shared store at ``url`` (given by ``source``), run the bucket command
    on a twin of ``like`` over it (its limits, name, lockout and given clock), and
    close the store."""
    command = f"limiter {args.command}"
    shown = redact_url(url)
    private = _private_store(url)
    if private is not None:
        sub.error(
            f"{source}: {private} ({shown}): {args.command} needs the shared store the "
            "application uses (sqlite:///path.db, redis://host:6379/0, ...)"
        )
    path = _sqlite_path(url)
    if path is not None and not os.path.exists(path):
        # SQLiteStore would create an empty database: a typo would show full buckets.
        print(f"{command}: the store {shown} does not exist: no file {path!r}", file=sys.stderr)
        return 1
    try:
        # No fallback, whatever the URL says: the shared store answers, or an error.
        store = store_from_url(url, fallback=None)
    except (ValueError, ImportError) as exc:
        # A bad URL or scheme (shown with its password as ***) or an extra to install.
        sub.error(f"{source}: {exc}")
    except OSError as exc:  # sqlite: not a database, no permission, ...
        print(f"{command}: cannot open the store {shown}: {_one_line(exc, url)}", file=sys.stderr)
        return 1
    clock = _given_clock(like)
    try:
        twin = RateLimiter(
            list(like.limits), store=store, name=like.name, lockout=like.lockout, clock=clock
        )
        return _run_bucket_command(args, twin, shown, source, url)
    finally:
        close_store(store)


def close_store(store: Any) -> None:
    """Close ``store`` if it can be closed (a ``MemoryStore`` cannot)."""
    close = getattr(store, "close", None)
    if callable(close):
        close()


def _run_bucket_command(
    args: argparse.Namespace, limiter: RateLimiter, shown: str, source: str, url: str
) -> int:
    command = f"limiter {args.command}"
    try:
        with quiet_store_logs():
            if _has_state(limiter, args.key) is False:
                print(
                    f"{command}: no stored state for key {printable(args.key)} of limiter "
                    f"{printable(limiter.name)} on {shown}: a wrong --name or store prefix is "
                    "the usual cause (a key never seen, or idle until its buckets were full "
                    "and forgotten, has none either)",
                    file=sys.stderr,
                )
                return NO_STATE
            if args.command == "inspect":
                report = _inspect_report(limiter, args.key, limiter.peek(args.key), shown)
            else:
                limiter.reset(args.key)
                if _has_state(limiter, args.key):
                    print(
                        f"{command}: the store {shown} still holds key "
                        f"{printable(args.key)} after the reset: nothing reset",
                        file=sys.stderr,
                    )
                    return 1
                report = _reset_report(limiter, args.key, shown)
    except StoreError as exc:
        print(
            f"{command}: the store {shown} does not answer: {_one_line(exc, url)}", file=sys.stderr
        )
        return 1
    if args.json:
        print(json.dumps(report, sort_keys=False))
    elif args.command == "inspect":
        print(_inspect_text(report, source))
    else:
        print(_reset_text(report, source))
    return 0


def _bucket(limit: Policy, result: RateLimitResult) -> Dict[str, Any]:
    """One limit's state, from a peek's result for it: a bucket's, or ``_window``'s."""
    if limit.kind != "bucket":
        return _window(limit, result)
    exact, wait = peek_view(limit, result)
    allowed = wait <= limit.slack
    return {
        "name": limit.name,
        "algorithm": algorithm_name(limit.kind),
        "rate": limit.rate,
        "burst": limit.burst,
        "window": limit.window,
        "tokens": result.remaining,
        "tokens_exact": exact,
        "full_in": result.reset_after,
        "allowed": allowed,
        "retry_after": 0.0 if allowed else wait,
    }


def _window(limit: Any, result: RateLimitResult) -> Dict[str, Any]:
    """A window's (or ``Quota``'s) state from a peek's result; a refused sliding
    window's ``retry_after`` is the sure bound ``full_in``.
    """
    count, remaining, reset = limit.burst, result.remaining, result.reset_after
    ends_in: Optional[float] = reset
    if limit.kind == "sliding-window":
        # reset_after is the next window's end while the current one counts
        # anything, else the current one's (0.0: nothing counted at all).
        ends_in = reset - limit.period if reset > limit.period else (reset or None)
    allowed = remaining >= 1
    return {
        "name": limit.name,
        "algorithm": limit.kind,
        "count": count,
        "period": limit.window,
        "used": count - remaining,
        "remaining": remaining,
        "window_ends_in": ends_in,
        "full_in": reset,
        "allowed": allowed,
        "retry_after": 0.0 if allowed else reset,
    }


def limit_buckets(limiter: RateLimiter, result: RateLimitResult) -> List[Dict[str, Any]]:
    """Each limit's bucket (``_bucket``), from a peek's ``result`` for ``limiter``."""
    by_policy = {r.policy: r for r in result.results or (result,)}
    return [_bucket(lim, by_policy.get(lim.name, result)) for lim in limiter.limits]


def _inspect_report(
    limiter: RateLimiter, key: str, result: RateLimitResult, shown: str
) -> Dict[str, Any]:
    buckets = limit_buckets(limiter, result)
    locked = result.locked_out
    locked_for = float(result.retry_after or 0.0) if locked else 0.0
    report: Dict[str, Any] = {
        "key": key,
        "limiter": limiter.name,
        "store": shown,
        "allowed": not locked and all(b["allowed"] for b in buckets),
        "retry_after": max([locked_for] + [b["retry_after"] for b in buckets]),
        "limits": buckets,
    }
    if limiter.lockout is not None:
        report["locked_out"] = locked
        report["locked_out_for"] = locked_for
    return report


def _reset_report(limiter: RateLimiter, key: str, shown: str) -> Dict[str, Any]:
    return {
        "key": key,
        "limiter": limiter.name,
        "store": shown,
        "reset": True,
        "limits": [
            {
                "name": lim.name,
                "algorithm": algorithm_name(lim.kind),
                "rate": lim.rate,
                "burst": lim.burst,
            }
            for lim in limiter.limits
        ],
    }


def _seconds(value: float) -> str:
    """``0 s``, ``0.250 s``, ``35.8 s``: a wait for people."""
    if value <= 0:
        return "0 s"
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def from_env(source: str) -> str:
    """What a store's description adds when ``store_url`` found it in the environment."""
    return f" (from {STORAGE_URL_ENV})" if source == STORAGE_URL_ENV else ""


def _origin(report: Dict[str, Any], source: str) -> str:
    return f"limiter {printable(report['limiter'])} on {report['store']}{from_env(source)}"


def _request_now(limit: Dict[str, Any]) -> str:
    if limit["allowed"]:
        return "allowed"
    # A sliding window's wait is a bound (see _window), and a slot's (the last
    # lease's end: a holder may give back before).
    bound = "at most " if limit["algorithm"] in ("sliding-window", "concurrency") else ""
    return f"denied, in {bound}{_seconds(limit['retry_after'])}"


def _table(rows: List[Tuple[str, ...]], left: int = 1) -> List[str]:
    """``rows`` (the header first) aligned: the first ``left`` columns and the last
    to the left, the numbers between to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if i < left or i == len(row) - 1 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]


#: How the text names each algorithm of a window row (a ``Concurrency``'s period is its lease).
_SHORT = {
    "fixed-window": "fixed",
    "sliding-window": "sliding",
    "quota": "quota",
    "concurrency": "lease",
}
#: What ``reset``'s text calls a limit's size.
_SIZE = {"token-bucket": "burst", "concurrency": "slots"}


def _inspect_text(report: Dict[str, Any], source: str) -> str:
    buckets: List[Tuple[str, ...]] = [
        ("limit", "burst", "tokens", "exact", "full in", "request now")
    ]
    windows: List[Tuple[str, ...]] = [
        ("limit", "window", "count", "used", "left", "ends in", "request now")
    ]
    for b in report["limits"]:
        name, now = b["name"], _request_now(b)
        if b["algorithm"] == "token-bucket":
            tokens = [str(b["burst"]), str(b["tokens"]), f"{b['tokens_exact']:.4f}"]
            buckets.append((name, *tokens, _seconds(b["full_in"]), now))
            continue
        window = f"{_SHORT[b['algorithm']]} {b['period']:g} s"
        counts = [str(b[field]) for field in ("count", "used", "remaining")]
        ends = "-" if b["window_ends_in"] is None else _seconds(b["window_ends_in"])
        windows.append((name, window, *counts, ends, now))
    lines = [f"key {printable(report['key'])} of {_origin(report, source)}"]
    for rows, left in ((buckets, 1), (windows, 2)):
        if len(rows) > 1:
            lines.extend(_table(rows, left))
    if report.get("locked_out"):
        lines.append(f"locked out: for {_seconds(report['locked_out_for'])} more")
    if len(report["limits"]) > 1 or "locked_out" in report:
        verdict = (
            "allowed" if report["allowed"] else f"denied, in {_seconds(report['retry_after'])}"
        )
        lines.append(f"a request of cost 1 now: {verdict}")
    return "\n".join(lines)


def _reset_text(report: Dict[str, Any], source: str) -> str:
    limits = ", ".join(
        f"{lim['name']} ({_SIZE.get(lim['algorithm'], 'count')} {lim['burst']})"
        for lim in report["limits"]
    )
    key = printable(report["key"])
    return f"reset key {key} of {_origin(report, source)}: full buckets for {limits}"


# -- what no public call tells ----------------------------------------------------
# No store protocol (limiter.store) nor RateLimiter method says whether a store
# holds state for a key (a peek of an absent key reads as a full bucket), nor
# whether a limiter was given its clock.  These two functions alone read private
# attributes for that, until the stores offer a public way (issue 23).


def _has_state(limiter: RateLimiter, key: str) -> Optional[bool]:
    """Whether ``limiter``'s store holds any state of ``key`` (``None``: it cannot tell).

    Reads the limiter's storage keys and each known store's internals (see above).
    """
    from limiter.backends.memory import MemoryStore
    from limiter.backends.redis import RedisStore
    from limiter.backends.sqlite import SQLiteStore

    skeys = limiter._storage_keys(key) if limiter._many else [limiter.storage_key(key)]
    store: Any = limiter.store
    if isinstance(store, SQLiteStore):
        blobs = [skey.encode("utf-8", "surrogatepass") for skey in skeys]

        def any_row(conn: Any) -> bool:
            marks = ",".join("?" * len(blobs))
            sql = f"SELECT 1 FROM limiter_buckets WHERE key IN ({marks}) LIMIT 1"
            return conn.execute(sql, blobs).fetchone() is not None

        return bool(store._run(any_row))
    if isinstance(store, RedisStore):
        try:
            return bool(store.client.exists(*[store._key(skey) for skey in skeys]))
        except Exception as exc:
            raise StoreError(str(exc)) from exc
    if type(store) is MemoryStore:
        with store._lock:
            return any(skey in store._young or skey in store._old for skey in skeys)
    return None


def _given_clock(app: RateLimiter) -> Optional[Clock]:
    """``app``'s clock if it was given one, else ``None`` (the store may keep its own time)."""
    return app.clock if app._clock_now is not None else None
