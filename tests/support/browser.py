"""Headless Chromium (Selenium) for the tests that check pages as a browser renders them — the admin port's
web view and the pipeline's HTML report — and the directory their screenshots go to."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["artifacts_dir", "headless_chromium"]


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        message = (
            "chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must install them")
        pytest.skip(message)
    return chromium, driver


@contextmanager
def headless_chromium(width: int = 1280, height: int = 1100) -> Iterator[Any]:
    """A Selenium ``WebDriver`` on headless Chromium; skips the test when Chromium is not installed (fails
    it in CI)."""
    chromium, driver = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={width},{height}")
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def artifacts_dir() -> Path:
    path = Path(os.environ.get("REGROUP_TEST_ARTIFACTS") or Path(__file__).parents[2] / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
