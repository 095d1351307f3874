"""Key functions: which bucket a request is charged to (``None``: the client IP).

Guide: docs/adapters.md#keys; trust model: docs/proxies.md.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable as _IterableABC
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from limiter.http.request import KeyFunc, RequestInfo

#: The key shared by requests with no usable peer address (e.g. a Unix socket).
UNKNOWN_CLIENT = "ip:unknown"

_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
# Longer than any address with port, brackets and zone id: rejected before parsing
# and caching.
_MAX_ENTRY = 100
_CACHE_SIZE = 4096
_HEADERS = ("x-forwarded-for", "forwarded")
# RFC 7239 node-port: 1 to 5 digits, or an obfuscated "_" name.
_PORT = re.compile(r"[0-9]{1,5}|_[A-Za-z0-9._-]+")
# RFC 9110 5.1 token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


def parse_address(text: str) -> Optional[_Address]:
    """The IP address in a peer string, an ``X-Forwarded-For`` entry or a ``Forwarded`` ``for=``.

    Drops a port (digits or RFC 7239 ``_name``), brackets, quotes and a zone id;
    IPv4-mapped IPv6 becomes IPv4. ``None`` for anything else (``unknown``,
    ``_hidden``, a host name, over 100 characters).
    """
    text = text.strip()
    if not text or len(text) > _MAX_ENTRY:
        return None
    if text[0] == '"':
        if text[-1] != '"':
            return None
        text = text[1:-1]
    if text[:1] == "[":
        end = text.find("]")  # -1 without "]": then rest is all of text, rejected below
        rest = text[end + 1 :]
        if rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:])):
            return None
        text = text[1:end]
    elif text.count(":") == 1:
        text, _, port = text.partition(":")
        if not _PORT.fullmatch(port):
            return None
    if ":" in text:  # IPv6: drop a zone id
        text = text.partition("%")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_for(element: str) -> Optional[str]:
    """The ``for=`` value of one ``Forwarded`` element; ``None`` (invalid) if absent or empty."""
    for pair in element.split(";"):
        name, eq, value = pair.partition("=")
        if eq and name.strip().lower() == "for":
            return value.strip() or None
    return None


def _entries(given: Union[str, Iterable[str]], option: str) -> Tuple[str, ...]:
    """``given`` (one str or an iterable of them) as a tuple; ``TypeError`` naming ``option``."""
    if isinstance(given, str):
        return (given,)
    if isinstance(given, (bytes, bytearray)) or not isinstance(given, _IterableABC):
        raise TypeError(f"{option} must be a str or an iterable of str, got {given!r}")
    entries = tuple(given)
    for entry in entries:
        if not isinstance(entry, str):
            raise TypeError(f"{option} entries must be str, got {entry!r}")
    return entries


def _network(entry: str, option: str = "trusted_proxies") -> _Network:
    """One ``option`` entry as a network; IPv4-mapped IPv6 becomes IPv4."""
    text = entry.strip()
    try:
        network = ipaddress.ip_network(text)
    except ValueError:
        try:
            interface = ipaddress.ip_interface(text)
        except ValueError:
            kinds = "IPs, CIDRs or 'unix'" if option == "trusted_proxies" else "IPs or CIDRs"
            raise ValueError(f"{option} entries must be {kinds}, got {entry!r}") from None
        # "10.0.0.1/8": a typo for one host or for the network?  Trusting the
        # wrong one is a hole either way, so ask.
        raise ValueError(
            f"{option} entries must be IPs or CIDRs without host bits, got {entry!r}: "
            f"write {str(interface.network)!r} for the network or "
            f"{str(interface.ip)!r} for one host"
        ) from None
    if isinstance(network, ipaddress.IPv6Network):
        mapped = network.network_address.ipv4_mapped
        if mapped is not None:  # peers "::ffff:10.0.0.5" are compared as 10.0.0.5
            return ipaddress.IPv4Network((mapped, network.prefixlen - 96))
    return network


class ClientIP:
    """A key function returning ``"ip:<address>"`` for the client of a request.

    The client is the socket peer; ``header`` (``"x-forwarded-for"`` or
    ``"forwarded"``) is read only from a peer in ``trusted_proxies`` (IPs, CIDRs or
    ``"unix"``), right to left.  IPv6 clients are grouped by ``/ipv6_prefix``
    (0-128); no usable peer gives ``UNKNOWN_CLIENT``.  Never raises on request
    data; ``TypeError``/``ValueError`` for a bad argument.  docs/proxies.md#the-rule.
    ``peer_keys`` (read-only) caches recent untrusted peers' keys.
    """

    __slots__ = (
        "_classify",
        "_nets",
        "_trust_unix",
        "header",
        "ipv6_prefix",
        "peer_keys",
        "trusted_proxies",
    )

    def __init__(
        self,
        trusted_proxies: Union[str, Iterable[str]] = (),
        ipv6_prefix: int = 64,
        *,
        header: Optional[str] = None,
    ) -> None:
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int):
            raise TypeError(f"ipv6_prefix must be an int from 0 to 128, got {ipv6_prefix!r}")
        if not 0 <= ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be an int from 0 to 128, got {ipv6_prefix!r}")
        if header is not None and (not isinstance(header, str) or header.lower() not in _HEADERS):
            error = ValueError if isinstance(header, str) else TypeError
            raise error(f"header must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        self.trusted_proxies = _entries(trusted_proxies, "trusted_proxies")
        self._nets = tuple(_network(entry) for entry in self.trusted_proxies if entry != "unix")
        self._trust_unix = "unix" in self.trusted_proxies
        if header is None and (self._nets or self._trust_unix):
            raise ValueError(
                "header must be set when trusted_proxies is: pass header='x-forwarded-for' or "
                "header='forwarded' (proxy_header= on the adapters), the one your proxy sets; "
                "a client behind the proxy can add the other header itself, got header=None"
            )
        self.ipv6_prefix = ipv6_prefix
        self.header: Optional[str] = None if header is None else header.lower()
        self._classify: Callable[[str], Tuple[Optional[str], bool]] = functools.lru_cache(
            maxsize=_CACHE_SIZE
        )(self._classify_uncached)
        # Cleared, never replaced, when full: Guard holds a reference.
        self.peer_keys: Dict[str, str] = {}

    def __repr__(self) -> str:
        return (
            f"ClientIP(trusted_proxies={self.trusted_proxies!r}, ipv6_prefix={self.ipv6_prefix}, "
            f"header={self.header!r})"
        )

    def key_for(self, address: _Address) -> str:
        """``"ip:<address>"``, or ``"ip:<network>/<prefix>"`` for IPv6 below /128."""
        if address.version == 6 and self.ipv6_prefix < 128:
            shift = 128 - self.ipv6_prefix
            network = ipaddress.IPv6Network(((int(address) >> shift) << shift, self.ipv6_prefix))
            return "ip:" + str(network)
        return "ip:" + str(address)

    def _classify_uncached(self, text: str) -> Tuple[Optional[str], bool]:
        # (key or None when invalid, whether the address is a trusted proxy)
        address = parse_address(text)
        if address is None:
            # A peer that is no IP address is a non-IP transport (a Unix socket).
            return None, self._trust_unix
        return self.key_for(address), any(address in net for net in self._nets)

    def __call__(self, request: RequestInfo) -> str:
        """The key of ``request``'s client."""
        peer = request.peer
        key = self.peer_keys.get(peer)  # type: ignore[arg-type]
        if key is not None:
            return key
        if peer is None or len(peer) > _MAX_ENTRY:  # never cached
            key, trusted = UNKNOWN_CLIENT, self._trust_unix
        else:
            found, trusted = self._classify(peer)
            key = found or UNKNOWN_CLIENT
            if not trusted and type(peer) is str:
                peer_keys = self.peer_keys
                if len(peer_keys) >= _CACHE_SIZE:
                    peer_keys.clear()  # rare: a flood of new peers pays it once per 4096
                peer_keys[peer] = key
        if not trusted:
            return key
        return self.from_headers(key, request.headers.get_all)

    def from_headers(self, peer_key: str, get_all: Callable[[str], List[str]]) -> str:
        """The client key named by a trusted peer's ``header``, else ``peer_key``
        (``get_all(name)``: every line of a header, ``[]`` when absent).
        """
        if self.header is None:
            return peer_key
        lines = ",".join(get_all(self.header)).split(",")
        entries: Sequence[Optional[str]] = lines
        if self.header == "forwarded":
            entries = [_forwarded_for(e) if e.strip() else "" for e in lines]
        leftmost: Optional[str] = None
        for entry in reversed(entries):
            if entry is None:  # a Forwarded element without a for= address
                return peer_key
            entry = entry.strip()
            if not entry:  # empty list elements are allowed and ignored (RFC 9110 5.6.1)
                continue
            if len(entry) > _MAX_ENTRY:
                return peer_key
            key, trusted = self._classify(entry)
            if key is None:
                return peer_key
            if not trusted:
                return key
            leftmost = key
        return peer_key if leftmost is None else leftmost


