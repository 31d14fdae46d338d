"""The console's tests: a real `mqconsole` process against a real local cluster, driven by
Debian's chromium (headless, through playwright with `executable_path`; never
`playwright install`). Without chromium or playwright the browser tests skip, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import READY_LINE
from tests.support.processes import child_env, stop_process

CHROMIUM_NAMES = ("chromium", "chromium-browser")
CONSOLE_BOOT_S = 60.0  # imports of the web stack on a loaded 2-core machine
BROWSER_LAUNCH_MS = 120_000


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class ConsoleProcess:
    """`python -m console` on a free loopback port; stopped by its own handle."""

    def __init__(self, namesrv: str, log_dir: Path, *args: str) -> None:
        self.log_path = log_dir / "mqconsole.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "console", "--namesrv", namesrv, "--listen", "127.0.0.1:0",
             *args], stdout=subprocess.PIPE, stderr=self.log, text=True, env=child_env())
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        import select
        import time

        deadline = time.monotonic() + CONSOLE_BOOT_S
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                line = self.process.stdout.readline()
                if line.startswith(READY_LINE):
                    return line.split()[-1].rstrip("/")
                if not line and self.process.poll() is not None:
                    break
        self.stop()
        raise AssertionError(f"mqconsole did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        stop_process(self.process, 10)
        self.log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("Debian's chromium is not installed (make test installs it as root: "
                    "apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (the dev extra has it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True,
                              timeout=BROWSER_LAUNCH_MS,
                              args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, setup: Any) -> Iterator[Any]:
    """A fresh browser page (its own context: no cookies of another test) once the
    module's `setup` (its cluster and console) is up."""
    context = browser.new_context()
    p = context.new_page()
    p.set_default_timeout(15_000)
    try:
        yield p
    finally:
        context.close()
