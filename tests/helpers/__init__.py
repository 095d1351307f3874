"""What several test modules share; no test module imports another.

* ``needs``: skip a test for want of a package or a binary, saying how to get
  it, or fail it under ``CI=true`` (CI must run everything).
* ``redis_servers``: throwaway redis-server processes and clusters.
* ``redis_state``: reading back what a Redis store wrote.
* ``postgres_servers``: throwaway PostgreSQL servers, and a store's rows read back.
* ``step_strategies``: hypothesis strategies for the tests that hold a
  server's step (the Redis script, the PostgreSQL function) equal to ``limiter.core``.
* ``window_runs``: the window policies' sequences and concurrency checks
  that the Redis and PostgreSQL tests run alike.
* ``servers``: uvicorn in a thread on a free loopback port.
* ``django_settings``: Django configured once per process (import it first).
* ``cli``: ``limiter.cli.main`` run in-process, and an application module for
  its ``--limiter``.
"""