class AllowList:
    """Clients never limited nor charged: ``AllowList(["10.0.0.0/8"], client_ip)``.

    ``entries``: IPs and CIDRs (a string or an iterable), compared with the full
    client address found by ``client_ip``'s trust model; no usable address is never
    listed.  False when empty.  ``TypeError``/``ValueError`` for bad entries.
    """

    __slots__ = ("_client", "_contains", "entries")

    def __init__(self, entries: Union[str, Iterable[str]], client_ip: ClientIP) -> None:
        if not isinstance(client_ip, ClientIP):
            raise TypeError(f"client_ip must be a limiter.http.keys.ClientIP, got {client_ip!r}")
        self.entries = _entries(entries, "allow_list")
        nets = tuple(_network(entry, "allow_list") for entry in self.entries)
        # The same walk, without grouping IPv6 clients into networks.
        self._client = ClientIP(client_ip.trusted_proxies, 128, header=client_ip.header)

        def contains(key: str) -> bool:
            address = parse_address(key[3:])  # "ip:<address>" or UNKNOWN_CLIENT
            return address is not None and any(address in net for net in nets)

        self._contains: Callable[[str], bool] = functools.lru_cache(maxsize=_CACHE_SIZE)(contains)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __repr__(self) -> str:
        return f"AllowList({list(self.entries)!r})"

    def __call__(self, request: RequestInfo) -> bool:
        """True when ``request``'s client address is on the list."""
        client = self._client
        key = client(request)
        peer = request.peer
        if client.header is not None and peer is not None and len(peer) <= _MAX_ENTRY:
            peer_key, trusted = client._classify(peer)
            if trusted and key == peer_key:
                # The walk fell back to the proxy: a listed proxy must not list
                # everyone behind it.
                return False
        return self._contains(key)


