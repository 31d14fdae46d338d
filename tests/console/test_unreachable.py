"""Brokers that stop answering, mid-session, on a cluster of its own (one master and its
slave): a SIGSTOPped broker costs a page at most its budget (1 s) and is marked unreachable;
a killed one stays listed as unreachable after the name server dropped it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqclient.admin import MQAdmin
from tests.console.conftest import ConsoleProcess
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

PAGE_LIMIT_S = 3.0  # the 1 s budget, the page's other work, the browser


class Setup:
    def __init__(self, local: LocalCluster, console: ConsoleProcess) -> None:
        self.local, self.console, self.url = local, console, console.url
        self.nodes = {p["name"]: p for p in local.processes}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console-unreachable")
    with LocalCluster(root / "cluster", "--groups", "1", "--slaves", "1") as local:
        console = ConsoleProcess(local.namesrv_addr, root)
        try:
            yield Setup(local, console)
        finally:
            console.stop()


def timed_goto(page: Any, url: str) -> float:
    started = time.monotonic()
    page.goto(url)
    return time.monotonic() - started


def test_a_frozen_master_costs_a_page_its_budget_and_shows_as_unreachable(
        page: Any, setup: Setup) -> None:
    master = setup.nodes["broker-a-0"]
    with MQAdmin(setup.local.namesrv_addr) as admin:
        admin.update_consumer_offset(master["address"], "FrozenGroup", "TBW102", 0, 0)
    os.kill(master["pid"], signal.SIGSTOP)
    try:
        # A group's page and a query over the 8 queues of a topic on the frozen broker: one
        # budget each, not one a queue.
        assert timed_goto(page, f"{setup.url}/groups/FrozenGroup") < PAGE_LIMIT_S
        assert "DEADLINE_EXCEEDED" in page.locator("#unreachable").inner_text()
        assert timed_goto(page, f"{setup.url}/messages?mode=time&topic=TBW102") < PAGE_LIMIT_S
        assert "Nothing found" in page.locator("#nothing-found").inner_text()
        assert "DEADLINE_EXCEEDED" in page.locator(".problem").inner_text()
        assert timed_goto(page, f"{setup.url}/cluster") < PAGE_LIMIT_S
        row = page.locator(f"tr[data-addr='{master['address']}']").inner_text()
        assert "UNREACHABLE" in row and "DEADLINE_EXCEEDED" in row
        assert "broker-a" in page.locator("#unreachable").inner_text()
        assert "SLAVE" in page.locator(
            f"tr[data-addr='{setup.nodes['broker-a-1']['address']}']").inner_text()

        # The group list is served from a copy at most 5 s old while a new one is asked
        # for: it says the broker is missing once that answer (or its budget) is in.
        def groups_say_unreachable() -> bool:
            assert timed_goto(page, f"{setup.url}/groups") < PAGE_LIMIT_S
            return page.locator("#unreachable").count() == 1
        wait_until(groups_say_unreachable, timeout=15, interval=0.5,
                   message="the group list leaves the frozen master out")
        assert "broker-a" in page.locator("#unreachable").inner_text()
    finally:
        os.kill(master["pid"], signal.SIGCONT)
    page.goto(f"{setup.url}/cluster")
    assert page.locator("#unreachable").count() == 0


def test_a_killed_broker_stays_listed_as_unreachable_after_the_name_server_drops_it(
        page: Any, setup: Setup) -> None:
    slave = setup.nodes["broker-a-1"]
    page.goto(f"{setup.url}/cluster")  # the console saw it
    assert "SLAVE" in page.locator(f"tr[data-addr='{slave['address']}']").inner_text()
    os.kill(slave["pid"], signal.SIGKILL)
    with MQAdmin(setup.local.namesrv_addr) as admin:
        wait_until(lambda: slave["address"] not in admin.cluster_info().groups[
            "broker-a"].addrs.values(), timeout=30, message="the name server drops the slave")
    assert timed_goto(page, f"{setup.url}/cluster") < PAGE_LIMIT_S
    row = page.locator(f"tr[data-addr='{slave['address']}']").inner_text()
    assert "UNREACHABLE" in row and "no longer listed by the name servers" in row
    api = page.request.get(f"{setup.url}/api/cluster").json()
    assert api["unreachable"] == [slave["address"]]
    assert "Traceback" not in page.content()
