"""``settings.RATE_LIMIT`` for the Django integration: checked, built on first use,
rebuilt when the setting changes (``override_settings``).  See docs/django.md."""

from __future__ import annotations

import threading
from typing import Any, Optional, Pattern, Tuple

from django.conf import settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.core.signals import setting_changed  # type: ignore[import-untyped]

from limiter.http.guard import Guard
from limiter.http.options import GuardOptions, did_you_mean
from limiter.http.rules import normal_path, path_pattern
from limiter.integrations.common import Integration, check_algorithm, check_rate, reworded

#: The keys of ``settings.RATE_LIMIT`` besides the ``GuardOptions``.
OWN_KEYS = ("default", "store", "clock", "exempt_paths", "check_store", "algorithm")
KEYS = frozenset((*OWN_KEYS, *GuardOptions.__annotations__))


class Config:
    """``settings.RATE_LIMIT``, checked and built: the integration, the default, exempt paths."""

    __slots__ = ("check_store", "default", "exempt", "integration")

    def __init__(self, source: object) -> None:
        if source is None:
            source = {}
        if isinstance(source, str):  # a store URL as the whole setting: never show its password
            from limiter.backends._url import redact_url

            raise ImproperlyConfigured(
                f"settings.RATE_LIMIT must be a dict, got {redact_url(source):.200} "
                '(a store URL goes under "store": {"store": "redis://..."})'
            )
        if not isinstance(source, dict):
            raise ImproperlyConfigured(f"settings.RATE_LIMIT must be a dict, got {source!r:.200}")
        for key in source:
            if key not in KEYS:
                hint = did_you_mean(key, KEYS)
                raise ImproperlyConfigured(f"settings.RATE_LIMIT has an unknown key {key!r}{hint}")
        options = {k: v for k, v in source.items() if k not in OWN_KEYS}
        with reworded("settings.RATE_LIMIT['algorithm']: ", error=ImproperlyConfigured):
            algorithm = check_algorithm(source.get("algorithm"))
        default = source.get("default")
        if default is not None:
            shown = f"settings.RATE_LIMIT['default'] = {default!r:.200} is invalid: "
            with reworded(shown, error=ImproperlyConfigured):
                check_rate(default)
        self.exempt = exempt_patterns(source.get("exempt_paths", ()))
        clock = source.get("clock")
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise ImproperlyConfigured(
                f"settings.RATE_LIMIT['clock'] must be a limiter.Clock (with now()) or None, "
                f"got {clock!r:.200}"
            )
        store = source.get("store")
        check = source.get("check_store", True)
        if not isinstance(check, bool):
            raise ImproperlyConfigured(
                f"settings.RATE_LIMIT['check_store'] must be True or False, got {check!r:.200}"
            )
        self.check_store = check
        # Guard's messages name the option and the value; say where it came from.
        with reworded("settings.RATE_LIMIT is invalid: ", error=ImproperlyConfigured):
            self.integration = Integration(
                "RateLimitMiddleware",
                default=default,
                store=store,
                clock=clock,
                algorithm=algorithm,
                **options,
            )
        self.default: Optional[Guard] = self.integration.default

    def exempt_path(self, path: str) -> bool:
        path = normal_path(path)
        return any(pattern.fullmatch(path) is not None for pattern in self.exempt)


def exempt_patterns(paths: object) -> Tuple[Pattern[str], ...]:
    if not isinstance(paths, (list, tuple, set, frozenset)):
        raise ImproperlyConfigured(
            f"settings.RATE_LIMIT['exempt_paths'] must be a list of paths like "
            f"['/health', '/static/*'], got {paths!r:.200}"
        )
    patterns = []
    for path in paths:
        shown = f"settings.RATE_LIMIT['exempt_paths'] has an invalid path {path!r:.200}: "
        with reworded(shown, error=ImproperlyConfigured):
            patterns.append(path_pattern(path))
    return tuple(patterns)


_lock = threading.Lock()
_config: Optional[Config] = None


def current() -> Config:
    """The configuration of ``settings.RATE_LIMIT``, built on first use."""
    global _config
    config = _config
    if config is None:
        with _lock:
            if _config is None:
                _config = Config(getattr(settings, "RATE_LIMIT", None))
            config = _config
    return config


def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    # override_settings (and tests that change settings) send this: the next
    # request rebuilds from the new value, with a new store unless one is given.
    global _config
    if setting == "RATE_LIMIT":
        with _lock:
            _config = None


setting_changed.connect(_setting_changed, dispatch_uid="limiter.integrations.django")
