"""The benchmark suite: ``limiter`` side by side with the libraries users would pick instead.

Run it from the repository root::

    pip install -e ".[bench]" && python -m bench

``python -m bench --help`` lists the options (``--only SECTION``, ``--rounds``,
``--quick``).  Results go to ``bench/results/latest.json`` and are rendered into
``docs/benchmarks.md`` and ``docs/bench-*.png``.
"""
