"""What every store URL shares: ``StoreURL`` (the syntax and query values, each
backend deciding what they mean), ``redact_url`` and the fail-fast defaults.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, NoReturn, Optional, Tuple
from urllib.parse import unquote

#: Seconds a check waits for the server to answer (``socket_timeout``).
DEFAULT_SOCKET_TIMEOUT = 0.25
#: Seconds a check waits for a new connection (``socket_connect_timeout``).
DEFAULT_CONNECT_TIMEOUT = 0.25

#: Query parameters of a store with a fallback (Redis, SQLite).
FALLBACK_PARAMS = ("fallback", "probe_after", "max_probe_after")
#: A DenyCache around a shared store (``deny_cache=N`` entries; see deny_cache_options).
DENY_CACHE_PARAMS = ("deny_cache", "deny_cache_max_stale")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def is_number(text: str) -> bool:
    """True for one or more ASCII digits: ``str.isdigit`` is also true of ``"²"``, which
    ``int()`` refuses, and of other scripts' digits, which no URL parser takes."""
    return text.isascii() and text.isdigit()


def split_userinfo(url: str) -> Tuple[str, Optional[str], str]:
    """``(scheme + "://", userinfo or None, the rest)``, for parsing and redaction alike:
    the user information precedes the last ``@`` before the query, so a password
    with an unencoded ``@``, ``:`` or ``/`` stays whole."""
    scheme_end = url.find("://")
    head_start = 0 if scheme_end < 0 else scheme_end + 3
    head, rest = url[:head_start], url[head_start:]
    if rest.startswith("/"):
        return head, None, rest
    query = rest.find("?")
    before_query = rest if query < 0 else rest[:query]
    at = before_query.rfind("@")
    if at < 0 and query >= 0:
        # "user:pa?ss@host": an unencoded "?" in a password.  A real query has
        # a "=" or "&" before any "@" it contains ("prefix=a@b").
        after = rest[query + 1 :]
        marker = after.find("@")
        if marker >= 0 and "=" not in after[:marker] and "&" not in after[:marker]:
            at = query + 1 + marker
    if at < 0:
        return head, None, rest
    return head, rest[:at], rest[at + 1 :]


def redact_url(url: str) -> str:
    """``url`` with its password and secret query values (names holding ``password``,
    ``token`` or ``secret``) replaced by ``***``; a non-string is its ``repr``, cut
    to 100 characters.  ``redact_url("redis://app:s3cret@cache:6379/0")`` is
    ``"redis://app:***@cache:6379/0"``."""
    if not isinstance(url, str):
        return f"{url!r:.100}"
    head, userinfo, rest = split_userinfo(url)
    if userinfo is None and _may_hide_a_password(rest):
        # "user:pa?ss=1@host" may be an unencoded password: hiding too much is fine.
        head += rest[: rest.index(":") + 1] + "***@"
        rest = rest[rest.rindex("@") + 1 :]
    elif userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if colon:
            userinfo = user + ":***"
        head += userinfo + "@"
    # Every "?name=" or "&name=" counts, not only those after the first "?": an
    # unencoded "?" in a password would otherwise hide the real query's start.
    for match in reversed(list(_QUERY_FIELD.finditer(rest))):
        if _secret(unquote(match.group(1))):
            end = rest.find("&", match.end())
            rest = rest[: match.end()] + "***" + (rest[end:] if end >= 0 else "")
    return head + rest


#: "?name=" or "&name=": a query field's name, up to its "=".
_QUERY_FIELD = re.compile(r"[?&]([^?&=]*)=")


def _secret(name: str) -> bool:
    """A query parameter whose value is hidden: its name has password, token or secret in it."""
    name = name.lower()
    return "password" in name or "token" in name or "secret" in name


def _may_hide_a_password(rest: str) -> bool:
    """An ``@`` after the ``?`` and a ``:`` before it: maybe ``user:pa?ss@host``."""
    query = rest.find("?")
    return query >= 0 and "@" in rest[query:] and ":" in rest[:query]


def scheme_of(url: str) -> str:
    """The scheme of ``url``, lowercased (``"redis+sentinel"``); ``""`` if it has no ``://``."""
    scheme_end = url.find("://")
    return url[:scheme_end].lower() if scheme_end > 0 else ""


