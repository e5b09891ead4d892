"""A headless Chromium for the dashboard's browser tests and its documentation screenshot.

Uses the distribution's browser and driver (Debian: ``apt-get install chromium
chromium-driver``) through selenium (a dev dependency); nothing is downloaded.
The flags keep Chromium off the network (no background requests, updates or
sync) and let it run as root in a container. The documentation's screenshots
come from ``python -m gigaevo.dashboard.headless URL OUT.png [--section ID]``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
DRIVERS = ("/usr/bin/chromedriver",)
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
)


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) paths when both are installed, else None."""
    browser = next((p for p in BROWSERS if Path(p).is_file()), None)
    driver = next((p for p in DRIVERS if Path(p).is_file()), shutil.which("chromedriver"))
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A selenium WebDriver on a headless Chromium with a fresh, temporary profile.

    The browser's console is recorded (``driver.get_log("browser")``); the
    browser quits and its profile is deleted when the block ends.

    Raises:
        RuntimeError: no Chromium and ChromeDriver are installed.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise RuntimeError("no chromium or chromedriver: apt-get install chromium chromium-driver")
    browser, driver = found
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with tempfile.TemporaryDirectory(prefix="gigaevo-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        web = webdriver.Chrome(service=Service(driver), options=options)
        try:
            yield web
        finally:
            web.quit()


def screenshot(url: str, out: Path, section: str | None = None, height: int = 1000) -> None:
    """Save a PNG of the dashboard at ``url`` once it shows programs.

    ``section``: the id of an element scrolled to the top first (``program``).
    """
    import time

    with chromium(height=height) as web:
        web.get(url)
        deadline = time.monotonic() + 60
        while not web.execute_script("return Number(document.body.dataset.programs || 0)"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}: the page showed no program within 60 s")
            time.sleep(0.2)
        time.sleep(2.5)  # two more polls: plots, tables and the program view filled in
        if section:
            web.execute_script(f"document.getElementById({section!r}).scrollIntoView()")
            time.sleep(0.5)
        web.save_screenshot(str(out))


def main(argv: list[str] | None = None) -> int:
    """``python -m gigaevo.dashboard.headless URL OUT.png [--section ID] [--height PX]``."""
    import argparse

    parser = argparse.ArgumentParser(description="Screenshot a running dashboard.")
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--section", default=None, help="element id to scroll to first")
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    screenshot(args.url, args.out, args.section, args.height)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
