"""The public API, pinned: every name a user imports, by module.

Growing the API is a deliberate change: a name added to a public module's
``__all__`` must be added here too (tests/project/test_public_api.py compares them),
and documented in docs/reference/ (tests/project/test_site.py).  Every other module
of ``src/limiter`` is internal and has no ``__all__``.
"""

from typing import Dict, Tuple

PUBLIC: Dict[str, Tuple[str, ...]] = {
    "limiter": (
        "DENIED_BODY",
        "AllowList",
        "AsyncPostgresStore",
        "AsyncRedisStore",
        "AsyncStore",
        "Charge",
        "ClientIP",
        "Clock",
        "DecisionEvent",
        "DenyCache",
        "Concurrency",
        "FixedWindow",
        "Limit",
        "Lockout",
        "ManualClock",
        "MemoryStore",
        "Outcome",
        "PoolFullError",
        "PostgresStore",
        "Quota",
        "RateLimitExceeded",
        "RateLimitResult",
        "RateLimiter",
        "RedisStore",
        "Refund",
        "RequestInfo",
        "Response",
        "Rule",
        "SQLiteStore",
        "SlidingWindow",
        "Store",
        "StoreError",
        "SystemClock",
        "client_ip",
        "default_on_limited",
        "fan_out",
        "header_key",
        "rate_limit_headers",
        "redact_url",
        "step",
        "step_all",
        "store_from_env",
        "store_from_url",
    ),
    "limiter.adapters.wsgi": ("RateLimitMiddleware",),
    "limiter.adapters.asgi": ("RateLimitMiddleware",),
    "limiter.adapters.httpserver": ("rate_limited",),
    "limiter.integrations.flask": ("RateLimit",),
    "limiter.integrations.fastapi": ("RateLimit",),
    "limiter.integrations.django": ("RateLimitMiddleware", "ratelimit"),
    "limiter.metrics.prometheus": ("PrometheusMetrics",),
    "limiter.metrics.otel": ("OTelMetrics",),
    "limiter.metrics.top": ("TopOffenders",),
    "limiter.clients.httpx": ("AsyncRateLimitTransport", "RateLimitTransport"),
    "limiter.clients.requests": ("RateLimitAdapter",),
    "limiter.testing": ("T0", "AdapterConformance", "StoreConformance", "limiter_clock"),
}

#: At most this many distinct names (issue 23: a user needs about 45).
MAX_NAMES = 60