class StoreURL:
    """A store URL taken apart: nothing decided yet but the syntax.  ``ValueError``
    (``"bad store URL ..."``, the URL redacted) for a ``#`` that is not
    percent-encoded, or a query field without a value or given twice."""

    def __init__(self, url: str, scheme: str) -> None:
        self.shown = redact_url(url)
        self.scheme = scheme  # as scheme_of(url) gives it
        _, userinfo, rest = split_userinfo(url)
        self.username: Optional[str] = None
        self.password: Optional[str] = None
        if userinfo is not None:
            user, colon, password = userinfo.partition(":")
            self.username = unquote(user) or None
            self.password = unquote(password) if colon else None
        if "#" in rest:
            self.fail("'#' must be percent-encoded (%23) in a store URL")
        rest, _, query = rest.partition("?")
        self.netloc, slash, path = rest.partition("/")
        self.path = slash + path
        self.query: Dict[str, str] = {}
        for field in query.split("&"):
            if not field:
                continue
            raw_name, eq, raw_value = field.partition("=")
            name = unquote(raw_name)
            if not eq:
                self.fail(f"query parameter {name!r} has no value (write {name}=...)")
            if name in self.query:
                self.fail(f"query parameter {name!r} is given twice")
            self.query[name] = unquote(raw_value)

    def fail(self, problem: str) -> NoReturn:
        raise ValueError(f"bad store URL {self.shown!r}: {problem}")

    def check_query(self, known: Tuple[str, ...]) -> None:
        for name in self.query:
            if name not in known:
                shown_query = self.shown.partition("?")[2]
                shown_names = {field.partition("=")[0] for field in shown_query.split("&")}
                if name not in shown_names:  # hidden by redact_url: maybe part of a password
                    self.fail(
                        f"unknown query parameter for {self.scheme}:// (not shown: it may be "
                        "part of a password; percent-encode '?', '@' and '&' in passwords); "
                        f"known: {', '.join(known)}"
                    )
                self.fail(
                    f"unknown query parameter {name!r} for {self.scheme}://; "
                    f"known: {', '.join(known)}"
                )

    def no_userinfo(self) -> None:
        if self.username is not None or self.password is not None:
            self.fail(f"{self.scheme}:// takes no user name or password")

    def hosts(self, default_port: int) -> List[Tuple[str, int]]:
        return [self.host(item, default_port) for item in self.netloc.split(",")]

    def host(self, item: str, default_port: int) -> Tuple[str, int]:
        if item.startswith("["):  # [IPv6]:port
            end = item.find("]")
            if end < 0:
                self.fail(f"unclosed '[' in the host {item!r}")
            host, port_text = item[1:end], item[end + 1 :]
            if port_text and not port_text.startswith(":"):
                self.fail(f"expected ':port' after the address in {item!r}")
            port_text = port_text[1:]
        else:
            host, _, port_text = item.partition(":")
        host = unquote(host)
        if not host:
            self.fail("a host name is missing" + (" (in a list of hosts)" if item else ""))
        if not port_text:
            return host, default_port
        if not is_number(port_text) or not 0 < int(port_text) < 65536:
            self.fail(f"the port of {host!r} must be a number from 1 to 65535, got {port_text!r}")
        return host, int(port_text)

    # Query values -----------------------------------------------------------

    def seconds(self, name: str, *, zero: bool = False) -> Optional[float]:
        text = self.query.get(name)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            bound = ">= 0" if zero else "> 0"
            self.fail(f"{name} must be a finite number of seconds {bound}, got {text!r}")
        return value

    def integer(self, name: str, minimum: int, *, none: bool = False) -> Any:
        text = self.query.get(name)
        if text is None:
            return None
        if none and text.lower() == "none":
            return None
        if not is_number(text) or int(text) < minimum:
            also = " or none" if none else ""
            self.fail(f"{name} must be an integer >= {minimum}{also}, got {text!r}")
        return int(text)

    def flag(self, name: str) -> Optional[bool]:
        text = self.query.get(name)
        if text is not None and text.lower() not in _TRUE + _FALSE:
            self.fail(f"{name} must be true or false (or 1/0, yes/no, on/off), got {text!r}")
        return None if text is None else text.lower() in _TRUE

    def flags(self, names: Tuple[str, ...], into: Dict[str, Any]) -> None:
        """Each of ``names`` the query gives, as a bool (``flag``), into ``into``."""
        for name in names:
            set_given(into, name, self.flag(name))

    def fallback_options(self, into: Dict[str, Any]) -> None:
        fallback = self.query.get("fallback")
        if fallback is not None:
            into["fallback"] = fallback_store(fallback, self)
        for name in ("probe_after", "max_probe_after"):
            set_given(into, name, self.seconds(name))


def set_given(into: Dict[str, Any], name: str, value: Any) -> None:
    """``into[name] = value``, unless ``value`` is ``None`` (not in the URL)."""
    if value is not None:
        into[name] = value


def store_options(
    options: Dict[str, Any], takes: Tuple[str, ...], store: str, into: Dict[str, Any]
) -> None:
    """``store_from_url``'s keyword ``options`` into ``into`` (a ``fallback`` string made a
    store); ``TypeError`` for one not in ``takes``, naming ``store`` ("an sqlite://")."""
    for name, value in options.items():
        if name not in takes:
            raise TypeError(
                f"store_from_url() got an unexpected keyword argument {name!r} for {store} "
                f"store; it takes: {', '.join(takes)}"
            )
        into[name] = fallback_store(value) if name == "fallback" else value


def fallback_store(value: Any, parsed: Optional[StoreURL] = None) -> Any:
    """The store a ``fallback`` query value or string option names (only ``memory``)."""
    if isinstance(value, str):
        if value.lower() != "memory":
            problem = f"fallback must be 'memory' (a MemoryStore in this process), got {value!r}"
            if parsed is not None:
                parsed.fail(problem)
            raise ValueError(problem)
        from limiter.backends.memory import MemoryStore

        return MemoryStore()
    return value


def deny_cache_options(parsed: StoreURL, options: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """``DenyCache``'s arguments from ``deny_cache`` (int >= 1) and
    ``deny_cache_max_stale`` (seconds > 0 or ``none``; needs ``deny_cache``), or
    ``None``.  Keyword options of those names override the query (taken out of ``options``)."""
    kwargs: Dict[str, Any] = {}
    if "deny_cache" in parsed.query:
        kwargs["max_keys"] = parsed.integer("deny_cache", 1)
    stale = parsed.query.get("deny_cache_max_stale")
    if stale is not None:
        none = stale.lower() == "none"
        kwargs["max_stale"] = None if none else parsed.seconds("deny_cache_max_stale")
    for name, argument in {"deny_cache": "max_keys", "deny_cache_max_stale": "max_stale"}.items():
        if name in options:
            kwargs[argument] = options.pop(name)
    if kwargs.get("max_keys") is None:
        if "max_stale" in kwargs and "deny_cache" not in parsed.query:
            parsed.fail("deny_cache_max_stale needs deny_cache=N (the entries to keep)")
        return None
    return kwargs
