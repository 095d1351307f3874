"""Django configured once per process for the tests: import this module first.

Whichever comes first configures Django: this module, or docs/adapters.md's
recipe (through test_docs / test_recipes), which then runs on the URLconf
configured here.  Tests set what they need with ``override_settings``, never a
second ``settings.configure``.
"""

from __future__ import annotations

from typing import Any, ClassVar, List

import django
from django.conf import settings
from django.http import JsonResponse
from django.urls import path


def index(request: Any) -> JsonResponse:
    return JsonResponse({"hello": "world"})


class process_urls:
    """The process-wide URLconf when this module configures Django first.

    It serves what docs/adapters.md's Django recipe serves: the recipe
    (tests/integrations/test_recipes.py, tests/project/test_docs.py) configures Django only when
    nothing did, and then runs on whatever URLconf is configured.
    """

    urlpatterns: ClassVar[List[Any]] = [path("", index)]


if not settings.configured:
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=process_urls,
        MIDDLEWARE=[],
        # Django 4.2 reads it when it logs a 5xx (the mail_admins handler).
        SECRET_KEY="limiter-tests-not-a-secret",
    )
    django.setup()
