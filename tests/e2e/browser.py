"""A headless chromium (Debian's, with its own chromedriver: scripts/ensure-chromium.sh), driven by Selenium."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait


@contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--lang=en-US", "--force-color-profile=srgb",
                     "--hide-scrollbars"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options,
                              service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: webdriver.Chrome, condition: Callable[[Any], Any], timeout: float = 60, what: str = "") -> Any:
    """What ``condition(driver)`` returns once it is truthy; a TimeoutException naming ``what`` otherwise."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition, message=what)
