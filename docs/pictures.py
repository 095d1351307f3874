"""Draw the pictures of the docs from the library itself: ``python docs/pictures.py``.

Writes into ``docs/img/`` (or ``--out DIR``):

* ``tokens-over-time.png``: one client's bucket, ``RateLimiter("2/second",
  burst=10)`` on a ``ManualClock``, through a burst and then a steady stream
  faster than the refill; the line is the bucket's tokens as ``peek`` sees
  them, the dots the ``remaining`` of each ``check``.
* ``bucket-vs-window.png``: the same requests under ``RateLimiter("10/minute")``
  and under ``FixedWindow(10, 60)``, 10 requests per clock minute: why
  "10/minute" admits 19 in the first minute of a steady client, and why a
  fixed window admits 20 in two seconds at its edge.
* ``algorithms.png``: the three algorithms of ``RateLimiter(..., algorithm=...)``
  on the same traffic (a client idle for 50 s, then 2 requests a second
  across a minute's edge until 70 s, then one every 2 s): the requests
  admitted and refused each second, and the 60 s that admitted the most.
* ``quota-midnight.png``: ``Quota(8, per="day", tz="Europe/Paris")`` on a
  ``ManualClock``, one request an hour from noon on 30 March 2024 to noon on
  1 April: each day's eighth request empties it, the rest wait for local
  midnight, and 31 March (clocks go forward) lasts 23 hours.
* ``demo.png``: a screenshot of ``python -m limiter demo``'s page after a
  burst, when Debian's ``chromium`` and ``chromedriver`` and selenium are
  installed (``--no-screenshot`` skips it; without them it is skipped with a
  note).

Needs matplotlib (the ``docs`` extra).  The figures are deterministic: time
moves only through ``ManualClock``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt

from limiter import FixedWindow, ManualClock, Quota, RateLimiter, RateLimitResult

IMG = Path(__file__).resolve().parent / "img"
GREEN, RED, BLUE, ORANGE = "#1a7f37", "#cf222e", "#0969da", "#bc4c00"
# No software version in the files: regenerating with another matplotlib does
# not change a PNG for nothing.
METADATA = {"Software": None}


def tokens(result: RateLimitResult, rate: float) -> float:
    """The exact tokens in a bucket, from a peek: ``reset_after`` is its deficit in seconds."""
    return max(0.0, (result.window - result.reset_after) * rate)


def tokens_over_time(out: Path) -> Path:
    """A burst of 15 at t = 1 s, then 3 requests a second from t = 4 s to t = 16 s."""
    rate, burst = 2.0, 10
    clock = ManualClock(start=0.0)
    limiter = RateLimiter(rate, burst, clock=clock)
    arrivals = [1.0 + i * 0.02 for i in range(15)]
    arrivals += [4.0 + i / 3 for i in range(36)]
    line: List[Tuple[float, float]] = []
    requests: List[Tuple[float, int, bool]] = []
    step = 0.05
    t = 0.0
    pending = sorted(arrivals)
    while t <= 24.0 + 1e-9:
        while pending and pending[0] <= t + 1e-9:
            clock.set(pending.pop(0))
            result = limiter.check("client")
            requests.append((clock.now(), result.remaining, result.allowed))
            line.append((clock.now(), tokens(limiter.peek("client"), rate)))
        clock.set(t)
        line.append((t, tokens(limiter.peek("client"), rate)))
        t = round(t + step, 10)
    line.sort()
    admitted = sum(ok for _, _, ok in requests)

    fig, ax = plt.subplots(figsize=(9, 3.8), dpi=110)
    ax.plot([p[0] for p in line], [p[1] for p in line], color=BLUE, lw=2, label="tokens (peek)")
    for ok, colour, label in ((True, GREEN, "200: allowed"), (False, RED, "429: denied")):
        xs = [r[0] for r in requests if r[2] is ok]
        ys = [r[1] for r in requests if r[2] is ok]
        ax.scatter(xs, ys, s=22, color=colour, zorder=3, label=f"{label} (remaining)")
    ax.axhline(burst, color="#8c959f", lw=0.8, ls="--")
    ax.annotate(
        "burst of 15:\n10 pass, 5 are refused",
        (1.3, 0.2),
        xytext=(1.6, 7.5),
        arrowprops={"arrowstyle": "->", "color": "#57606a"},
        fontsize=9,
    )
    ax.annotate(
        "3/s against a refill of 2/s:\nabout one in three refused",
        (12.5, 0.3),
        xytext=(11.0, 5.0),
        arrowprops={"arrowstyle": "->", "color": "#57606a"},
        fontsize=9,
    )
    ax.annotate(
        "idle: back to full\nin burst / rate = 5 s", (17.5, 6.0), xytext=(17.3, 2.5), fontsize=9
    )
    ax.set_title(
        f'RateLimiter("2/second", burst=10): {len(requests)} requests, {admitted} admitted',
        fontsize=11,
    )
    ax.set_xlabel("seconds (ManualClock)")
    ax.set_ylabel("tokens")
    ax.set_ylim(-0.5, burst + 1.5)
    ax.set_xlim(0, 24)
    ax.legend(loc="upper right", fontsize=8, ncol=3)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    path = out / "tokens-over-time.png"
    fig.savefig(path, metadata=METADATA)
    plt.close(fig)
    return path


def fixed_window(arrivals: Sequence[float], count: int, width: float) -> List[bool]:
    """``count`` requests per clock window of ``width`` s: ``FixedWindow(count, width)``."""
    return admitted_by(arrivals, FixedWindow(count, width))


def token_bucket(arrivals: Sequence[float], rate: str) -> List[bool]:
    return admitted_by(arrivals, rate)


def admitted_by(
    arrivals: Sequence[float], rate: object, algorithm: str = "token-bucket"
) -> List[bool]:
    """Whether each request at ``arrivals`` (seconds) passes ``RateLimiter(rate, ...)``."""
    clock = ManualClock(start=0.0)
    limiter = RateLimiter(rate, clock=clock, algorithm=algorithm)  # type: ignore[arg-type]
    admitted = []
    for t in arrivals:
        clock.set(t)
        admitted.append(limiter.allow("client"))
    return admitted


def cumulative(
    arrivals: Sequence[float], admitted: Sequence[bool]
) -> Tuple[List[float], List[int]]:
    xs, ys, total = [0.0], [0], 0
    for t, ok in zip(arrivals, admitted):
        if ok:
            total += 1
            xs.append(t)
            ys.append(total)
    xs.append(arrivals[-1])  # flat to the last request: the refused ones add nothing
    ys.append(total)
    return xs, ys


def bucket_vs_window(out: Path) -> Tuple[Path, int, int]:
    """Two clients, each under both policies; returns the path and the first minute's counts."""
    steady = [float(s) for s in range(0, 180)]  # one request a second for three minutes
    bucket = token_bucket(steady, "10/minute")
    window = fixed_window(steady, 10, 60.0)
    first_bucket = sum(ok for t, ok in zip(steady, bucket) if t < 60)
    first_window = sum(ok for t, ok in zip(steady, window) if t < 60)
    # An idle client that sends 10 a second from 59 s to 61 s: across the window's edge.
    edge = [59.0 + i / 10 for i in range(21)]
    edge_bucket = token_bucket(edge, "10/minute")
    edge_window = fixed_window(edge, 10, 60.0)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for ax, arrivals, b, w in (
        (left, steady, bucket, window),
        (right, edge, edge_bucket, edge_window),
    ):
        bx, by = cumulative(arrivals, b)
        wx, wy = cumulative(arrivals, w)
        ax.step(
            bx,
            by,
            where="post",
            color=BLUE,
            lw=2,
            label=f'token bucket, RateLimiter("10/minute"): {sum(b)}',
        )
        ax.step(
            wx,
            wy,
            where="post",
            color=ORANGE,
            lw=2,
            ls="--",
            label=f"fixed window, FixedWindow(10, 60): {sum(w)}",
        )
        ax.set_ylabel("requests admitted (cumulative)")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.25)
        ax.legend(loc="upper left", fontsize=8)
    left.set_title(
        f"One request a second: {first_bucket} vs {first_window} in the first minute", fontsize=10
    )
    left.set_xlabel("seconds")
    left.set_xlim(0, 180)
    for edge_t in (60, 120):
        left.axvline(edge_t, color="#8c959f", lw=0.8, ls=":")
    left.annotate(
        "burst 10 + 9 refilled\n(one token every 6 s)",
        (59, first_bucket),
        xytext=(70, 8),
        arrowprops={"arrowstyle": "->", "color": "#57606a"},
        fontsize=8,
    )
    right.set_title("An idle client, 10 a second across a window's edge", fontsize=10)
    right.set_xlabel("seconds")
    right.set_xlim(58.5, 61.5)
    right.axvline(60, color="#8c959f", lw=0.8, ls=":")
    right.annotate(
        "the window resets at 60 s:\n20 admitted in 2 s",
        (60.15, 12),
        xytext=(60.25, 3),
        arrowprops={"arrowstyle": "->", "color": "#57606a"},
        fontsize=8,
    )
    fig.tight_layout()
    path = out / "bucket-vs-window.png"
    fig.savefig(path, metadata=METADATA)
    plt.close(fig)
    return path, first_bucket, first_window


