"""Django integration: ``RateLimitMiddleware`` and the ``ratelimit`` view decorator.

Both read one ``Integration`` built from ``settings.RATE_LIMIT`` (a dict, rebuilt when
it changes; see docs/django.md)::

    RATE_LIMIT = {"default": "100/minute", "exempt_paths": ["/health", "/static/*"]}
    MIDDLEWARE = [..., "limiter.integrations.django.RateLimitMiddleware", ...]

    @ratelimit("5/minute", methods=["POST"], deduct_when=lambda s: s in (401, 403))
    def login(request): ...
"""

from __future__ import annotations

import functools
import inspect
from types import FunctionType
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings  # type: ignore[import-untyped]
from django.core import checks  # type: ignore[import-untyped]
from django.core.exceptions import (  # type: ignore[import-untyped]
    BadRequest,
    ImproperlyConfigured,
    PermissionDenied,
    SuspiciousOperation,
)
from django.core.handlers.exception import response_for_exception  # type: ignore[import-untyped]
from django.http import Http404, HttpRequest, HttpResponse  # type: ignore[import-untyped]
from django.http.multipartparser import MultiPartParserError  # type: ignore[import-untyped]
from django.http.response import HttpResponseBase  # type: ignore[import-untyped]

from limiter.adapters.wsgi import EnvironHeaders
from limiter.http.guard import Guard
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.http.responses import HeaderList, Response
from limiter.http.rules import DeductWhen
from limiter.integrations._django_settings import current
from limiter.integrations.common import (
    NOT_LIMITED,
    Decision,
    F,
    Integration,
    RateSpec,
    RouteLimit,
    ScopedLimit,
    check_store,
)
from limiter.ratelimiter import RateLimiter
from limiter.store import is_async_only
from limiter.waiting import refuse_max_wait_with_lockout

__all__ = ["RateLimitMiddleware", "ratelimit"]

#: Set on every view ``ratelimit`` wraps; ``functools.wraps`` copies it outwards,
#: so the middleware sees it under other decorators.
_MARK = "_limiter_ratelimit"
_DECISION = "_limiter_decision"
#: Marks this module's refusals, so an outer ``ratelimit`` adds no headers to them.
_DENIED = "_limiter_denied"
#: Marks ``ratelimit(f)``'s decorator: as a URL pattern's view, ``@ratelimit`` was bare.
_BARE = "_limiter_bare"
_BARE_FIX = '@ratelimit needs a rate: write @ratelimit("5/minute")'


def django_request_info(request: HttpRequest) -> RequestInfo:
    """The ``RequestInfo`` of a Django request: ``request.path`` (script prefix
    included), ``REMOTE_ADDR`` as peer, the ``HttpRequest`` as native."""
    meta = request.META
    return RequestInfo(
        request.method or "GET",
        request.path,
        EnvironHeaders(meta),  # META has the WSGI environ layout, under ASGI too
        meta.get("REMOTE_ADDR") or None,
        request,
    )


def _http_response(response: Response, method: str) -> HttpResponse:
    """``response`` (the 429, a 503 or ``on_limited``'s) as a Django ``HttpResponse``."""
    status, headers, body = response
    result = HttpResponse(b"" if method == "HEAD" else body, status=status)
    # Drop HttpResponse's own Content-Type so headers match the other adapters', in order.
    del result.headers["Content-Type"]
    for name, value in headers:
        result.headers[name] = value
    setattr(result, _DENIED, True)
    return result


def _decide(guards: Sequence[Guard], request: HttpRequest) -> Decision:
    """``Integration.decide`` in sync code; async callables run through ``async_to_sync``
    (not refused: the same settings serve WSGI and ASGI)."""
    integration = current().integration
    if not integration.enabled or not guards:
        return NOT_LIMITED
    info = django_request_info(request)
    if any(guard.is_async for guard in guards):
        decision: Decision = async_to_sync(integration.adecide)(guards, info)
        return decision
    return integration.decide(guards, info)


