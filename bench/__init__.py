"""The benchmark suite: ``limiter`` side by side with the libraries users would pick instead.

Run it from the repository root::

    pip install -e ".[bench]" && python -m bench            # results in bench/results/
    python -m bench --quick                                  # under a minute, small sizes
    python -m bench --publish                                # also docs/benchmarks.md

``python -m bench --help`` lists the options (``--only SECTION``, ``--rounds``,
``--quick``, ``--publish``).  Results go to ``bench/results/latest.json`` and
``latest.md`` (git-ignored); only ``--publish`` rewrites ``docs/benchmarks.md``
and ``docs/bench-*.png``.  Redis: ``REDIS_URL`` if set, else a throwaway
``redis-server`` on a free loopback port (``bench/redisenv.py``).  PostgreSQL
(``--only postgres``): ``POSTGRES_URL`` if set, else a throwaway cluster
(``bench/pgenv.py``); pyrate-limiter's PostgreSQL bucket is compared when
``pyrate-limiter`` is installed.
"""
