"""The name server's route tables: RocketMQ's RouteInfoManager, pure and synchronous.

Four tables (SPEC §3):

- ``topic_queue_table``: topic -> brokerName -> QueueData
- ``broker_addr_table``: brokerName -> BrokerData (cluster, brokerName, brokerId -> address)
- ``cluster_addr_table``: cluster -> brokerNames
- ``broker_live_table``: broker address -> BrokerLiveInfo

Nothing here touches the network or the event loop; time comes from an injected clock
returning milliseconds, so tests drive the 120 s expiry without waiting.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from nameserver.constants import BROKER_CHANNEL_EXPIRED_TIME_MS, MASTER_ID, PERM_WRITE

log = logging.getLogger(__name__)

Clock = Callable[[], int]
"""Returns the current time in milliseconds."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


@dataclasses.dataclass(frozen=True)
class DataVersion:
    timestamp: int = 0
    counter: int = 0


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclasses.dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclasses.dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = dataclasses.field(default_factory=dict)

    def master_addr(self) -> str | None:
        """The live master's address, None when the group has no master (no writes)."""
        return self.broker_addrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))


@dataclasses.dataclass
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    ha_server_addr: str
    peer: str = ""  # the connection the last registration came over ("" when unknown)


@dataclasses.dataclass(frozen=True)
class RegisterBrokerResult:
    """For a slave: its master's broker address and HA address ("" when no live master)."""

    master_addr: str = ""
    ha_server_addr: str = ""


@dataclasses.dataclass(frozen=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, set[str]]


