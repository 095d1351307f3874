"""The framework-free view of a request that key functions, ``exempt`` and ``cost`` receive.

Every adapter builds a ``RequestInfo``, so one key function serves all of them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union


class HeaderView:
    """Request headers, read-only, names case-insensitive.

    Values are ``str`` (bytes decoded as latin-1). Under WSGI the server has
    already combined repeated fields, so ``get_all`` has at most one element.
    """

    __slots__ = ()

    def get_all(self, name: str) -> List[str]:
        """Every field line of ``name``, in order; ``[]`` when absent."""
        raise NotImplementedError

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """All field lines of ``name`` joined with ``", "``, or ``default``."""
        lines = self.get_all(name)
        if not lines:
            return default
        return lines[0] if len(lines) == 1 else ", ".join(lines)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.get_all(name))


class Headers(HeaderView):
    """Headers from a mapping or from ``(name, value)`` pairs (repeats allowed).

    For tests and custom adapters: ``Headers({"X-API-Key": "k"})``,
    ``Headers([("x-forwarded-for", "1.2.3.4"), ("x-forwarded-for", "5.6.7.8")])``.
    """

    __slots__ = ("_pairs",)

    def __init__(self, headers: Union[Mapping[str, str], Iterable[Tuple[str, str]]] = ()) -> None:
        items = headers.items() if isinstance(headers, Mapping) else headers
        self._pairs = [(str(k).lower(), str(v)) for k, v in items]

    def get_all(self, name: str) -> List[str]:
        """Every value of ``name``, in order; ``[]`` when absent."""
        lname = name.lower()
        return [v for k, v in self._pairs if k == lname]

    def __repr__(self) -> str:
        return f"Headers({self._pairs!r})"


class RequestInfo:
    """One request, as every adapter sees it; what ``key_func``, ``exempt`` and ``cost`` receive.

    ``method``; ``path``: percent-decoded, no query string; ``headers``: a
    ``HeaderView``; ``peer``: the socket peer's address, or ``None`` (a Unix
    socket); ``native``: the protocol's own object (environ, scope, handler).
    """

    __slots__ = ("headers", "method", "native", "path", "peer")

    def __init__(
        self,
        method: str,
        path: str,
        headers: Union[HeaderView, Mapping[str, str], Iterable[Tuple[str, str]], None] = None,
        peer: Optional[str] = None,
        native: Any = None,
    ) -> None:
        self.method = method
        self.path = path
        if not isinstance(headers, HeaderView):
            headers = Headers(() if headers is None else headers)
        self.headers: HeaderView = headers
        self.peer = peer
        self.native = native

    def __repr__(self) -> str:
        return f"RequestInfo({self.method!r}, {self.path!r}, peer={self.peer!r})"


#: ``key_func(request) -> str | None``: the bucket a request is charged to;
#: ``None`` means "use the client IP".
KeyFunc = Callable[[RequestInfo], Optional[str]]

#: Tokens per request: a number, a mapping of limit names to numbers (each
#: limit charged its own amount), or ``cost(request)`` returning either.
Cost = Union[
    float,
    Mapping[str, float],
    Callable[[RequestInfo], Union[float, Mapping[str, float]]],
]