async def _adecide(guards: Sequence[Guard], request: HttpRequest) -> Decision:
    integration = current().integration
    if not integration.enabled or not guards:
        return NOT_LIMITED
    return await integration.adecide(guards, django_request_info(request))


def _record(request: HttpRequest, decision: Decision) -> Optional[HttpResponseBase]:
    """The refusal, or ``None`` with ``decision`` kept on the request until the response."""
    if decision.response is not None:
        return _http_response(decision.response, request.method or "GET")
    if decision is not NOT_LIMITED:
        setattr(request, _DECISION, decision)
    return None


def _respond(request: HttpRequest, response: Any, decision: Decision, headers: HeaderList) -> Any:
    """``response`` with ``headers``, or the refusal ``decision`` holds instead of it."""
    if decision.response is not None:
        return _http_response(decision.response, request.method or "GET")
    if headers and not getattr(response, _DENIED, False):
        for name, value in headers:
            response.headers[name] = value
    if decision.holds:
        # Held until the server closes the response (its last chunk is sent): Django's
        # handlers and test client close every one.  An async-only store's slots go back
        # on the server's loop: Django's ASGI handler closes the response in a thread
        # (sync_to_async), where async_to_sync runs the coroutine on that loop.
        release = async_to_sync(decision.arelease) if decision.awaits else decision.release
        closers = getattr(response, "_resource_closers", None)
        if isinstance(closers, list):
            closers.append(release)
        else:  # not an HttpResponseBase: nothing says when it ends
            release()
    return response


def _refuse_async_only(integration: Integration) -> None:
    """Raise ``ImproperlyConfigured`` when the synchronous middleware would need to await."""
    default = integration.default
    limiters = [] if default is None else default.limiters()
    for store in (integration.store, *(limiter.store for limiter in limiters)):
        if is_async_only(store):
            raise ImproperlyConfigured(
                f"RateLimitMiddleware runs synchronously here (WSGI) and settings.RATE_LIMIT "
                f"gives an async-only {type(store).__name__}: give it a synchronous store "
                f"(a URL gives one)"
            )


def _has_own_limit(view_func: Callable[..., Any], method: str) -> bool:
    """Whether a ``ratelimit`` covers this view (and, for a class-based view, this method)."""
    if getattr(view_func, _MARK, False):
        return True
    view_class = getattr(view_func, "view_class", None)
    if view_class is None:
        return False
    if getattr(getattr(view_class, "dispatch", None), _MARK, False):
        return True
    handler = getattr(view_class, method.lower(), None)
    if handler is None and method == "HEAD":
        handler = getattr(view_class, "get", None)  # View.setup answers HEAD with get
    return bool(getattr(handler, _MARK, False))


def _unresolved(request: HttpRequest, response: Any) -> bool:
    """Whether ``response`` is the 404 of a path that resolved to no view (counted, so
    URL scanning costs tokens as in Flask and FastAPI)."""
    return getattr(response, "status_code", None) == 404 and request.resolver_match is None


def _default_guards(request: HttpRequest, view_func: Optional[Callable[..., Any]]) -> List[Guard]:
    """The default, unless there is none, it is off, the path is exempt or ``view_func``
    has its own ``ratelimit``."""
    config = current()
    default = config.default
    if default is None or not config.integration.enabled:
        return []
    if view_func is not None and _has_own_limit(view_func, request.method or "GET"):
        return []
    return [] if config.exempt_path(request.path) else [default]


