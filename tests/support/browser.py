"""
A real browser for the live tests: Debian's headless Chromium
(C{/usr/bin/chromium}) driven by Selenium through Debian's chromedriver
(C{/usr/bin/chromedriver}), with background networking off and a fresh
profile.  Nothing is downloaded: without both programs the tests skip.

Selenium's calls block, so a test runs its browser steps in a thread
(L{inBrowser}) while the reactor goes on serving the processes it watches.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SkipTest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: How Chromium is started: headless, and silent towards anywhere else.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--window-size=1200,1000",
)

T = TypeVar("T")


def requireChromium() -> None:
    """
    Skip unless Debian's Chromium, its chromedriver and Selenium are here
    (C{scripts/setup} installs them).
    """
    for program in (CHROMIUM, CHROMEDRIVER):
        if not os.access(program, os.X_OK):
            raise SkipTest(f"{program} is missing (scripts/setup installs chromium and chromium-driver)")
    try:
        import selenium
    except ImportError:
        raise SkipTest("selenium is missing (the test extra has it)")
    del selenium


def startChromium(profile: Path) -> Any:
    """
    A new headless Chromium with the profile folder C{profile} (made
    fresh), driven by Selenium.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if profile.exists():
        shutil.rmtree(profile)
    profile.mkdir(parents=True)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Selenium Manager is never asked for a driver or a browser: both are
    # named, and it is told to stay offline.
    os.environ["SE_OFFLINE"] = "true"
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def inBrowser(step: Callable[..., T], *args: Any) -> Any:
    """
    Run a blocking browser step in a thread; a L{Deferred} of its result.
    """
    return deferToThread(step, *args)


def waitUntil(test: Callable[[], T], timeout: float = 60, what: str = "") -> T:
    """
    Poll C{test} (in the browser's thread) until it gives something true;
    that.  A test that raises is tried again (the page may be redrawing).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    found: Any = None
    while time.monotonic() < deadline:
        try:
            found = test()
        except Exception as e:  # a stale element while the page redraws
            last = e
            found = None
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(
        f"timed out waiting for {what or test} (last seen: {found!r}; last error: {last!r})"
    )
