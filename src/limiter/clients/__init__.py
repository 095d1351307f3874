"""Outbound clients: HTTP clients that wait their turn and obey the server's 429s.

Nothing is imported here: ``limiter.clients.httpx`` (extra ``httpx``) and
``limiter.clients.requests`` (extra ``requests``) are each imported by name
when used, so ``import limiter`` never loads either library.  What the two
share (server hints, per-host pauses) is in ``limiter.clients._pacing``.
"""