class RateLimitMiddleware:
    """Apply ``settings.RATE_LIMIT["default"]`` to every view without a ``ratelimit``.

    Add it early in ``MIDDLEWARE``; sync and async capable.  When Django builds it:
    ``ImproperlyConfigured`` for bad settings, ``StoreError`` if a pingable store does
    not answer (unless ``check_store`` is ``False``).  Settings: docs/django.md#settings.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        config = current()  # a misconfiguration fails at start-up, not on the first request
        if not self.async_mode:
            _refuse_async_only(config.integration)
        if config.check_store:
            check_store("RateLimitMiddleware", config.integration.store, config.integration.shown)
        if self.async_mode:
            markcoroutinefunction(self)
            # Django adapts process_view to its mode; a coroutine one is awaited as is.
            self.process_view = self._aprocess_view  # type: ignore[method-assign]

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        try:
            response = self.get_response(request)
        except BaseException:  # no response (gevent's Timeout): process_view's slots go back
            request.__dict__.pop(_DECISION, NOT_LIMITED).release()
            raise
        decision: Optional[Decision] = request.__dict__.pop(_DECISION, None)
        if decision is None and _unresolved(request, response):
            decision = _decide(_default_guards(request, None), request)
        if decision is None:
            return response
        return _respond(request, response, decision, decision.headers(response.status_code))

    async def __acall__(self, request: HttpRequest) -> Any:
        try:
            response = await self.get_response(request)
        except BaseException:  # cancelled (a disconnect): process_view's slots go back
            await request.__dict__.pop(_DECISION, NOT_LIMITED).arelease()
            raise
        decision: Optional[Decision] = request.__dict__.pop(_DECISION, None)
        if decision is None and _unresolved(request, response):
            decision = await _adecide(_default_guards(request, None), request)
        if decision is None:
            return response
        return _respond(request, response, decision, await decision.aheaders(response.status_code))

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> Optional[HttpResponseBase]:
        """Check the default limit once the view is known (synchronous mode)."""
        return _record(request, _decide(_default_guards(request, view_func), request))

    async def _aprocess_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> Optional[HttpResponseBase]:
        return _record(request, await _adecide(_default_guards(request, view_func), request))


def _request_of(args: Tuple[Any, ...]) -> HttpRequest:
    # (request, ...) for a function or method_decorator; (self, request, ...) for a method.
    if args and isinstance(args[0], HttpRequest):
        return args[0]
    if len(args) > 1 and isinstance(args[1], HttpRequest):
        return args[1]
    raise TypeError(
        "ratelimit: the view was not called with a Django HttpRequest; decorate a view "
        "function, or a class-based view's method with method_decorator(ratelimit(...))"
    )


def _is_async_view(view: Callable[..., Any]) -> bool:
    if iscoroutinefunction(view):
        return True
    # method_decorator(..., name="dispatch") hands over a partial of the bound
    # dispatch; an async class-based view's dispatch returns a coroutine.
    func = getattr(view, "func", None)
    instance = getattr(func, "__self__", None)
    return getattr(func, "__name__", None) == "dispatch" and bool(
        getattr(type(instance), "view_is_async", False)
    )


#: What ``response_for_exception`` turns into a 4xx; any other exception is a 500.
_HTTP_ERRORS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


async def _finish(pending: Awaitable[Any], request: HttpRequest, decision: Decision) -> Any:
    """Await the view's ``pending`` response, then settle ``decision`` with its status."""
    try:
        response = await pending
    except Exception as exc:
        if not isinstance(exc, _HTTP_ERRORS):
            await decision.aheaders(500)
            await decision.arelease()
            raise
        # As Django's own async handler does: the error views may be synchronous.
        answer = sync_to_async(response_for_exception, thread_sensitive=False)
        response = await answer(request, exc)
    except BaseException:  # cancelled (Django's answer to a disconnect): no response
        await decision.arelease()
        raise
    return _respond(request, response, decision, await decision.aheaders(response.status_code))


#: Marks the calls ``ratelimit`` builds, for ``_unwrap``.
_CALL = "_limiter_call"