def worst_minute(arrivals: Sequence[float], admitted: Sequence[bool]) -> Tuple[int, float]:
    """``(most admitted within any 60 s, when those 60 s start)``: [start, start + 60)."""
    times = [t for t, ok in zip(arrivals, admitted) if ok]
    best = max((sum(start <= t < start + 60 for t in times), -start) for start in times)
    return best[0], -best[1]


#: The three algorithms, as ``algorithms.png`` names and draws them.
ALGORITHMS = (
    ("token-bucket", 'token bucket: RateLimiter("10/minute")', BLUE),
    ("fixed-window", 'fixed window: algorithm="fixed-window"', ORANGE),
    ("sliding-window", 'sliding window: algorithm="sliding-window"', GREEN),
)


def algorithms(out: Path) -> Tuple[Path, List[int]]:
    """The three algorithms on one client's traffic; returns the path and each one's worst 60 s."""
    arrivals = [50.0 + i / 2 for i in range(40)] + [70.0 + 2 * i for i in range(85)]
    end = 240
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.2), dpi=110, sharex=True)
    worst: List[int] = []
    for ax, (algorithm, title, colour) in zip(axes, ALGORITHMS):
        admitted = admitted_by(arrivals, "10/minute", algorithm)
        ok = [0] * end
        no = [0] * end
        for t, passed in zip(arrivals, admitted):
            (ok if passed else no)[int(t)] += 1
        seconds = list(range(end))
        ax.bar(seconds, ok, width=0.8, align="edge", color=colour, label="admitted")
        ax.bar(seconds, no, width=0.8, align="edge", bottom=ok, color="#d0d7de", label="refused")
        most, start = worst_minute(arrivals, admitted)
        worst.append(most)
        ax.axvspan(start, start + 60, color=colour, alpha=0.08)
        ax.text(
            start + 1,
            2.25,
            f"the worst 60 s: {most} admitted ({start:g} s to {start + 60:g} s)",
            fontsize=8.5,
            color="#57606a",
        )
        for edge in (60, 120, 180):
            ax.axvline(edge, color="#8c959f", lw=0.8, ls=":")
        ax.set_title(f"{title}: {sum(admitted)} of {len(arrivals)} admitted", fontsize=10)
        ax.set_ylabel("requests / s")
        ax.set_ylim(0, 2.9)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.25, axis="y")
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    axes[-1].set_xlabel(
        "seconds: idle, then 2 requests a second from 50 s to 70 s (across the clock "
        "minute at 60 s), then one every 2 s"
    )
    axes[-1].set_xlim(40, end)
    fig.suptitle('The same client under "10/minute" with each algorithm', fontsize=11)
    fig.tight_layout()
    path = out / "algorithms.png"
    fig.savefig(path, metadata=METADATA)
    plt.close(fig)
    return path, worst


