"""Request keys: which bucket a request is charged to.

A key function takes a ``limiter.adapters.RequestInfo`` and returns a ``str``
key, or ``None`` to fall back to the client IP.  ``client_ip`` is the default;
``header_key`` keys on a header such as ``X-API-Key``.  Keys are passed to
``RateLimiter.check`` as they are: the limiter namespaces them per limiter and
hashes long ones, so a 1 MB header costs 71 bytes of stored key.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Tuple, Union

if TYPE_CHECKING:
    from .adapters.common import RequestInfo

__all__ = [
    "UNKNOWN_CLIENT",
    "ClientIP",
    "KeyFunc",
    "client_ip",
    "header_key",
    "parse_address",
]

#: The key of a request with no usable peer address: WSGI without
#: ``REMOTE_ADDR``, ASGI ``client`` of ``None``, a Unix socket.  All such
#: requests share this one bucket (unless ``"unix"`` is a trusted proxy and
#: the forwarding headers name the client).
UNKNOWN_CLIENT = "ip:unknown"

#: ``key_func(request) -> str | None``; ``None`` means "use the client IP".
KeyFunc = Callable[["RequestInfo"], Optional[str]]

_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
# No address, with port, brackets and a zone id, is longer than this: longer
# header entries are rejected before any parsing (and before caching).
_MAX_ENTRY = 100
_HEADERS = ("x-forwarded-for", "forwarded")


def parse_address(text: str) -> Optional[_Address]:
    """The IP address in a peer string, an ``X-Forwarded-For`` entry or a ``Forwarded`` ``for=``.

    Accepts ``1.2.3.4``, ``1.2.3.4:80``, ``2001:db8::1``, ``[2001:db8::1]:80``,
    quoted forms (``"[2001:db8::1]"``) and zone ids (``fe80::1%eth0``, dropped).
    IPv4-mapped IPv6 (``::ffff:1.2.3.4``) becomes IPv4.  Anything else
    (``unknown``, an obfuscated ``_hidden``, a host name, garbage) is ``None``.
    """
    text = text.strip()
    if len(text) > _MAX_ENTRY or not text:
        return None
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            return None
        text = text[1:-1].strip()
    if text[:1] == "[":
        end = text.find("]")
        if end < 0:
            return None
        rest = text[end + 1 :]
        if rest and not (rest[0] == ":" and _is_port(rest[1:])):
            return None
        text = text[1:end]
    elif text.count(":") == 1:
        text, _, port = text.partition(":")
        if not _is_port(port):
            return None
    pct = text.find("%")
    if pct >= 0 and ":" in text:
        text = text[:pct]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6:
        mapped = address.ipv4_mapped
        if mapped is not None:
            return mapped
    return address


def _is_port(text: str) -> bool:
    # RFC 7239 allows obfuscated ports ("_abc") as well as numbers.
    return text.isascii() and (text.isdigit() or (text[:1] == "_" and len(text) > 1))


def _forwarded_for(element: str) -> str:
    """The ``for=`` value of one ``Forwarded`` element, or ``""`` when it has none."""
    for pair in element.split(";"):
        name, eq, value = pair.partition("=")
        if eq and name.strip().lower() == "for":
            return value.strip() or '""'  # present but empty is invalid, not absent
    return '""'


class ClientIP:
    """A key function returning ``"ip:<address>"`` for the client of a request.

    Trust model: the client is the socket peer (``request.peer``).  The
    ``X-Forwarded-For`` and RFC 7239 ``Forwarded`` headers are read only when
    the peer is in ``trusted_proxies``, because anyone can send them: unlike
    werkzeug's ``ProxyFix``, which believes a fixed number of hops whatever
    connected, a client that reaches the app directly cannot choose its key.
    From a trusted peer, every line of the header is joined in order and the
    entries are walked right to left (the proxies append on the right),
    skipping trusted addresses; the first untrusted valid address is the
    client.  An invalid, obfuscated (``_hidden``) or ``unknown`` entry met on
    the way ends the walk at the peer.  If every entry is trusted, the
    leftmost one is the client.  When both headers are present they must name
    the same client, else the peer is used (pass ``header=`` to read only the
    one your proxy sets).

    ``trusted_proxies``: IPs or CIDRs (``"10.0.0.0/8"``), a single string or an
    iterable; ``"unix"`` trusts connections with no peer address (a proxy on a
    Unix socket).  ``ipv6_prefix`` (0-128, default 64): IPv6 clients are
    grouped by their ``/ipv6_prefix`` network, so one host cannot rotate
    through its own subnet; IPv4 clients are keyed by address.

    Ports, brackets and IPv6 zone ids are dropped and IPv4-mapped IPv6 becomes
    IPv4.  A request with no usable peer gets ``UNKNOWN_CLIENT``.  Never raises
    on request data.  Results per address are cached (4096 entries).
    """

    __slots__ = ("_classify", "_headers", "_nets", "_trust_unix", "ipv6_prefix", "trusted_proxies")

    def __init__(
        self,
        trusted_proxies: Union[str, Iterable[str]] = (),
        ipv6_prefix: int = 64,
        *,
        header: Optional[str] = None,
    ) -> None:
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int):
            raise ValueError(f"ipv6_prefix must be an integer 0-128, got {ipv6_prefix!r}")
        if not 0 <= ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be an integer 0-128, got {ipv6_prefix!r}")
        if header is None:
            self._headers: Tuple[str, ...] = _HEADERS
        elif isinstance(header, str) and header.lower() in _HEADERS:
            self._headers = (header.lower(),)
        else:
            raise ValueError(
                f"header must be None, 'x-forwarded-for' or 'forwarded', got {header!r}"
            )
        entries = [trusted_proxies] if isinstance(trusted_proxies, str) else list(trusted_proxies)
        nets: List[_Network] = []
        trust_unix = False
        for entry in entries:
            if entry == "unix":
                trust_unix = True
                continue
            try:
                nets.append(ipaddress.ip_network(str(entry).strip(), strict=False))
            except ValueError:
                raise ValueError(
                    f"trusted_proxies entries must be IPs, CIDRs or 'unix', got {entry!r}"
                ) from None
        self.trusted_proxies: Tuple[str, ...] = tuple(str(e) for e in entries)
        self.ipv6_prefix = ipv6_prefix
        self._nets = tuple(nets)
        self._trust_unix = trust_unix
        self._classify: Callable[[Optional[str]], Tuple[Optional[str], bool]] = functools.lru_cache(
            maxsize=4096
        )(self._classify_uncached)

    def __repr__(self) -> str:
        return f"ClientIP(trusted_proxies={self.trusted_proxies!r}, ipv6_prefix={self.ipv6_prefix})"

    def key_for(self, address: _Address) -> str:
        """``"ip:<address>"``, or ``"ip:<network>/<prefix>"`` for IPv6 below /128."""
        if address.version == 6 and self.ipv6_prefix < 128:
            shift = 128 - self.ipv6_prefix
            network = ipaddress.IPv6Network(((int(address) >> shift) << shift, self.ipv6_prefix))
            return "ip:" + str(network)
        return "ip:" + str(address)

    def _classify_uncached(self, text: Optional[str]) -> Tuple[Optional[str], bool]:
        # (key or None when invalid, is the address a trusted proxy)
        address = None if text is None else parse_address(text)
        if address is None:
            # A peer that is no IP address is a non-IP transport (a Unix socket).
            return None, self._trust_unix
        trusted = False
        for net in self._nets:
            if address.version == net.version and address in net:
                trusted = True
                break
        return self.key_for(address), trusted

    def __call__(self, request: RequestInfo) -> str:
        """The key of ``request``'s client (see the class docstring)."""
        peer = request.peer
        if peer is not None and len(peer) > _MAX_ENTRY:
            peer = None
        key, trusted = self._classify(peer)
        if key is None:
            key = UNKNOWN_CLIENT
            if trusted:  # a trusted Unix-socket proxy
                return self.from_headers(key, request.headers.get_all)
        if not trusted:
            return key
        return self.from_headers(key, request.headers.get_all)

    def from_headers(self, peer_key: str, get_all: Callable[[str], List[str]]) -> str:
        """The client key named by a trusted peer's forwarding headers (``peer_key`` if none)."""
        found: Optional[str] = None
        for name in self._headers:
            lines = get_all(name)
            if not lines:
                continue
            entries = ",".join(lines).split(",")
            if name == "forwarded":
                entries = [_forwarded_for(e) if e.strip() else "" for e in entries]
            key = self._walk(entries, peer_key)
            if found is not None and key != found:
                return peer_key
            found = key
        return peer_key if found is None else found

    def _walk(self, entries: List[str], peer_key: str) -> str:
        leftmost: Optional[str] = None
        classify = self._classify
        for entry in reversed(entries):
            entry = entry.strip()
            if not entry:  # empty list elements are allowed and ignored (RFC 9110 5.6.1)
                continue
            if len(entry) > _MAX_ENTRY:
                return peer_key
            key, trusted = classify(entry)
            if key is None:
                return peer_key
            if not trusted:
                return key
            leftmost = key
        return peer_key if leftmost is None else leftmost


