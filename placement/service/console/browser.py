"""Headless Chromium for the console's browser test and benchmark (selenium, optional).

Debian's ``chromium`` and ``chromium-driver`` packages only (``make test`` installs them): the
paths are given explicitly, so selenium's driver manager never looks for, or downloads, a
browser build of its own.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM = os.environ.get("PLACEMENT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PLACEMENT_CHROMEDRIVER", "/usr/bin/chromedriver")


def missing() -> str | None:
    """Why no headless browser can run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)) and not shutil.which(path):
            return f"{path} not found: apt-get install {package} (make test installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    return None


def chromium(width: int = 1400, height: int = 1100) -> Any:
    """A headless Chromium webdriver (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium manager: never fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
