"""Shared machinery: interleaved rounds, statistics, progress, result records."""

from __future__ import annotations

import gc
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is in the bench extra
    tqdm = None


class Unavailable(Exception):
    """Raised by a section (or one of its cases) that cannot run in this tree."""


def server_url(
    state: Dict[str, Any],
    env: str,
    start: Callable[[], str],
    probe: Callable[[str], Any],
    names: Sequence[str],
) -> str:
    """The URL of this run's server, found once and kept in ``state`` (``url``, ``origin``;
    ``error``: why none, raised as ``Unavailable`` on every later call).

    ``$env`` if set, else ``start()`` (a throwaway server); ``probe(url)``
    must answer.  ``names``: the server's name, the throwaway's, and the
    message for a missing client library (its ``ImportError``).
    """
    if "url" not in state:
        if "error" in state:
            raise Unavailable(state["error"])
        server, throwaway, missing = names
        given = os.environ.get(env)
        found = given or "(a throwaway)"
        try:
            found = given if given else start()
            probe(found)
        except ImportError:
            state["error"] = missing
            raise Unavailable(missing) from None
        except Unavailable as exc:
            state["error"] = str(exc)
            raise
        except Exception as exc:
            from limiter import redact_url

            state["error"] = f"no {server} server at {redact_url(found)} ({exc})"
            raise Unavailable(state["error"]) from None
        state["url"] = found
        state["origin"] = env if given else f"throwaway {throwaway} started by the bench"
    return str(state["url"])


@dataclass
class Settings:
    """What the command line asked for."""

    rounds: int = 5
    quick: bool = False
    tiny: bool = False  # the smoke test: a few hundred operations, no servers
    with_peers: bool = True

    def scale(self, full: int, quick: int, tiny: Optional[int] = None) -> int:
        """Pick a size for the current mode."""
        if self.tiny:
            return quick if tiny is None else tiny
        return quick if self.quick else full


class Progress:
    """One progress bar for the whole run; sections add to its total as they plan work."""

    def __init__(self, enabled: bool = True) -> None:
        self._bar: Any = None
        if enabled and tqdm is not None:
            self._bar = tqdm(total=0, unit="step", dynamic_ncols=True, leave=True)

    def plan(self, steps: int) -> None:
        if self._bar is not None:
            self._bar.total += steps
            self._bar.refresh()

    def step(self, what: str = "") -> None:
        if self._bar is not None:
            if what:
                self._bar.set_description_str(what[:60], refresh=False)
            self._bar.update(1)

    def write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text)
        else:
            print(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@dataclass
class Measure:
    """One measured quantity over several rounds."""

    id: str
    label: str
    library: str
    unit: str
    samples: List[float] = field(default_factory=list)
    group: str = ""
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    def as_dict(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "library": self.library,
            "group": self.group,
            "unit": self.unit,
            "note": self.note,
            "median": self.median,
            "min": min(self.samples) if self.samples else float("nan"),
            "max": max(self.samples) if self.samples else float("nan"),
            "samples": list(self.samples),
        }


Case = Callable[[], float]


def interleave(
    cases: Dict[str, Case],
    rounds: int,
    progress: Progress,
    title: str,
    on_error: Optional[Callable[[str, BaseException], None]] = None,
) -> Dict[str, List[float]]:
    """Run every case once per round, A B C / B C A / ... , and collect the values.

    The order rotates each round so no case always runs first (warm caches,
    frequency scaling) or last.  A case that raises is dropped from later
    rounds and reported through ``on_error``.
    """
    names = list(cases)
    samples: Dict[str, List[float]] = {name: [] for name in names}
    failed: set = set()
    progress.plan(rounds * len(names))
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name in failed:
                progress.step()
                continue
            gc.collect()
            try:
                samples[name].append(cases[name]())
            except Exception as exc:
                failed.add(name)
                if on_error is not None:
                    on_error(name, exc)
            progress.step(f"{title}: {name} ({r + 1}/{rounds})")
    return samples


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> List[float]:
    """Per-round ratios of two interleaved series (round i against round i)."""
    return [a / b for a, b in zip(numerator, denominator) if b]


def summary(values: Sequence[float]) -> Dict[str, float]:
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return 0


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes (perf_counter)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def new_section(name: str) -> Dict[str, Any]:
    return {"name": name, "status": "ok", "measures": [], "notes": [], "data": {}}


def profile_text(fn: Callable[[], Any], top: int = 10) -> str:
    """cProfile ``fn()`` and return the top functions by own time, paths shortened."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    text = "\n".join(lines[: top + 8])
    for marker in ("/site-packages/", "/src/", "/lib/python"):
        text = "\n".join(
            line if marker not in line else line[:50] + "..." + line.split(marker, 1)[1]
            for line in text.splitlines()
        )
    return text
