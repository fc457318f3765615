"""Headless Chromium on the view's page (Debian's chromium and chromium-driver, `make browser`),
driven by Selenium: for the browser tests and for measuring what a watched run costs."""

from __future__ import annotations

from pathlib import Path

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
# As root, on a machine with no internet: no sandbox, and none of Chromium's own connections.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", "--window-size=1500,1250")
MISSING = "needs Debian's chromium and chromium-driver (`make browser` installs them)"


def available() -> bool:
    return CHROMIUM.exists() and DRIVER.exists()


def open_browser(profile: Path):
    """A Selenium driver on a new headless Chromium with its own empty profile folder."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)
