"""Web adapters: WSGI, ASGI and ``http.server`` middleware sharing one decision.

* ``limiter.adapters.wsgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.asgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.httpserver.rate_limited(limiter, ...)``

They take the same options and hand ``key_func``, ``exempt`` and ``cost`` the
same ``RequestInfo``, so those are written once for all three.  See
docs/adapters.md.
"""
