"""Flask integration: ``RateLimit`` with a ``default`` limit, ``limit`` and ``exempt``.

>>> from flask import Flask
>>> from limiter.integrations.flask import RateLimit
>>> app = Flask("demo")
>>> rl = RateLimit(app, default="100/minute")
>>> @app.post("/login")
... @rl.limit("5/minute")
... def login():
...     return "ok"

A ``before_request`` hook decides; an ``after_request`` hook adds the headers
(error responses included). Guide: docs/flask.md.
"""

from __future__ import annotations

import enum
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import flask
from flask.views import MethodView

from limiter.adapters.wsgi import request_info
from limiter.clock import Clock
from limiter.http.guard import Guard
from limiter.http.options import IntegrationOptions, Options
from limiter.http.request import Cost, KeyFunc
from limiter.http.responses import Response
from limiter.http.rules import DeductWhen, is_async_callable
from limiter.integrations.common import (
    NOT_LIMITED,
    F,
    Integration,
    RateSpec,
    ScopedLimit,
    check_algorithm,
    check_rate,
    check_store,
    reworded,
    store_shown,
)
from limiter.ratelimiter import RateLimiter
from limiter.store import is_async_only
from limiter.waiting import refuse_max_wait_with_lockout

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimit"]

#: Key of the per-app state in ``app.extensions`` (flask-limiter owns ``"limiter"``).
EXTENSION = "tokenlimiter"

#: The ``app.config`` keys ``init_app`` reads; any other ``RATELIMIT_*`` key is
#: an error, so a flask-limiter key is not silently ignored.
CONFIG_KEYS = (
    "RATELIMIT_DEFAULT",
    "RATELIMIT_STORAGE_URL",
    "RATELIMIT_ENABLED",
    "RATELIMIT_HEADERS",
    "RATELIMIT_ALGORITHM",
)
#: flask-limiter's config keys that have another name here.
RENAMED_KEYS = {
    "RATELIMIT_STRATEGY": "RATELIMIT_ALGORITHM",
    "RATELIMIT_STORAGE_URI": "RATELIMIT_STORAGE_URL",
}

_LIMITS = "__limiter_limits__"
_EXEMPT = "__limiter_exempt__"
# Marks limit(f)'s decorator: served as a view, it means @rl.limit was used bare.
_BARE = "__limiter_bare__"
# The Decision lives in the environ, not ``g``: ``g`` may outlive the request
# when a test keeps an app context pushed.
_DECISION = "limiter.flask.decision"
#: A decision whose slots a response's close gives back, until the request's teardown.
_CARRIED = "limiter.flask.carried"

_STYLES = ("x", "draft", "both")
_NO_GUARDS: List[Guard] = []


class _Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset.UNSET


def _refuse_async(owner: str, **funcs: Any) -> None:
    for option, func in funcs.items():
        if func is not None and not isinstance(func, RateLimiter) and is_async_callable(func):
            raise TypeError(
                f"{owner}: Flask cannot await; {option} must be a plain function, got {func!r}"
            )


def _sync_store(store: object, where: str) -> Any:
    """``store`` resolved (``resolve_store``), refused if async only."""
    from limiter.urls import resolve_store

    resolved = resolve_store(store)
    if is_async_only(resolved):
        raise ValueError(f"Flask needs a synchronous store; {where} is {resolved!r}, async only")
    return resolved


class _AppState:
    """One app's integration and its per-endpoint guard cache."""

    __slots__ = ("app", "default_guards", "integration", "views")

    def __init__(self, app: flask.Flask, integration: Integration) -> None:
        self.app = app
        self.integration = integration
        default = integration.default
        self.default_guards: List[Guard] = [] if default is None else [default]
        # endpoint -> method -> guards. Bounded: routing yields only allowed methods.
        self.views: Dict[str, Dict[str, List[Guard]]] = {}

    def guards_for(self, endpoint: str, method: str) -> List[Guard]:
        view = self.app.view_functions.get(endpoint)
        bare = getattr(view, _BARE, None)
        if bare is not None:
            raise TypeError(
                f"the view {getattr(bare, '__qualname__', bare)!r} is under a bare @rl.limit: "
                'the rate comes first, as in @rl.limit("5/minute")'
            )
        limits: Iterable[ScopedLimit] = getattr(view, _LIMITS, ())
        exempt = bool(getattr(view, _EXEMPT, False))
        view_class = getattr(view, "view_class", None)
        if isinstance(view_class, type):
            scope = f"{view_class.__module__}.{view_class.__qualname__}"
        else:
            # The endpoint, not the qualname: unique in the app and stable across
            # processes, so views made by one factory do not share buckets.
            scope = f"{getattr(view, '__module__', None) or '?'}:{endpoint}"
        routes = [limit.route(scope) for limit in limits]
        if isinstance(view_class, type) and issubclass(view_class, MethodView):
            handler = getattr(view_class, method.lower(), None)
            if handler is None and method == "HEAD":  # as MethodView dispatches it
                handler = getattr(view_class, "get", None)
            if handler is not None:
                # Per serving class: an inherited limited ``get`` gets its own
                # buckets; ``head = get`` shares.
                scope = f"{scope}.{getattr(handler, '__name__', method.lower())}"
                routes.extend(limit.route(scope) for limit in getattr(handler, _LIMITS, ()))
                exempt = exempt or bool(getattr(handler, _EXEMPT, False))
        if routes:
            guards = self.integration.guards(routes, method) or _NO_GUARDS
            for guard in guards:
                guard.require_sync("Flask")
        else:
            guards = _NO_GUARDS if exempt else self.default_guards
        self.views.setdefault(endpoint, {})[method] = guards
        return guards