def _sync_call(route: RouteLimit) -> Callable[..., Any]:
    """``call(view, *args, **kwargs)``: ``view`` under ``route``, synchronously.  An HTTP
    error the view raises becomes Django's response for it, settled and with headers;
    any other exception settles as a 500 and propagates."""

    def call(view: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        request = _request_of(args)
        guards = current().integration.guards((route,), request.method or "GET")
        decision = _decide(guards, request)
        if decision.response is not None:
            return _http_response(decision.response, request.method or "GET")
        if decision is NOT_LIMITED:
            return view(*args, **kwargs)
        try:
            response = view(*args, **kwargs)
        except Exception as exc:
            if not isinstance(exc, _HTTP_ERRORS):
                decision.headers(500)
                decision.release()
                raise
            response = response_for_exception(request, exc)  # it reads sys.exc_info: here
        except BaseException:  # cut short (gevent's Timeout): no response, the slot goes back
            decision.release()
            raise
        if inspect.isawaitable(response):
            # An async view _is_async_view missed: finish when Django awaits it.
            return _finish(response, request, decision)
        return _respond(request, response, decision, decision.headers(response.status_code))

    return call


def _async_call(route: RouteLimit) -> Callable[..., Any]:
    """``_sync_call`` for an async view: the store and the view are awaited."""

    async def acall(view: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        request = _request_of(args)
        guards = current().integration.guards((route,), request.method or "GET")
        decision = await _adecide(guards, request)
        if decision.response is not None:
            return _http_response(decision.response, request.method or "GET")
        if decision is NOT_LIMITED:
            return await view(*args, **kwargs)
        return await _finish(view(*args, **kwargs), request, decision)

    return acall


def _unwrap(view: Callable[..., Any]) -> Callable[..., Any]:
    """The view under inner ``ratelimit``s' per-request ``partial(call, view)``."""
    while type(view) is functools.partial:
        call = view.func
        if type(call) is not FunctionType or not getattr(call, _CALL, False):
            break
        view = view.args[0]
    return view


def _method_key(view: Callable[..., Any]) -> Optional[Tuple[Any, type]]:
    """``(function, class)`` of a method under ``method_decorator`` (its per-request
    partial), else ``None``."""
    if type(view) is not functools.partial:
        return None
    bound = view.func
    function = getattr(bound, "__func__", None)
    owner = getattr(bound, "__self__", None)
    if function is None or owner is None or isinstance(owner, type):
        return None
    return (function, type(owner))


def _scope(view: Callable[..., Any]) -> str:
    """The scope of an unnamed limit on ``view``: ``"<module>.<qualname>"``; for a
    ``method_decorator`` method, the serving class's (else every view inheriting
    ``View.dispatch`` would share buckets)."""
    key = _method_key(view)
    if key is not None:
        function, cls = key
        return f"{cls.__module__}.{cls.__qualname__}.{getattr(function, '__name__', '?')}"
    qualname = getattr(view, "__qualname__", None) or getattr(view, "__name__", None)
    return f"{getattr(view, '__module__', None) or '?'}.{qualname or repr(view)}"


def ratelimit(
    rate: RateSpec,
    *,
    key_func: Optional[KeyFunc] = None,
    cost: Cost = 1,
    methods: Optional[Sequence[str]] = None,
    name: Optional[str] = None,
    deduct_when: Optional[DeductWhen] = None,
    algorithm: Optional[str] = None,
) -> Callable[[F], F]:
    """Limit one view: ``@ratelimit("5/minute")`` on a function (or ``async def``) view,
    ``method_decorator(ratelimit(...), name="dispatch")`` on a class-based view.

    Each view has its own buckets unless views share a ``name``; ``methods``:
    only those are limited.  Other options come from ``settings.RATE_LIMIT``;
    the middleware is optional.  ``TypeError``/``ValueError`` for a bad
    argument, here (and ``TypeError`` for a ``Lockout`` beside ``max_wait``).
    Details: docs/django.md#views.
    """
    limit = ScopedLimit(
        None, rate, name, key_func, cost, methods, deduct_when, algorithm, "ratelimit"
    )
    # settings.RATE_LIMIT's max_wait, read raw (checked when served).
    source = getattr(settings, "RATE_LIMIT", None) if settings.configured else None
    wait = source.get("max_wait") if isinstance(source, dict) else None
    if isinstance(rate, RateLimiter) and wait is not None:  # known now: refused now
        refuse_max_wait_with_lockout(rate, f"settings.RATE_LIMIT['max_wait'] = {wait!r}")
    # method_decorator builds a new partial per request: one call per (function, class).
    per_method: Dict[Tuple[Any, type], Callable[..., Any]] = {}

    def decorator(view: F) -> F:
        key = _method_key(_unwrap(view))
        if key is not None:  # the per-request path of method_decorator
            call = per_method.get(key)
            if call is None:
                call = per_method.setdefault(key, _prepare(limit, view)[0])
            return functools.partial(call, view)  # type: ignore[return-value]
        if isinstance(view, HttpRequest):
            raise TypeError(f"{_BARE_FIX}; the view was passed as the rate")
        if not callable(view):
            raise TypeError(f"ratelimit decorates a view function, got {view!r:.200}")
        return _wrapped(view, *_prepare(limit, view))

    if callable(rate) and not isinstance(rate, type) and not hasattr(rate, "limits"):
        setattr(decorator, _BARE, rate)
    return decorator


def _prepare(limit: ScopedLimit, view: Callable[..., Any]) -> Tuple[Callable[..., Any], bool]:
    """``(call, is_async)`` for ``view``: ``call(view, *args, **kwargs)`` limits it."""
    inner = _unwrap(view)
    route = limit.route(_scope(inner))  # (a name wins)
    is_async = _is_async_view(inner)
    store = getattr(route.rate, "store", None)
    if not is_async and store is not None and is_async_only(store):
        raise ValueError(
            f"ratelimit: the synchronous view {route.scope} cannot await "
            f"{type(store).__name__}, which is async only: decorate an async def view, "
            f"or give the limiter a synchronous store"
        )
    call = _async_call(route) if is_async else _sync_call(route)
    setattr(call, _CALL, True)
    return call, is_async


def _wrapped(view: F, call: Callable[..., Any], is_async: bool) -> F:
    """``view`` calling ``call(view, ...)``, marked for the middleware."""
    wrapper: Callable[..., Any]
    if is_async:

        @functools.wraps(view)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await call(view, *args, **kwargs)

        wrapper = async_wrapper
    else:

        @functools.wraps(view)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            return call(view, *args, **kwargs)

        wrapper = sync_wrapper
    setattr(wrapper, _MARK, True)
    return wrapper  # type: ignore[return-value]


def check_bare_ratelimit(app_configs: Any = None, **kwargs: Any) -> List[Any]:
    """Django system check: error ``limiter.E001`` per URL pattern whose view is a bare
    ``@ratelimit`` (no rate), which would fail every request."""
    from django.urls import get_resolver  # type: ignore[import-untyped]

    try:
        patterns = list(get_resolver().url_patterns)
    except Exception:  # no URLconf, or one that does not import: Django's own check says so
        return []
    errors: List[Any] = []
    stack = patterns
    while stack:
        pattern = stack.pop()
        nested = getattr(pattern, "url_patterns", None)
        if nested is not None:
            stack.extend(nested)
            continue
        rate = getattr(getattr(pattern, "callback", None), _BARE, None)
        if rate is not None:
            name = getattr(rate, "__qualname__", None) or repr(rate)
            errors.append(
                checks.Error(
                    f"the view {name} of URL pattern {str(pattern.pattern)!r} is "
                    f"@ratelimit without a rate",
                    hint=_BARE_FIX,
                    obj=rate,
                    id="limiter.E001",
                )
            )
    return errors


checks.register(check_bare_ratelimit, checks.Tags.urls)
