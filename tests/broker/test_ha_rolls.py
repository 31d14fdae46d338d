"""SYNC_MASTER + SYNC_FLUSH with small commitlog files and several writers: the HA link
survives every commitlog roll and no send answers SLAVE_NOT_AVAILABLE (issue 16, item 1)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.brokers import BrokerThread, broker_props, code, create_topic, send
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)
FILE = 128 * 1024
TOPIC = "RollTopic"
WRITERS = 4
ROLLS = 12


def test_sync_master_link_survives_commitlog_rolls(tmp_path: Path) -> None:
    small = {"mappedFileSizeCommitLog": FILE, "flushDiskType": "SYNC_FLUSH"}
    master = BrokerThread(broker_props(tmp_path / "master", brokerRole="SYNC_MASTER", **small))
    slave = None
    try:
        slave = BrokerThread(broker_props(
            tmp_path / "slave", brokerRole="SLAVE", brokerId=1,
            haMasterAddress=master.controller.ha_server_addr, **small))
        service, client = master.controller.ha_service, slave.controller.ha_client
        assert service is not None and client is not None
        create_topic(master, TOPIC, 4)
        wait_until(service.slave_ok, message="slave in sync")
        codes: dict[str, int] = {}
        lock = threading.Lock()
        stop = threading.Event()
        end = FILE * (ROLLS + 1)

        def writer(n: int) -> None:
            body = b"x" * 1024
            while not stop.is_set() and master.controller.store.max_phy_offset < end:
                name = code(send(master, TOPIC, body, queue_id=n))
                with lock:
                    codes[name] = codes.get(name, 0) + 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        stop.set()
        rolls = master.controller.store.max_phy_offset // FILE
        links = client.status.connect_count
        print(f"\n{rolls} rolls, {sum(codes.values())} sends {codes}, {links} HA link(s)")
        assert rolls >= ROLLS
        assert codes == {"SUCCESS": codes.get("SUCCESS", 0)}, codes
        assert links == 1 and all(s.connected and not s.problem
                                  for s in service.slave_statuses())
    finally:
        if slave is not None:
            slave.stop()
        master.stop()