class RouteInfoManager:
    """Route tables of one name server. Not thread-safe: use from one thread (the event loop)."""

    def __init__(self, clock: Clock = wall_clock_ms) -> None:
        self._clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        # brokerName -> the address whose topic table the group's queue data is.
        self._queue_data_from: dict[str, str] = {}

    # ------------------------------------------------------------------ register

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        topic_configs: Iterable[TopicConfig] | None,
        peer: str = "",
    ) -> RegisterBrokerResult:
        """Add or refresh one broker; also the 30 s heartbeat.

        ``topic_configs`` is the broker's whole topic table. A master's table rebuilds the
        group's queue data when its data version changed since its previous registration
        (or the queue data is not yet its own). While the group has no master, its slave of
        the lowest id (the prime slave, as in RocketMQ 5) does the same with read-only
        queues: a group whose master and slaves all went, and whose slave came back alone,
        is readable again (without it, what only that slave stores is never consumed).
        """
        self._add_to_cluster(cluster_name, broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(cluster_name, broker_name)
            self.broker_addr_table[broker_name] = broker_data

        # One address has one id: a broker that switched role (slave -> master) loses
        # its old id entry.
        for other_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]

        old_addr = broker_data.broker_addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            # A new address for an existing id replaces the old one.
            self.broker_live_table.pop(old_addr, None)
        broker_data.broker_addrs[broker_id] = broker_addr
        # A new group has no old address either: both are a first registration.
        register_first = old_addr != broker_addr

        prev_live = self.broker_live_table.get(broker_addr)
        is_prime_slave = (broker_id != MASTER_ID and MASTER_ID not in broker_data.broker_addrs
                          and broker_id == min(broker_data.broker_addrs))
        if (broker_id == MASTER_ID or is_prime_slave) and topic_configs is not None:
            data_version_changed = prev_live is None or prev_live.data_version != data_version
            if (data_version_changed or register_first
                    or self._queue_data_from.get(broker_name) != broker_addr):
                self._rebuild_queue_data(broker_name, topic_configs, read_only=is_prime_slave)
                self._queue_data_from[broker_name] = broker_addr

        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update_timestamp=self._clock(),
            data_version=data_version,
            ha_server_addr=ha_server_addr,
            peer=peer,
        )
        if prev_live is None:
            replaced = f", replaces {old_addr}" if old_addr not in (None, broker_addr) else ""
            log.info(
                "new broker registered, %s HAServer: %s cluster=%s brokerName=%s brokerId=%d%s",
                broker_addr, ha_server_addr, cluster_name, broker_name, broker_id, replaced,
            )

        if broker_id == MASTER_ID:
            return RegisterBrokerResult()
        master_addr = broker_data.master_addr()
        master_live = self.broker_live_table.get(master_addr) if master_addr else None
        if master_addr is None or master_live is None:
            return RegisterBrokerResult()
        return RegisterBrokerResult(master_addr, master_live.ha_server_addr)

    def _add_to_cluster(self, cluster_name: str, broker_name: str) -> None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.cluster != cluster_name:
            # The group moved to another cluster.
            self._remove_from_cluster(broker_data.cluster, broker_name)
            broker_data.cluster = cluster_name
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)

    def _rebuild_queue_data(self, broker_name: str, topic_configs: Iterable[TopicConfig], *,
                            read_only: bool = False) -> None:
        """Make the group's queue data exactly the topic table of its master (or prime
        slave: `read_only`, as nothing can be written to a group without a master)."""
        new_topics: set[str] = set()
        for topic_config in topic_configs:
            new_topics.add(topic_config.topic_name)
            queue_data = QueueData(
                broker_name=broker_name,
                read_queue_nums=topic_config.read_queue_nums,
                write_queue_nums=topic_config.write_queue_nums,
                perm=topic_config.perm & ~PERM_WRITE if read_only else topic_config.perm,
                topic_sys_flag=topic_config.topic_sys_flag,
            )
            queue_datas = self.topic_queue_table.setdefault(topic_config.topic_name, {})
            old = queue_datas.get(broker_name)
            if old != queue_data:
                log.debug("topic %s on %s: %s -> %s", topic_config.topic_name, broker_name,
                          old, queue_data)
                queue_datas[broker_name] = queue_data
        for topic, queue_datas in list(self.topic_queue_table.items()):
            if topic not in new_topics and broker_name in queue_datas:
                log.debug("topic %s no longer on %s", topic, broker_name)
                del queue_datas[broker_name]
                if not queue_datas:
                    del self.topic_queue_table[topic]

    # ---------------------------------------------------------------- unregister

    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> bool:
        """Remove a broker that shuts down cleanly. Returns whether it was known; an
        unregister naming no registered broker (name, id and address) changes nothing: a
        stale one must not remove the address that replaced it, nor a live entry."""
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs.get(broker_id) != broker_addr:
            log.info("unregisterBroker %s cluster=%s brokerName=%s brokerId=%d: not registered",
                     broker_addr, cluster_name, broker_name, broker_id)
            return False
        live = self.broker_live_table.pop(broker_addr, None)
        del broker_data.broker_addrs[broker_id]
        if not broker_data.broker_addrs:
            self._remove_broker_name(broker_data)
        log.info(
            "unregisterBroker %s cluster=%s brokerName=%s brokerId=%d: live %s, addr OK",
            broker_addr, cluster_name, broker_name, broker_id,
            "OK" if live is not None else "Failed",
        )
        return True

    def broker_link_closed(self, broker_addr: str, peer: str) -> bool:
        """The broker at `broker_addr` lost its link over connection `peer` (its process
        exited): it leaves the route at once, as RocketMQ's name server does when a broker's
        channel closes, if its last registration came over that connection (a broker that
        restarted meanwhile registered over another). Returns whether it was removed."""
        live = self.broker_live_table.get(broker_addr)
        if live is None or not peer or live.peer != peer:
            return False
        del self.broker_live_table[broker_addr]
        log.warning("The broker link closed, %s removed (its connection %s is gone)",
                    broker_addr, peer)
        self._on_broker_gone(broker_addr)
        return True

    # ---------------------------------------------------------------------- scan

    def scan_not_active_broker(self, now: int | None = None) -> list[str]:
        """Remove brokers silent for more than 120 s; returns their addresses."""
        if now is None:
            now = self._clock()
        expired: list[str] = []
        for broker_addr, live in list(self.broker_live_table.items()):
            if live.last_update_timestamp + BROKER_CHANNEL_EXPIRED_TIME_MS < now:
                del self.broker_live_table[broker_addr]
                log.warning(
                    "The broker channel expired, %s %dms (silent %dms)",
                    broker_addr, BROKER_CHANNEL_EXPIRED_TIME_MS, now - live.last_update_timestamp,
                )
                self._on_broker_gone(broker_addr)
                expired.append(broker_addr)
        return expired

    def _on_broker_gone(self, broker_addr: str) -> None:
        """Drop an address from its group; a group left with no address leaves entirely.

        A master that goes leaves its slave in the route (consumers keep reading), and the
        group's queue data stays, but without a brokerId 0 producers have nowhere to write.
        """
        for broker_data in list(self.broker_addr_table.values()):
            for broker_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr:
                    del broker_data.broker_addrs[broker_id]
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_data)

    def _remove_broker_name(self, broker_data: BrokerData) -> None:
        broker_name = broker_data.broker_name
        self.broker_addr_table.pop(broker_name, None)
        self._queue_data_from.pop(broker_name, None)
        self._remove_from_cluster(broker_data.cluster, broker_name)
        for topic, queue_datas in list(self.topic_queue_table.items()):
            if queue_datas.pop(broker_name, None) is not None and not queue_datas:
                del self.topic_queue_table[topic]

    def _remove_from_cluster(self, cluster_name: str, broker_name: str) -> None:
        broker_names = self.cluster_addr_table.get(cluster_name)
        if broker_names is None:
            return
        broker_names.discard(broker_name)
        if not broker_names:
            del self.cluster_addr_table[cluster_name]

    # ------------------------------------------------------------------- queries

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """QueueDatas and BrokerDatas of a topic; None when the topic does not exist."""
        queue_datas = self.topic_queue_table.get(topic)
        if not queue_datas:
            return None
        names = sorted(queue_datas)
        broker_datas = [
            self.broker_addr_table[name].copy() for name in names if name in self.broker_addr_table
        ]
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=[queue_datas[name] for name in names], broker_datas=broker_datas
        )

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={name: bd.copy() for name, bd in self.broker_addr_table.items()},
            cluster_addr_table={name: set(bns) for name, bns in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        """The data version of a broker's last registration."""
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None