def quota_midnight(out: Path) -> Tuple[Path, List[int]]:
    """One request an hour under a daily quota in Paris; returns the path and admissions per day."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    paris = ZoneInfo("Europe/Paris")
    start = datetime(2024, 3, 30, 12, 0, tzinfo=paris).timestamp()
    clock = ManualClock(start=start)
    limiter = RateLimiter(Quota(8, per="day", tz="Europe/Paris"), clock=clock)
    points: List[Tuple[float, int, bool, float]] = []
    per_day: dict = {}
    for hour in range(49):
        clock.set(start + hour * 3600)
        result = limiter.check("client")
        day = datetime.fromtimestamp(clock.now(), paris).date()
        per_day[day] = per_day.get(day, 0) + int(result.allowed)
        points.append(
            ((clock.now() - start) / 3600, result.remaining, result.allowed, result.retry_after)
        )
    midnights = [
        (datetime(2024, 3, d, tzinfo=paris) + timedelta(days=1)).timestamp() for d in (30, 31)
    ]

    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    for ok, colour, label in ((True, GREEN, "200: allowed"), (False, RED, "429: denied")):
        xs = [p[0] for p in points if p[2] is ok]
        ys = [p[1] for p in points if p[2] is ok]
        ax.scatter(xs, ys, s=22, color=colour, zorder=3, label=f"{label} (remaining)")
    for at, text in zip(midnights, ("midnight, 31 March\n(a 23-hour day)", "midnight, 1 April")):
        x = (at - start) / 3600
        ax.axvline(x, color="#8c959f", lw=1, ls="--")
        ax.text(x + 0.4, 6.2, text, fontsize=8.5, color="#57606a")
    first_denial = next(p for p in points if not p[2])
    ax.annotate(
        f"retry_after = {first_denial[3] / 3600:.0f} h:\nthe time to midnight",
        (first_denial[0], 0),
        xytext=(first_denial[0] - 1.0, 3.0),
        arrowprops={"arrowstyle": "->", "color": "#57606a"},
        fontsize=8.5,
    )
    counts = list(per_day.values())
    ax.set_title(
        'Quota(8, per="day", tz="Europe/Paris"), one request an hour; admitted per day: '
        + ", ".join(f"{n} on {d:%d %b}" for d, n in per_day.items()),
        fontsize=10,
    )
    ax.set_xlabel("hours since noon, 30 March 2024 (Paris)")
    ax.set_ylabel("remaining")
    ax.set_ylim(-0.6, 8)
    ax.set_xlim(-1, 49)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    path = out / "quota-midnight.png"
    fig.savefig(path, metadata=METADATA)
    plt.close(fig)
    return path, counts


def chromium() -> Optional[Tuple[str, str]]:
    """``(browser, driver)`` paths when a headless Chromium can be driven, else ``None``."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None
    return (browser, driver) if browser and driver else None