class RateLimit:
    """Rate limits for a Flask app: ``rl = RateLimit(app, default="100/minute")``.

    ``default`` (a rate string, ``RateLimiter`` or function of the
    ``RequestInfo``; ``None``: none) covers every view without a ``limit`` that
    is not ``exempt``, and unmatched requests.  ``store``: a store or URL
    (``None``: ``LIMITER_STORAGE_URL``, else a ``MemoryStore`` per app).
    ``algorithm``: what rate strings become.  Arguments win over ``app.config``
    (``RATELIMIT_*``).  ``check_store``: ``init_app`` raises ``StoreError`` if a
    pingable store does not answer.  Leave ``app`` out for a factory and call
    ``init_app``.  ``TypeError``/``ValueError`` for a bad argument, here.
    Options: docs/adapters.md#options; config: docs/flask.md#configuration.
    """

    def __init__(
        self,
        app: Optional[flask.Flask] = None,
        *,
        default: Union[RateSpec, _Unset, None] = _UNSET,
        store: Any = _UNSET,
        key_func: Optional[KeyFunc] = None,
        trusted_proxies: Union[str, Iterable[str]] = (),
        header_style: Union[str, _Unset, None] = _UNSET,
        on_error: str = "allow",
        clock: Optional[Clock] = None,
        check_store: bool = True,
        algorithm: Optional[str] = None,
        **options: Unpack[IntegrationOptions],
    ) -> None:
        self._algorithm = check_algorithm(algorithm)
        if not isinstance(check_store, bool):
            raise TypeError(f"check_store must be True or False, got {check_store!r}")
        self._check_store = check_store
        given: Dict[str, Any] = dict(options)
        given.update(key_func=key_func, trusted_proxies=trusted_proxies, on_error=on_error)
        if header_style is not _UNSET:
            given["header_style"] = header_style
        # Every option checked now, whichever app comes later (against a default limiter too).
        known = default if isinstance(default, RateLimiter) else None
        Options(given, owner="RateLimit", sync="Flask", limiter=known)
        self._options = given
        self._default: Union[RateSpec, _Unset, None] = default
        if default is not _UNSET and default is not None:
            self._default = check_rate(default)  # (a RateLimiter keeps its own algorithm)
            _refuse_async("RateLimit", default=default)
            if isinstance(default, RateLimiter):
                _sync_store(default.store, "the default limiter's store")
        self._store: Any = store
        self._store_given: Any = store
        if store is not _UNSET and store is not None:  # one store for every app of this RateLimit
            self._store = _sync_store(store, "store")
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must be a limiter.Clock or None, got {clock!r}")
        self._clock = clock
        #: The apps ``init_app`` set up (weakly: an app may go away).
        self._apps: weakref.WeakSet[flask.Flask] = weakref.WeakSet()
        self._watching = False
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Set up ``app``: read its ``RATELIMIT_*`` config, add the hooks.  Each app gets its
        own state and store (unless ``store`` was given).  ``TypeError``/``ValueError``
        naming a bad config key; ``ValueError`` the second time."""
        if not isinstance(app, flask.Flask):
            raise TypeError(f"app must be a flask.Flask, got {app!r}")
        if EXTENSION in app.extensions:
            raise ValueError(f"{app!r} is already rate-limited (app.extensions[{EXTENSION!r}])")
        config = app.config
        unknown = sorted(k for k in config if k.startswith("RATELIMIT_") and k not in CONFIG_KEYS)
        if unknown:
            renamed = RENAMED_KEYS.get(unknown[0])
            hint = f"flask-limiter's {unknown[0]} is {renamed} here; " if renamed else ""
            # The value is not shown: it may be a URL with a password.
            raise ValueError(
                f"unknown config key {unknown[0]} ({hint}RateLimit reads {', '.join(CONFIG_KEYS)})"
            )
        algorithm = self._algorithm or _config_algorithm(config)
        options: Dict[str, Any] = dict(self._options)
        default = self._default
        if default is _UNSET:
            default = _config_default(config)
        store = _config_store(config) if self._store is _UNSET else self._store
        given = config.get("RATELIMIT_STORAGE_URL") if self._store is _UNSET else self._store_given
        if store is None:  # LIMITER_STORAGE_URL, else a MemoryStore
            store = _sync_store(None, "the store of LIMITER_STORAGE_URL")
        if "header_style" not in options and "RATELIMIT_HEADERS" in config:
            options["header_style"] = _config_headers(config["RATELIMIT_HEADERS"])
        if "enabled" not in options and "RATELIMIT_ENABLED" in config:
            enabled = config["RATELIMIT_ENABLED"]
            if not isinstance(enabled, bool):
                raise TypeError(f"RATELIMIT_ENABLED must be True or False, got {enabled!r}")
            options["enabled"] = enabled
        integration = Integration(
            "RateLimit",
            default=default,
            store=store,
            clock=self._clock,
            algorithm=algorithm,
            **options,
        )
        if integration.default is not None:
            integration.default.require_sync("Flask")
        if self._check_store:
            check_store("RateLimit.init_app", store, store_shown(given, store))
        state = _AppState(app, integration)
        app.extensions[EXTENSION] = state
        self._apps.add(app)
        if integration.enabled:  # disabled: no hooks at all, so no cost either
            app.before_request(_before_hook(state))
            app.after_request(_add_headers)
            app.teardown_request(_release_unsent)
            flask.request_finished.connect(_release_on_close, app)
            if not getattr(app.wsgi_app, "_limiter_releases", False):
                app.wsgi_app = _releasing(app.wsgi_app)  # type: ignore[method-assign]

    def limit(
        self,
        rate: RateSpec,
        *,
        algorithm: Optional[str] = None,
        name: Optional[str] = None,
        key_func: Optional[KeyFunc] = None,
        cost: Cost = 1,
        methods: Optional[Iterable[str]] = None,
        deduct_when: Optional[DeductWhen] = None,
    ) -> Callable[[F], F]:
        """A decorator limiting one view to ``rate`` (under ``@app.route``), its arguments
        checked now (``TypeError``/``ValueError``).  Each view has its own buckets unless
        limits share a ``name``; ``methods``: only those are limited; stacked limits all
        apply, outermost first.  Details: docs/flask.md#limit-exempt-and-default."""
        # "?" stands in for an unnamed limit's scope, known only when served.
        limit = ScopedLimit(self, rate, name, key_func, cost, methods, deduct_when, algorithm, "?")
        if not self._watching:
            # So a limited view served by an app never set up fails loudly.
            flask.request_started.connect(self._check_set_up)
            self._watching = True
        _refuse_async("limit", rate=rate, key_func=key_func, cost=cost)
        if isinstance(rate, RateLimiter):
            _sync_store(rate.store, f"the store of {rate!r}")
            wait = self._options.get("max_wait")
            if wait is not None:  # known now: refused now
                refuse_max_wait_with_lockout(rate, f"RateLimit(max_wait={wait!r})")

        def decorate(view: F) -> F:
            if not callable(view):
                raise TypeError(f"limit(...) decorates a view function, got {view!r}")
            # Prepended: decorators apply bottom-up; this keeps the written order.
            setattr(view, _LIMITS, (limit, *getattr(view, _LIMITS, ())))
            return view

        if callable(rate) and not isinstance(rate, (type, RateLimiter)):
            setattr(decorate, _BARE, rate)
        return decorate

    def _check_set_up(self, sender: flask.Flask, **extra: Any) -> None:
        # Without init_app(app) a RateLimit would otherwise limit nothing.
        if sender in self._apps:
            flask.request_started.disconnect(self._check_set_up)  # no cost from now on
            self._watching = False
            return
        if EXTENSION in sender.extensions:
            return  # another RateLimit serves this app and applies the limits
        endpoint = flask.request.endpoint
        view = sender.view_functions.get(endpoint) if endpoint is not None else None
        limits = list(getattr(view, _LIMITS, ()))
        view_class = getattr(view, "view_class", None)
        if isinstance(view_class, type):
            for attr in ("get", "post", "put", "patch", "delete", "head", "options"):
                limits.extend(getattr(getattr(view_class, attr, None), _LIMITS, ()))
        if any(limit.owner is self for limit in limits):
            raise RuntimeError(
                f"the view {endpoint!r} has rl.limit(...), but this RateLimit was never set up "
                f"on {sender!r}: call rl.init_app(app) (or RateLimit(app)) when you build the "
                "app; without it nothing is limited"
            )

    def exempt(self, view: F) -> F:
        """Decorator: the default limit does not apply to ``view`` (its own ``limit``s do)."""
        if not callable(view):
            raise TypeError(f"exempt decorates a view function, got {view!r}")
        setattr(view, _EXEMPT, True)
        return view


