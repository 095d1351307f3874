"""The ``limiter`` command's arguments and dispatch: ``main()``."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from limiter import __version__
from limiter.cli._demo import DEFAULT_RATE, HEADER_STYLES, demo_command
from limiter.cli._inspect import bucket_command
from limiter.cli._top import top_command
from limiter.core.spec import ALGORITHMS
from limiter.urls import STORAGE_URL_ENV


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status (0 done, 1 a store failed, 2 usage)."""
    parser, subparsers = _parsers()
    args = parser.parse_args(argv)
    if args.command in ("inspect", "reset"):
        return bucket_command(args, subparsers[args.command])
    if args.command == "top":
        return top_command(args, subparsers["top"])
    if args.command != "demo":
        parser.print_help()
        return 2
    return demo_command(args, subparsers["demo"])


def _parsers() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The command line's parser and its subparsers by name (for their usage errors)."""
    parser = argparse.ArgumentParser(prog="limiter", description="tokenlimiter tools")
    parser.add_argument("--version", action="version", version=f"tokenlimiter {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers: Dict[str, argparse.ArgumentParser] = {}
    for name, (summary, description, add_arguments) in _COMMANDS.items():
        subparsers[name] = sub = commands.add_parser(name, help=summary, description=description)
        add_arguments(sub)
    return parser, subparsers


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The arguments of ``demo``."""
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8484, help="port (default 8484; 0 = any free)")
    demo.add_argument(
        "--rate",
        default=DEFAULT_RATE,
        help=f"sustained rate, e.g. 10/second or '10/second;100/hour' (default {DEFAULT_RATE})",
    )
    demo.add_argument(
        "--burst",
        type=int,
        help="bucket capacity (default: the rate's count, 5 for 5/minute; a token bucket only)",
    )
    demo.add_argument(
        "--algorithm",
        choices=list(ALGORITHMS),
        default="token-bucket",
        help="token-bucket (the default): a burst, then a steady refill; fixed-window: the "
        "rate's count per clock window; sliding-window: per any window, estimated",
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        help=f"storage URL: memory://, sqlite:///path.db, redis://host:6379/0, ... "
        f"(default: ${STORAGE_URL_ENV} if set, else memory://)",
    )
    demo.add_argument(
        "--headers",
        choices=list(HEADER_STYLES),
        default="x",
        help="rate-limit headers: x (X-RateLimit-*, the default), draft (RateLimit, "
        "RateLimit-Policy: the IETF draft) or both",
    )


class _Once(argparse.Action):
    """An option that may be given once (a second ``--limit`` would silently win)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(
                f"argument {option_string}: given twice; write several limits as one "
                f"{option_string} '10/second;1000/hour', as RateLimiter takes them"
            )
        setattr(namespace, self.dest, values)


def _bucket_arguments(sub: argparse.ArgumentParser) -> None:
    """The arguments of ``inspect`` and ``reset``: the limiter's, then KEY."""
    sub.add_argument(
        "--store",
        metavar="URL",
        help="the shared store the application uses: sqlite:///path.db, redis://host:6379/0, "
        f"... (default: ${STORAGE_URL_ENV}; memory:// is refused: it lives in one process)",
    )
    sub.add_argument(
        "--limiter",
        metavar="MODULE:ATTRIBUTE",
        help="the application's RateLimiter, imported (myapp.limits:rl): its limits, "
        "lockout, name, store and clock, exactly; instead of --limit/--burst/--name",
    )
    sub.add_argument(
        "--limit",
        metavar="RATE",
        action=_Once,
        help="the limit as the application gives it to RateLimiter: 5/minute, "
        "'10/second;1000/hour', or a number of tokens per second",
    )
    sub.add_argument(
        "--burst", type=int, help="the bucket capacity, if the application gives RateLimiter one"
    )
    sub.add_argument(
        "--algorithm",
        choices=list(ALGORITHMS),
        help="the algorithm the application gives RateLimiter (default token-bucket)",
    )
    sub.add_argument(
        "--name",
        help="the limiter's name (RateLimiter(name=...)); default: the name RateLimiter "
        "derives from the limits, 0.0833333/s:5 for 5/minute",
    )
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_argument(
        "key",
        metavar="KEY",
        help="the client's key as the application checks it (write -- before a key "
        "that starts with -)",
    )


def _top_arguments(top: argparse.ArgumentParser) -> None:
    """The arguments of ``top``."""
    top.add_argument("--url", required=True, help="the endpoint, http:// or https://")
    top.add_argument("-n", type=int, default=10, help="how many keys (default 10, 1-1000)")
    top.add_argument("--json", action="store_true", help="print the JSON as fetched")
    top.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for the answer (default 2)"
    )


#: Each command's ``help``, ``description`` and arguments, in the order ``--help`` lists them.
_COMMANDS: Dict[str, Tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "demo": (
        "serve a small rate-limited JSON API and a page to watch it",
        "Serve a small JSON API (/api/) on http.server behind the rate limiter, "
        "and a page (/) that fires requests at it and charts the bucket; print "
        "a curl loop that shows the 200s and then the 429s.",
        _demo_arguments,
    ),
    "inspect": (
        "show one key's buckets in a shared store (takes no token)",
        "Show KEY's buckets as the application's limiter (--limiter) or "
        "RateLimiter(RATE, name=NAME) on the store sees them: "
        "for each limit its burst, the tokens available, the seconds until the "
        "bucket is full again and whether a request of cost 1 would pass now. "
        "Reading takes nothing (a peek).",
        _bucket_arguments,
    ),
    "reset": (
        "give one key full buckets in a shared store",
        "Give KEY full buckets, as RateLimiter(RATE, name=NAME).reset(KEY) does.",
        _bucket_arguments,
    ),
    "top": (
        "show the most denied keys, from a running app's top-offenders endpoint",
        "Fetch URL (a TopOffenders.as_dict() JSON endpoint, such as the demo's "
        "http://127.0.0.1:8484/top) and print the most denied keys with their "
        "counts and error bounds.",
        _top_arguments,
    ),
}
