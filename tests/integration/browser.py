"""Headless Chromium for the tests that load a page: Debian's chromium over its chromedriver (WebDriver).

Both come from ``tests/install-chromium.sh`` (``make tools`` runs it); a machine without
them fails the test that needs them, naming the script, rather than skipping it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from ..conftest import REPO

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]

ARTIFACTS = Path(os.environ.get("SWARMLOG_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
"""Where tests keep what they made for a person to look at (screenshots)."""


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(f"{' or '.join(names)} is not installed: run tests/install-chromium.sh (`make tools` does)")


@contextmanager
def chromium(profile: Path, *, width: int = 1600, height: int = 900) -> Iterator[webdriver.Chrome]:
    """A fresh headless Chromium (its own ``--user-data-dir`` under ``profile``), closed afterwards."""
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    for flag in [*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=_binary("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """What the page's scripts reported as errors (a script that failed draws nothing, silently)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
