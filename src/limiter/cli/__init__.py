"""The ``limiter`` command line: demo, inspect, reset, top."""
