"""Web adapters: WSGI, ASGI and ``http.server`` middleware sharing one decision.

* ``limiter.adapters.wsgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.asgi.RateLimitMiddleware(app, limiter, ...)``
* ``limiter.adapters.httpserver.rate_limited(limiter, ...)``

Same options, same ``RequestInfo`` for every callable. Guide: docs/adapters.md.
"""
