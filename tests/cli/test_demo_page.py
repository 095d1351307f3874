"""The demo's page in a real browser: Debian's ``chromium`` driven headless by selenium
through ``chromedriver``, against a real ``python -m limiter demo`` on a free loopback port.

Without chromium, chromedriver or selenium the tests skip and say what to
install, except under ``CI=true`` where they fail (.ci/run installs them).
Nothing depends on this machine's speed: the limit refills one token an hour.
"""

from __future__ import annotations

import json
import shutil
from typing import Any, Iterator, List

import pytest

from helpers.needs import FULL, need

TIMEOUT = 60  # seconds; generous: a busy machine


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need(f"selenium is not installed: {FULL}")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        need("chromium or chromedriver not found on PATH: apt-get install chromium chromium-driver")
    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    page = webdriver.Chrome(service=Service(driver), options=options)
    page.set_page_load_timeout(TIMEOUT)
    try:
        yield page
    finally:
        page.quit()


def number(page: Any, element_id: str) -> int:
    from selenium.webdriver.common.by import By

    return int(page.find_element(By.ID, element_id).text)


def path(chart: Any) -> List[List[float]]:
    """The chart's line as the page drew it: ``[seconds, tokens]`` vertices."""
    vertices: List[List[float]] = json.loads(chart.get_attribute("data-path") or "[]")
    return vertices


