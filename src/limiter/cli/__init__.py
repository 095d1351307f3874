"""The ``limiter`` command line: demo, inspect, reset, top."""

from limiter.cli._main import main as main
