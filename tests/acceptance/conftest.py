"""A headless Debian Chromium driven by Selenium, for the admin's browser tests.

The browser and its driver come from apt (``chromium``, ``chromium-driver``);
Selenium is pointed at both, so Selenium Manager never downloads anything.
Without them the tests skip, except in CI (``CI`` set), where they must run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "admin"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1600,1000",
)


def _missing() -> str | None:
    """Why the browser cannot start here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{path} not found (apt-get install -y {package})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'selenium>=4.20')"
    return None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """A fresh headless Chromium with its own profile directory."""
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so the browser tests must run, but {missing}")
        pytest.skip(f"no browser: {missing}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go (git-ignored); kept after the run for humans and CI uploads."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