def wait(page: Any, condition: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(page, TIMEOUT, poll_frequency=0.05).until(lambda p: condition())


def test_a_burst_shows_the_429s_the_limit_implies_and_the_chart_follows(
    start_demo, browser
) -> None:
    from selenium.webdriver.common.by import By

    demo = start_demo("--rate", "1/hour", "--burst", "3")
    browser.get(demo.url)
    chart = browser.find_element(By.ID, "chart")
    assert browser.find_element(By.ID, "limit").text == "1/hour burst 3"
    assert chart.get_attribute("data-burst") == "3"
    # The burst button sends burst + 3 at once, as the printed loop does.
    size = browser.find_element(By.ID, "burst-size")
    assert size.get_attribute("value") == "6"
    # The page's first peek: a full bucket, one point; loading the page took no token.
    wait(browser, lambda: chart.get_attribute("data-points") == "1")
    assert chart.get_attribute("data-last-tokens") == "3.00"
    # On open the chart already draws the bucket: the peek carried on to now, level.
    # (the page redraws every second: the line grows to the right as time passes)
    wait(browser, lambda: len(path(chart)) >= 2 and path(chart)[-1][0] > path(chart)[0][0])
    opened = path(chart)
    assert [tokens for _, tokens in opened] == [3] * len(opened)

    size.clear()
    size.send_keys("10")
    browser.find_element(By.ID, "burst").click()
    wait(browser, lambda: number(browser, "count-200") + number(browser, "count-429") == 10)
    # 3 tokens, none back within the hour: 3 pass and exactly 7 are refused.
    assert number(browser, "count-sent") == 10
    assert number(browser, "count-200") == 3
    assert number(browser, "count-429") == 7
    assert number(browser, "count-other") == 0
    # The chart: the first peek, a dot per response, and the peek after the burst (0 tokens).
    wait(browser, lambda: int(chart.get_attribute("data-points")) >= 12)
    wait(browser, lambda: chart.get_attribute("data-last-tokens") == "0.00")
    # Steps, not slants: the burst's drop is vertical, from 3 tokens to 0 (one
    # segment, or a few should a peek land between the answers on a slow machine).
    line = path(chart)
    drops = [(a, b) for a, b in zip(line, line[1:]) if b[1] < a[1]]
    assert drops and all(a[0] == b[0] for a, b in drops), line
    assert sum(a[1] - b[1] for a, b in drops) == pytest.approx(3, abs=0.01)
    # To 0, within what the refill between the server's answer and the page's clock
    # adds on a loaded machine (1/hour: 0.0001 tokens is 0.36 s).
    assert drops[-1][1][1] == pytest.approx(0, abs=0.01)
    # The last response's headers, as the page shows them.
    shown = browser.find_element(By.ID, "headers").text.splitlines()
    assert shown[0] == "HTTP 429"
    assert "x-ratelimit-limit: 3" in shown
    assert "x-ratelimit-remaining: 0" in shown
    assert any(line.startswith("retry-after: ") for line in shown)
    rows = browser.find_elements(By.CSS_SELECTOR, "#log tr")
    assert len(rows) == 10
    statuses = sorted(row.find_elements(By.TAG_NAME, "td")[2].text for row in rows)
    assert statuses == ["200"] * 3 + ["429"] * 7

    # One more, from the button: refused, and the server agrees with the page.
    browser.find_element(By.ID, "send-one").click()
    wait(browser, lambda: number(browser, "count-429") == 8)
    with demo.client() as client:
        assert client.get("/api/").status_code == 429
        bucket = client.get("/api/bucket").json()
    assert bucket["burst"] == 3 and bucket["tokens"] < 0.01 and bucket["full"] is False

    # A burst above 100 is refused, visibly, and sends nothing (it was clamped to 100).
    size.clear()
    size.send_keys("101")
    browser.find_element(By.ID, "burst").click()
    wait(browser, lambda: browser.find_element(By.ID, "burst-error").text != "")
    assert browser.find_element(By.ID, "burst-error").text == (
        'a burst is 1 to 100 requests, not "101": nothing sent'
    )
    assert number(browser, "count-sent") == 11
    assert demo.stop() == "limiter demo: stopped\n"


def test_the_page_reads_the_draft_headers_too(start_demo, browser) -> None:
    from selenium.webdriver.common.by import By

    demo = start_demo("--rate", "1/hour", "--burst", "2", "--headers", "draft")
    browser.get(demo.url)
    browser.find_element(By.ID, "send-one").click()
    wait(browser, lambda: number(browser, "count-200") == 1)
    shown = browser.find_element(By.ID, "headers").text.splitlines()
    assert shown[0] == "HTTP 200"
    assert any(line.startswith('ratelimit: "1/hour";r=1;t=') for line in shown)
    assert 'ratelimit-policy: "1/hour";q=2;w=7200' in shown
    # The remaining count comes from RateLimit's r= when there is no X-RateLimit-Remaining.
    remaining = browser.find_elements(By.CSS_SELECTOR, "#log tr td")[3].text
    assert remaining == "1"


def test_the_chart_draws_steps_a_drop_vertical_and_a_refill_sloped(start_demo, browser) -> None:
    """The page's own ``linePath`` on a known history: 1 token/s, burst 3."""
    demo = start_demo("--rate", "1/hour", "--burst", "3")
    browser.get(demo.url)
    line = browser.execute_script(
        "rate = 1; scale = 3;"
        "return linePath(["
        "{t: 0, tokens: 3, status: 0},"  # a peek: full
        "{t: 1, tokens: 2, status: 200}, {t: 1.1, tokens: 1, status: 200},"  # two admitted
        "{t: 1.15, tokens: 1, status: 429},"  # refused: takes nothing
        "{t: 1.2, tokens: 1.2, status: 0},"  # the peek after them
        "{t: 2, tokens: 2, status: 0}"  # refilling, no request between
        "], 3.5);"
    )
    assert line == [
        [0, 3],
        [1, 3],  # full until the first 200 ...
        [1, pytest.approx(1.0)],  # ... then straight down by the 2 tokens taken
        [1.2, 1.2],  # refill: a slope of 1 token/s
        [2, 2],
        [3, 3],  # full again at 3 s ...
        [3.5, 3],  # ... and level on to now
    ]
    demo.stop()


@pytest.mark.parametrize(
    ("algorithm", "title"),
    [
        ("fixed-window", "Requests left in your window"),
        ("sliding-window", "Requests left in your sliding window"),
    ],
)
def test_a_window_is_charted_as_requests_left_level_between_peeks(
    start_demo, browser, algorithm: str, title: str
) -> None:
    import time

    from selenium.webdriver.common.by import By

    if 86400 - time.time() % 86400 < 300:
        pytest.skip("within 5 minutes of a UTC midnight: a new window could open mid-test")
    demo = start_demo("--rate", "3/day", "--algorithm", algorithm)
    browser.get(demo.url)
    chart = browser.find_element(By.ID, "chart")
    assert browser.find_element(By.ID, "limit").text == f"3/day {algorithm.replace('-', ' ')}"
    assert browser.find_element(By.ID, "chart-title").text == title
    assert chart.get_attribute("data-algorithm") == algorithm
    wait(browser, lambda: chart.get_attribute("data-last-tokens") == "3.00")
    size = browser.find_element(By.ID, "burst-size")
    assert size.get_attribute("value") == "6"  # the count + 3
    size.clear()
    size.send_keys("5")
    browser.find_element(By.ID, "burst").click()
    wait(browser, lambda: number(browser, "count-200") + number(browser, "count-429") == 5)
    assert (number(browser, "count-200"), number(browser, "count-429")) == (3, 2)
    # The peek after the burst drawn (the dots alone also end at 0: the 429s' remaining).
    wait(browser, lambda: bool(path(chart)) and path(chart)[-1][1] == 0)
    # No refill: every segment is level or vertical, and the drop is the 3 taken.
    line = path(chart)
    assert all(a[0] == b[0] or a[1] == b[1] for a, b in zip(line, line[1:])), line
    assert line[0][1] == 3 and line[-1][1] == 0
    # The panel shows whichever of the burst's parallel responses came last.
    shown = browser.find_element(By.ID, "headers").text.splitlines()
    assert shown[0] in ("HTTP 200", "HTTP 429") and "x-ratelimit-limit: 3" in shown
    demo.stop()