def _config_default(config: flask.Config) -> Optional[RateSpec]:
    value = config.get("RATELIMIT_DEFAULT")
    if value is None:
        return None
    with reworded(f"RATELIMIT_DEFAULT={value!r:.100}: "):
        return check_rate(value)


def _config_algorithm(config: flask.Config) -> Optional[str]:
    with reworded("", " (app.config)"):
        return check_algorithm(config.get("RATELIMIT_ALGORITHM"), "RATELIMIT_ALGORITHM")


def _config_store(config: flask.Config) -> Any:
    url = config.get("RATELIMIT_STORAGE_URL")
    if url is None:
        return None
    if not isinstance(url, str):
        raise TypeError(f"RATELIMIT_STORAGE_URL must be a URL string, got {url!r}")
    from limiter.urls import resolve_store

    with reworded("RATELIMIT_STORAGE_URL: "):  # its message redacts the URL's password
        store = resolve_store(url)
    return _sync_store(store, "RATELIMIT_STORAGE_URL's store")


def _config_headers(value: object) -> Optional[str]:
    if value is True or value is False or value is None:
        return "x" if value else None
    if isinstance(value, str) and value in _STYLES:
        return value
    error = ValueError if isinstance(value, str) else TypeError
    raise error(f"RATELIMIT_HEADERS must be True, False, 'x', 'draft' or 'both', got {value!r}")


