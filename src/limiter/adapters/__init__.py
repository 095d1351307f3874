"""Web adapters: WSGI, ASGI and ``http.server`` middleware sharing one decision.

* ``limiter.adapters.wsgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.asgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.httpserver.rate_limited(limiter, ...)``

They take the same options and hand ``key_func``, ``exempt`` and ``cost`` the
same ``RequestInfo``, so those are written once for all three.  See
docs/adapters.md.
"""

from limiter.http.guard import Guard
from limiter.http.request import Headers, HeaderView, RequestInfo
from limiter.http.responses import DENIED_BODY, UNAVAILABLE_BODY, Response, default_on_limited

__all__ = [
    "DENIED_BODY",
    "UNAVAILABLE_BODY",
    "Guard",
    "HeaderView",
    "Headers",
    "RequestInfo",
    "Response",
    "default_on_limited",
]
