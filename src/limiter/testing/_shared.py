"""What the conformance suites share: their start time.

Private: import the suites from ``limiter.testing``.
"""

from __future__ import annotations

#: The suites' start time, equal to ``limiter.testing.T0`` (a test checks it):
#: defined here too so that the suites do not import the plugin that loads them.
T0 = 1_700_000_000.0
