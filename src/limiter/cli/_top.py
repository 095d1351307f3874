"""``top``: fetch a running app's ``TopOffenders.as_dict()`` endpoint and print the
most denied keys (``limiter.metrics.top`` counts them in the app)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Tuple

from limiter.backends._url import redact_url
from limiter.cli._output import duration, escape
from limiter.clients._pacing import host_key


def top_command(args: argparse.Namespace, sub: argparse.ArgumentParser) -> int:
    """``top``: usage errors exit 2, an endpoint that cannot be read exits 1."""
    import base64
    import urllib.error
    import urllib.parse
    import urllib.request

    url: str = args.url
    parts = urllib.parse.urlsplit(url)
    shown = redact_url(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        sub.error(f"--url must be an http:// or https:// URL, got {shown!r}")
    if not 1 <= args.n <= 1000:
        sub.error(f"-n must be from 1 to 1000, got {args.n}")
    if not 0 < args.timeout <= 60:
        sub.error(f"--timeout must be seconds from 0 to 60, got {args.timeout}")
    query = urllib.parse.urlencode({"n": args.n})
    # user:password@ goes in a header: urllib would read it as part of the host.
    netloc = parts.netloc.rpartition("@")[2]
    fetch = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", query, ""))
    request = urllib.request.Request(fetch, headers={"Accept": "application/json"})
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    opener = _same_origin_opener()
    try:
        with opener.open(request, timeout=args.timeout) as response:
            payload = json.loads(response.read(1_000_000))
        offenders = payload["offenders"]
        rows = [(str(o["key"]), int(o["count"]), int(o["error"])) for o in offenders]
        window, total = float(payload["window_seconds"]), int(payload["total"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = getattr(exc, "reason", None) or exc
        print(f"limiter top: cannot read {shown}: {escape(str(reason))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(payload, indent=1))
        return 0
    print(f"{total} denials in the last {duration(window)} ({shown})")
    if not rows:
        print("no key denied")
        return 0
    rows = [(escape(key), count, error) for key, count, error in rows]  # keys clients chose
    width = max(len(key) for key, _, _ in rows)
    for key, count, error in rows:
        bound = f"  (up to {error} fewer)" if error else ""
        print(f"{key:<{width}}  {count}{bound}")
    return 0


def _origin_of(url: str) -> Tuple[str, str]:
    """``(scheme, host[:port])`` of ``url``: its origin (``host_key`` omits a default port)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), host_key(parts.scheme, parts.hostname or "", port)


def _same_origin_opener() -> Any:
    """An opener that follows redirects but sends ``Authorization`` only to its origin.

    urllib copies a request's headers onto the redirected request whatever its
    host or scheme: a 302 to another port or host, or from https to http,
    would receive the URL's password.
    """
    import urllib.request

    class SameOriginCredentials(urllib.request.HTTPRedirectHandler):
        def redirect_request(
            self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
        ) -> Any:
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None and _origin_of(new.full_url) != _origin_of(req.full_url):
                for name in [h for h in new.headers if h.lower() == "authorization"]:
                    del new.headers[name]
                new.unredirected_hdrs.pop("Authorization", None)
            return new

    return urllib.request.build_opener(SameOriginCredentials())