def _before_hook(state: _AppState) -> Callable[[], Optional[flask.Response]]:
    decide = state.integration.decide
    default_guards = state.default_guards
    views = state.views
    guards_for = state.guards_for
    response_class = state.app.response_class

    def limit_request() -> Optional[flask.Response]:
        # One proxy lookup: each attribute read through flask.request costs one.
        request = flask.request._get_current_object()  # type: ignore[attr-defined]
        environ = request.environ
        endpoint = request.endpoint
        if endpoint is None:  # 404, 405: the default applies
            guards = default_guards
        else:
            method = request.method
            by_method = views.get(endpoint)
            found = None if by_method is None else by_method.get(method)
            guards = guards_for(endpoint, method) if found is None else found
        if not guards:
            return None
        decision = decide(guards, request_info(environ))
        denied: Optional[Response] = decision.response
        if denied is not None:
            # werkzeug drops a HEAD's body; with no Decision in the environ the
            # after hook leaves these headers alone.
            return response_class(denied.body, denied.status, denied.headers)
        environ[_DECISION] = decision
        return None

    return limit_request


def _add_headers(response: flask.Response) -> flask.Response:
    """The after hook: settle the request's decision, add its headers to ``response``."""
    # Popped: a response that passes through twice gets its headers once.
    environ = flask.request.environ
    decision = environ.pop(_DECISION, None)
    if decision is not None:
        if decision.holds:  # for the teardown, should this response be dropped
            environ[_CARRIED] = decision
        headers = decision.headers(response.status_code)  # settles deduct_when
        if headers:
            add = response.headers.add  # cheaper than extend's generic argument handling
            for name, value in headers:
                add(name, value)
    return response


def _release_on_close(sender: flask.Flask, response: flask.Response, **extra: Any) -> None:
    """``request_finished``: hold the slots until the server closes ``response``, the one
    every after hook returned (a later hook may replace the one the limiter's saw)."""
    decision = flask.request.environ.get(_CARRIED)
    if decision is not None:
        # Held until its last chunk is sent (a streamed one too) or the client is gone.
        response.call_on_close(decision.release)


def _releasing(wsgi_app: Any) -> Any:
    """``wsgi_app`` giving back the request's slots when it raises (a teardown handler
    that raises stops Flask's others, the limiter's among them)."""

    def wsgi(environ: Dict[str, Any], start_response: Any) -> Any:
        try:
            return wsgi_app(environ, start_response)
        except BaseException:
            _release(environ, (_DECISION, _CARRIED))
            raise

    wsgi._limiter_releases = True  # type: ignore[attr-defined]
    return wsgi


def _release_unsent(error: Optional[BaseException]) -> None:
    """Teardown: give back the slots of a decision no response carries (the view raised
    and the error propagates; the after hook did not run), or whose response an
    error replaced (a later after hook or the session's saving raised)."""
    # Without an error the response's close gives the carried one back; left in
    # the environ so that _releasing does if a teardown run after this one raises.
    _release(flask.request.environ, (_DECISION,) if error is None else (_DECISION, _CARRIED))


def _release(environ: Dict[str, Any], names: Tuple[str, ...]) -> None:
    """Give back the slots of the decisions under ``names`` in ``environ``, removed."""
    for name in names:
        environ.pop(name, NOT_LIMITED).release()
