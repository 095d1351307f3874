"""Observers of decision events: metrics exporters and a top-offenders tracker.

Nothing is imported here: ``limiter.metrics.top`` (standard library only) and
the exporters, whose third-party dependencies are optional extras, are each
imported by name when used.
"""
