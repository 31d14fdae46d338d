"""A name server that comes back hears from the broker at once, not at the next 30 s
registration; a failed registration is one warning per name server (issue 16, item 11)."""

from __future__ import annotations

import logging
import time

import pytest

from tests.broker.conftest import BrokerThread, wait_until
from tests.broker.test_registration import NamesrvThread, Start

pytestmark = pytest.mark.timeout(60)


def test_a_returning_name_server_is_registered_with_at_once(
        start_broker: Start, caplog: pytest.LogCaptureFixture) -> None:
    namesrv: NamesrvThread | None = NamesrvThread()
    assert namesrv is not None
    address = namesrv.address
    b: BrokerThread = start_broker(namesrvAddr=address)
    try:
        assert list(namesrv.brokers()) == [b.address]
        namesrv.stop()
        namesrv = None
        with caplog.at_level(logging.WARNING, logger="broker.registration"):
            for _ in range(3):
                assert b.run(b.controller.register_broker_all()) == 0
        failures = [r for r in caplog.records if "registerBroker to name server" in r.message]
        assert len(failures) == 1 and address in failures[0].message
        time.sleep(3)  # an outage of a few seconds: gRPC's own backoff would grow meanwhile
        t0 = time.monotonic()
        namesrv = back = NamesrvThread(address)
        wait_until(lambda: list(back.brokers()) == [b.address], timeout=5,
                   message="registration with the returned name server")
        elapsed = time.monotonic() - t0
        print(f"\nregistered {elapsed:.2f} s after the name server came back")
        assert elapsed < 4
    finally:
        if namesrv is not None:
            namesrv.stop()
