"""``memory://[?max_keys=N]``: a ``MemoryStore`` from a URL."""

from __future__ import annotations

from typing import Any, Dict

from limiter.backends._url import StoreURL, store_options
from limiter.backends.memory import MemoryStore

MEMORY_PARAMS = ("max_keys",)


def memory_store(parsed: StoreURL, options: Dict[str, Any]) -> MemoryStore:
    """The ``MemoryStore`` of a ``memory://`` URL; ``options`` override its query."""
    parsed.no_userinfo()
    if parsed.netloc or parsed.path not in ("", "/"):
        parsed.fail("memory:// takes no host or path (write memory:// or memory://?max_keys=N)")
    parsed.check_query(MEMORY_PARAMS)
    kwargs: Dict[str, Any] = {}
    if "max_keys" in parsed.query:
        kwargs["max_keys"] = parsed.integer("max_keys", 1, none=True)
    store_options(options, MEMORY_PARAMS, "a memory://", kwargs)
    return MemoryStore(**kwargs)
