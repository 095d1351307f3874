"""MemoryStore: the conformance suite, plus what only an in-process store promises."""

from __future__ import annotations

from limiter import MemoryStore
from limiter.testing import StoreConformance


class TestMemoryStoreSync(StoreConformance):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreAsync(StoreConformance):
    mode = "async"

    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreBounded(StoreConformance):
    """A cap far above what the suite uses must not change any behaviour."""

    def make_store(self) -> MemoryStore:
        return MemoryStore(max_keys=100)