@functools.lru_cache(maxsize=32)
def _client_ip(trusted_proxies: Tuple[str, ...], ipv6_prefix: int) -> ClientIP:
    return ClientIP(trusted_proxies, ipv6_prefix)


def client_ip(
    request: RequestInfo,
    *,
    trusted_proxies: Union[str, Iterable[str]] = (),
    ipv6_prefix: int = 64,
) -> str:
    """The default key: ``"ip:<client address>"`` (see ``ClientIP`` for the trust model).

    With no ``trusted_proxies`` this is the socket peer and forwarding headers
    are ignored.  A request without a usable peer gets ``UNKNOWN_CLIENT``.
    Adapters build one ``ClientIP`` up front; this function is for key
    functions that want the client IP as part of a larger key.
    """
    proxies = (trusted_proxies,) if isinstance(trusted_proxies, str) else tuple(trusted_proxies)
    return _client_ip(proxies, ipv6_prefix)(request)


def header_key(name: str, *, prefix: Optional[str] = None) -> KeyFunc:
    """A key function for a header such as ``X-API-Key``: ``"<name>:<value>"``.

    ``name`` is matched case-insensitively; the key is ``prefix + value`` with
    ``prefix`` defaulting to the lower-cased name and a colon, so a header
    value can never collide with an ``"ip:..."`` key.  A missing or empty
    header returns ``None`` and the adapter falls back to the client IP.
    Clients choose header values: key on a header only when it is checked
    (an API key that the app authenticates), or a client can rotate values to
    get fresh buckets.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"header name must be a non-empty str, got {name!r}")
    lname = name.lower()
    key_prefix = lname + ":" if prefix is None else prefix

    def key_func(request: RequestInfo) -> Optional[str]:
        value = request.headers.get(lname)
        if not value:
            return None
        return key_prefix + value

    key_func.__name__ = f"header_key_{lname.replace('-', '_')}"
    key_func.__qualname__ = key_func.__name__
    return key_func