@functools.lru_cache(maxsize=32, typed=True)
def _client_ip(
    trusted_proxies: Tuple[str, ...], ipv6_prefix: int, header: Optional[str]
) -> ClientIP:
    return ClientIP(trusted_proxies, ipv6_prefix, header=header)


def client_ip(
    request: RequestInfo,
    *,
    trusted_proxies: Union[str, Iterable[str]] = (),
    ipv6_prefix: int = 64,
    header: Optional[str] = None,
) -> str:
    """The default key: ``"ip:<client address>"``, found as by ``ClientIP`` (the last
    32 option sets cached; its errors for a bad option).
    """
    proxies = _entries(trusted_proxies, "trusted_proxies")
    try:
        key_func = _client_ip(proxies, ipv6_prefix, header)
    except TypeError:  # perhaps unhashable: ClientIP names the option
        ClientIP(ipv6_prefix=ipv6_prefix, header=header)
        raise
    return key_func(request)


def header_key(name: str, *, prefix: Optional[str] = None) -> KeyFunc:
    """A key function for a header such as ``X-API-Key``: ``prefix + value``.

    ``name`` is case-insensitive; ``prefix`` defaults to the lower-cased name and a
    colon; missing, empty or sent more than once gives ``None`` (the client IP: servers
    differ on which line the app reads, so a second line must not pick a new bucket).
    ``TypeError``/``ValueError`` for a bad name or prefix.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a header name (str), got {name!r}")
    if not _TOKEN.match(name):
        raise ValueError(f"name must be a header name such as 'X-API-Key', got {name!r}")
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str or None, got {prefix!r}")
    lname = name.lower()
    key_prefix = lname + ":" if prefix is None else prefix

    def key_func(request: RequestInfo) -> Optional[str]:
        lines = request.headers.get_all(lname)
        if len(lines) != 1 or not lines[0]:
            return None
        return key_prefix + lines[0]

    key_func.__name__ = f"header_key_{lname.replace('-', '_')}"
    key_func.__qualname__ = key_func.__name__
    return key_func
