"""What the commands write for people: durations, keys a client chose, quiet store logs."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator


def duration(seconds: float) -> str:
    """``12 s``, ``100 ms``, ``60 min``, ``24 h``: a refill interval for people."""
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= 2 * size or (unit == "s" and seconds >= 1):
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms"


def algorithm_name(kind: str) -> str:
    """A policy's ``kind`` as ``--algorithm`` names it (``"bucket"``: ``"token-bucket"``)."""
    return "token-bucket" if kind == "bucket" else kind


def printable(text: str) -> str:
    """``repr(text)`` for a terminal: control characters escaped (see ``escape``)."""
    return escape(repr(text))


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def escape(text: str) -> str:
    """``text`` with C0, DEL, C1 and bidi controls as ``\\xNN``/``\\uNNNN``: a key a client
    chose must not set the terminal's title, clear it or reorder a line."""
    out = []
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif char in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


@contextlib.contextmanager
def quiet_store_logs() -> Iterator[None]:
    """Drop the stores' log records: a failure is reported once, on one line, by the command."""

    def quiet(record: logging.LogRecord) -> bool:
        return False

    stores_log = logging.getLogger("limiter.stores")
    stores_log.addFilter(quiet)
    try:
        yield
    finally:
        stores_log.removeFilter(quiet)
