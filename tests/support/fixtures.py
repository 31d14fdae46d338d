"""Fixtures every test folder can use (tests/conftest.py registers this module): brokers in
this process, real name server and broker processes, broker stubs. Everything started here
is stopped in the fixture's finalizer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread, Node, broker_props
from tests.support.processes import Processes


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    """`start_broker(**broker.conf keys)` -> a BrokerThread storing under tmp_path/store."""
    started: list[BrokerThread] = []

    def start(controller_kwargs: dict[str, Any] | None = None, **props: object) -> BrokerThread:
        b = BrokerThread(broker_props(tmp_path / "store", **props), **(controller_kwargs or {}))
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Node stubs the test opens (append them); closed after the test."""
    opened: list[Node] = []
    yield opened
    for n in opened:
        n.close()