def demo_screenshot(out: Path, browser: str, driver: str) -> Path:
    """Start the demo on a free port, press the burst button, let a token come back, shoot."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    demo = subprocess.Popen(
        [sys.executable, "-m", "limiter", "demo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        url = demo.stdout.readline().split()[3]  # "limiter demo: serving http://... at ..."
        options = Options()
        options.binary_location = browser
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--window-size=1100,1000",
            "--hide-scrollbars",
        ):
            options.add_argument(arg)
        page = webdriver.Chrome(service=Service(driver), options=options)
        try:
            page.get(url)
            page.find_element(By.ID, "send-one").click()
            time.sleep(2)
            page.find_element(By.ID, "burst").click()
            WebDriverWait(page, 30).until(
                lambda p: (
                    int(p.find_element(By.ID, "count-200").text)
                    + int(p.find_element(By.ID, "count-429").text)
                    == 9
                )
            )
            time.sleep(14)  # one token back (5/minute: one every 12 s), drawn by the poll
            path = out / "demo.png"
            page.save_screenshot(str(path))
        finally:
            page.quit()
    finally:
        demo.terminate()
        demo.wait(30)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Draw the docs' pictures from the library.")
    parser.add_argument("--out", type=Path, default=IMG, help=f"directory (default {IMG})")
    parser.add_argument(
        "--no-screenshot",
        action="store_true",
        help="do not take the demo page's screenshot (it needs chromium)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(tokens_over_time(args.out))
    path, first_bucket, first_window = bucket_vs_window(args.out)
    print(f"{path} (first minute: token bucket {first_bucket}, fixed window {first_window})")
    path, per_day = quota_midnight(args.out)
    print(f"{path} (admitted per day: {per_day})")
    path, worst = algorithms(args.out)
    names = ", ".join(f"{name} {most}" for (name, _, _), most in zip(ALGORITHMS, worst))
    print(f"{path} (the worst 60 s: {names})")
    if not args.no_screenshot:
        found = chromium()
        if found is None:
            print("demo.png: skipped, needs chromium, chromedriver and selenium")
        else:
            print(demo_screenshot(args.out, *found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
