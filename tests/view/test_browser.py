"""The live page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven
by Selenium): the DOM names every stage and the bottleneck while the engine is saturated, follows
the load as it stops, keeps 5 minutes of history on the slider; a screenshot is taken.

``RXPIPE_UPDATE_SCREENSHOTS=1`` also writes the screenshot to ``docs/live-view.png``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rxpipe.loader import build_pipeline, load_module
from tests.installed import missing

from .test_gateway_view import Load

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,720")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        missing("Debian's chromium and chromium-driver are not installed (.ci/run: apt-get install them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def gateway_pipeline() -> Any:
    path = ROOT / "pipelines" / "llm_gateway.py"
    module, name = load_module(str(path))
    return build_pipeline(module, name, {"max_num_seqs": 4, "queue_capacity": 8, "batch_max_size": 2}, path=path)


@contextlib.asynccontextmanager
async def page_open(driver: Any) -> AsyncIterator[str]:
    """A small ``llm_gateway`` served on a free port with its ``/pipeline`` page open in ``driver``;
    the gateway's URL."""
    async with gateway_pipeline().start(port=0) as running:
        url = running.url
        assert url is not None
        await asyncio.to_thread(driver.get, url + "/pipeline")
        yield url


async def wait_for(driver: Any, condition: Callable[[Any], Any], within_s: float) -> Any:
    """Poll ``condition(driver)`` (in a thread: Selenium blocks) until it is truthy."""
    deadline = time.monotonic() + within_s
    while True:
        found = await asyncio.to_thread(condition, driver)
        if found:
            return found
        assert time.monotonic() < deadline, await asyncio.to_thread(lambda: driver.page_source[:3000])
        await asyncio.sleep(0.1)


def stages(driver: Any) -> list[tuple[str, str, str]]:
    """(data-stage, data-bottleneck, the name label's text) of every stage group, in DOM order."""
    from selenium.webdriver.common.by import By

    return [(g.get_attribute("data-stage"), g.get_attribute("data-bottleneck"),
             g.find_element(By.CSS_SELECTOR, "text.name").text)
            for g in driver.find_elements(By.CSS_SELECTOR, "g.stage")]


def header(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, "bottleneck").text)


NAMES = ["gateway", "rate_limit", "queue", "batch", "executor"]
#: the server under test runs on uvloop, as `rxpipe run` serves; the browser is the client
pytestmark = pytest.mark.loops("uvloop")


async def test_the_page_names_every_stage_and_marks_the_saturated_executor(browser: Any, tmp_path: Path) -> None:
    async with page_open(browser) as url:
        assert await asyncio.to_thread(lambda: browser.title) == "rxpipe · llm_gateway · pipeline"
        assert [(name, neck) for name, neck, _ in await asyncio.to_thread(stages, browser)] == [
            (name, "false") for name in NAMES]
        assert await asyncio.to_thread(header, browser) == "none"
        load = Load(url, clients=24, max_tokens=40)
        try:
            def marked(driver: Any) -> bool:
                return header(driver) == "executor" and [n for n, neck, _ in stages(driver) if neck == "true"] == [
                    "executor"]

            def figure(driver: Any, stage: str, name: str) -> int:
                return int(driver.execute_script(
                    f"return document.querySelector('g.stage[data-stage=\"{stage}\"]').getAttribute('data-{name}')"))

            await wait_for(browser, lambda d: marked(d) and figure(d, "executor", "busy-ms-per-s") >= 900
                           and figure(d, "queue", "backpressured-ms-per-s") >= 500, within_s=10.0)
            shown = await asyncio.to_thread(stages, browser)
            assert [label for _, _, label in shown] == NAMES  # every stage named in the DOM
            shot = tmp_path / "live-view.png"
            assert await asyncio.to_thread(browser.save_screenshot, str(shot))
            data = shot.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
            if os.environ.get("RXPIPE_UPDATE_SCREENSHOTS"):
                (ROOT / "docs" / "live-view.png").write_bytes(data)
            await load.stop()
            await wait_for(browser, lambda d: header(d) == "none" and all(n == "false" for _, n, _ in stages(d)),
                           within_s=10.0)
        finally:
            await load.close()


async def test_the_slider_shows_an_earlier_snapshot_then_goes_back_live(browser: Any) -> None:
    async with page_open(browser):
        # the initial snapshot, then one event a second: wait for three in the history
        await wait_for(browser, lambda d: int(d.execute_script("return document.getElementById('slider').max")) >= 3,
                       within_s=10.0)

        def rewind(driver: Any) -> Any:
            return driver.execute_script(
                "const s = document.getElementById('slider'); s.value = '0';"
                "s.dispatchEvent(new Event('input'));"
                "return [document.getElementById('status').textContent, document.getElementById('shown').textContent];")

        status, shown = await asyncio.to_thread(rewind, browser)
        assert status == "history" and shown.endswith(" s ago") and int(shown.split()[0]) >= 2
        await asyncio.sleep(1.5)  # events keep arriving, the page stays on the rewound one
        assert await asyncio.to_thread(lambda: browser.execute_script(
            "return document.getElementById('status').textContent")) == "history"
        await asyncio.to_thread(lambda: browser.execute_script("document.getElementById('golive').click()"))
        assert await asyncio.to_thread(lambda: browser.execute_script(
            "return [document.getElementById('status').textContent, document.getElementById('shown').textContent,"
            " document.getElementById('slider').value === document.getElementById('slider').max]")) == [
            "live", "now", True]


async def test_the_history_keeps_the_last_5_minutes(browser: Any) -> None:
    async with page_open(browser):
        await wait_for(browser, lambda d: d.execute_script("return document.getElementById('bottleneck').textContent")
                       == "none", within_s=10.0)

        def four_hundred_seconds(driver: Any) -> Any:
            # the live stream stops, then 400 more snapshots one second apart arrive as events do
            return driver.execute_script(
                "events.close(); const last = history[history.length - 1];"
                "for (let k = 1; k <= 400; k++) remember({...last, at: last.at + k});"
                "const s = document.getElementById('slider'); const kept = [s.max, history[0].at - last.at];"
                "s.value = '0'; s.dispatchEvent(new Event('input'));"
                "return [...kept, document.getElementById('shown').textContent];")

        # 301 snapshots kept (the newest and the 300 s before it): seconds 100 to 400 after the first
        assert await asyncio.to_thread(four_hundred_seconds, browser) == ["300", 100, "300 s ago"]
