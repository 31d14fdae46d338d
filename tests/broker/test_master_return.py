"""A SYNC_MASTER killed and restarted: its slave links to it as soon as the name server has
it again (the name server tells the group's slaves, with the master's HA address), and
producers get SEND_OK from it soon after it serves. Real processes on loopback; the slave
runs in this process where the test replaces its reconnect waits."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bench import restart
from ha.backoff import ReconnectBackoff
from tests.support.brokers import BrokerThread, broker_props, write_conf
from tests.support.ports import free_ports
from tests.support.processes import Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def never_retry_soon(slave: BrokerThread) -> None:
    """The slave's next attempts come a minute apart: only the name server's word that
    its master is back can bring it back sooner."""
    client = slave.controller.ha_client
    assert client is not None
    slave.call(lambda: setattr(client, "backoff", ReconnectBackoff(60, 60, 60)))


@pytest.mark.parametrize("ha_port_kept", [True, False], ids=["same-ha-port", "new-ha-port"])
def test_a_slave_links_to_its_restarted_master_once_the_name_server_lists_it(
        processes: Processes, tmp_path: Path, ha_port_kept: bool) -> None:
    """A slave with haMasterAddress reconnects at once; one that follows its master through
    the name servers learns the new HA address at once too (it registers every 30 s)."""
    namesrv = processes.namesrv()
    port, ha_port, new_ha_port = free_ports(3)

    def master_conf(ha: int) -> Path:
        return write_conf(tmp_path / f"master-{ha}.conf", broker_props(
            tmp_path / "master", brokerRole="SYNC_MASTER", namesrvAddr=namesrv.address,
            listenPort=port, haListenPort=ha))

    master = processes.broker(master_conf(ha_port))
    fixed = {"haMasterAddress": f"127.0.0.1:{ha_port}"} if ha_port_kept else {}
    slave = BrokerThread(broker_props(tmp_path / "slave", brokerRole="SLAVE", brokerId=1,
                                      namesrvAddr=namesrv.address, **fixed))
    try:
        client = slave.controller.ha_client
        assert client is not None
        wait_until(lambda: client.status.connected, timeout=20, message="the slave linked")
        never_retry_soon(slave)
        master.stop(signal.SIGKILL)
        wait_until(lambda: not client.status.connected, message="the link down")
        master = processes.broker(master_conf(ha_port if ha_port_kept else new_ha_port))
        wait_until(lambda: client.status.connected, timeout=10,
                   message="the slave linked to the restarted master")
        assert client.master_address.endswith(f":{ha_port if ha_port_kept else new_ha_port}")
    finally:
        slave.stop()


def test_a_restarted_sync_master_answers_send_ok_soon_after_it_serves(tmp_path: Path) -> None:
    """bench.restart, two rounds: the master is down 12 s (the slave's retries, before,
    had grown to 5 s apart: its first SEND_OK came 3-4 s after it served, after thousands
    of SLAVE_NOT_AVAILABLE)."""
    lines: list[str] = []
    summary = restart.run(tmp_path, rounds=2, down_s=12.0, producer_count=4,
                          error_pause_s=0.0, out=lines.append)
    print("\n" + "\n".join(lines))
    assert summary["lost"] == 0
    for r in summary["per_round"]:  # type: ignore[attr-defined]
        assert r["ok"] is not None and r["boot"] is not None, r
        # Margin for a loaded machine: the slave links within ~0.5 s of the master
        # listening (at once when the name server tells it), producers within ~0.3 s of
        # its registration.
        assert r["ok"] - r["boot"] < 1.5, r
        # The slave is told by the name server before producers can find the master: a
        # few SLAVE_NOT_AVAILABLE at most (unpaused producers answered ~1,000 a second;
        # 2,000-4,000 before). The bound leaves room for a slow handshake on a busy machine.
        assert r["sna"] <= 400, r
