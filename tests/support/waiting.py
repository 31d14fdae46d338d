"""Waiting for a condition, bounded: every wait in a test has a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


def assert_never(predicate: Callable[[], object], seconds: float, interval: float = 0.02,
                 message: str = "condition") -> None:
    """Fails as soon as `predicate` holds within `seconds` (something that must not happen
    yet, such as a delayed message delivered early)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            raise AssertionError(f"{message} held within {seconds} s")
        time.sleep(interval)


async def wait_until_async(cond: Callable[[], object], timeout: float = 5.0,
                           step: float = 0.005, message: str = "condition") -> None:
    """wait_until on the running event loop (its other tasks run meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(step)
