"""The name server's route tables: RocketMQ's RouteInfoManager, pure and synchronous.

Four tables (SPEC §3):

- ``topic_queue_table``: topic -> brokerName -> QueueData
- ``broker_addr_table``: brokerName -> BrokerData (cluster, brokerName, brokerId -> address)
- ``cluster_addr_table``: cluster -> brokerNames
- ``broker_live_table``: broker address -> BrokerLiveInfo

Besides them, ``broker_topics`` keeps each group's queue data as its master last registered
it (brokerName -> topic -> QueueData), so a new table changes ``topic_queue_table`` by its
difference only: `diff_queue_data` (pure, may run in a worker thread: it only reads
dictionaries the loop replaces, never changes; the processor compares large tables by
slices itself and makes the diff with `queue_data_diff`) and `apply_queue_data_diff` (on
the loop, O(changes)). ``route_entries`` caches what a batched route lookup answers per topic; it is
dropped for a topic whenever its queue data change.

Nothing here touches the network or the event loop; time comes from an injected clock
returning milliseconds, so tests drive the 120 s expiry without waiting.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from common.constants import MASTER_ID, PERM_WRITE
from common.route import BrokerData, QueueData, TopicRouteData
from nameserver.constants import BROKER_CHANNEL_EXPIRED_TIME_MS

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


@dataclasses.dataclass
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    ha_server_addr: str
    peer: str = ""  # the connection the last registration came over ("" when unknown)
    remoting_addr: str = ""  # where RocketMQ 4.x clients reach the broker ("" : nowhere)


@dataclasses.dataclass(frozen=True)
class RegisterBrokerResult:
    """For a slave: its master's broker address and HA address ("" when no live master)."""

    master_addr: str = ""
    ha_server_addr: str = ""


@dataclasses.dataclass(frozen=True)
class QueueDataDiff:
    """How a group's new topic table differs from `base`, the table it was computed from."""

    base: dict[str, QueueData]
    table: dict[str, QueueData]
    upserts: list[tuple[str, QueueData]]
    removals: list[str]


_NO_TOPICS: dict[str, QueueData] = {}  # a group without a table (never changed)


def queue_data_table(broker_name: str, topic_configs: Iterable[TopicConfig], *,
                     read_only: bool = False) -> dict[str, QueueData]:
    """A master's topic table as its group's queue data (pure); a prime slave's is
    `read_only` (nothing can be written to a group without a master)."""
    mask = ~PERM_WRITE if read_only else -1
    return {c.topic_name: QueueData(broker_name, c.read_queue_nums, c.write_queue_nums,
                                    c.perm & mask, c.topic_sys_flag) for c in topic_configs}


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
        # brokerName -> topic -> QueueData; each value replaced whole, never changed.
        self.broker_topics: dict[str, dict[str, QueueData]] = {}
        # topic -> what a batched route lookup answers for it, serialized, and the broker
        # names in it (set by the processor).
        self.route_entries: dict[str, tuple[bytes, frozenset[str]]] = {}
        # brokerName -> the address whose topic table the group's queue data is.
        self._queue_data_from: dict[str, str] = {}

    # ------------------------------------------------------------------ register

    def is_prime_slave(self, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """A slave of a group without a master, of the lowest id in it (RocketMQ 5): its
        topic table makes the group's queue data, read-only, so that a group whose master
        and slaves all went and whose slave came back alone is readable again (what only
        that slave stores would never be consumed)."""
        if broker_id == MASTER_ID:
            return False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return True
        addrs = broker_data.broker_addrs
        return MASTER_ID not in addrs and all(
            broker_id <= other for other, addr in addrs.items() if addr != broker_addr)

    def needs_table(self, broker_addr: str, broker_name: str, broker_id: int,
                    data_version: DataVersion) -> bool:
        """Whether this registration's topic table would change the group's queue data: a
        master's (or prime slave's) whose data version changed, that registers at this
        address first, or whose table the queue data is not yet."""
        if broker_id != MASTER_ID and not self.is_prime_slave(broker_addr, broker_name,
                                                              broker_id):
            return False
        return (self._queue_data_from.get(broker_name) != broker_addr
                or not self.holds_version(broker_addr, broker_name, broker_id, data_version))

    def holds_version(self, broker_addr: str, broker_name: str, broker_id: int,
                      data_version: DataVersion) -> bool:
        """Whether the broker's last registration here had this data version, at this
        address (a keep-alive without the table is enough)."""
        broker_data = self.broker_addr_table.get(broker_name)
        live = self.broker_live_table.get(broker_addr)
        return (broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr
                and live is not None and live.data_version == data_version)

    def queue_data_of(self, broker_name: str) -> dict[str, QueueData]:
        """The group's queue data as its master last registered it (never changed: a new
        table replaces it whole)."""
        return self.broker_topics.get(broker_name, _NO_TOPICS)

    def diff_queue_data(self, broker_name: str, table: dict[str, QueueData]) -> QueueDataDiff:
        """The changes that make the group's queue data `table` (pure: any thread)."""
        base = self.queue_data_of(broker_name)
        get = base.get
        return self.queue_data_diff(base, table,
                                    [(t, qd) for t, qd in table.items() if get(t) != qd])

    @staticmethod
    def queue_data_diff(base: dict[str, QueueData], table: dict[str, QueueData],
                        upserts: list[tuple[str, QueueData]]) -> QueueDataDiff:
        """The diff from `base` to `table`, given its `upserts` (the topics of `table` new or
        changed in it): the removals added."""
        added = sum(1 for t, _ in upserts if t not in base)
        # Every topic of `table` not added was in `base`: the rest of `base` is removed.
        removed = len(base) - (len(table) - added)
        removals = [t for t in base if t not in table] if removed > 0 else []
        return QueueDataDiff(base, table, upserts, removals)

    def apply_queue_data_diff(self, broker_name: str, diff: QueueDataDiff,
                              start: int = 0, stop: int | None = None, *,
                              source_addr: str = "") -> bool:
        """Applies upserts[start:stop] (and, with the last part, the removals: the queue
        data is then `source_addr`'s table); False when the group's table changed since
        the diff was computed (nothing applied: diff again)."""
        if self.broker_topics.get(broker_name, _NO_TOPICS) is not diff.base:
            return False
        table, entries = self.topic_queue_table, self.route_entries
        for topic, queue_data in diff.upserts[start:stop]:
            queue_datas = table.get(topic)
            if queue_datas is None:
                queue_datas = table[topic] = {}
            queue_datas[broker_name] = queue_data
            entries.pop(topic, None)
        if stop is None or stop >= len(diff.upserts):
            for topic in diff.removals:
                queue_datas = table.get(topic)
                if queue_datas is not None and queue_datas.pop(broker_name, None) is not None:
                    entries.pop(topic, None)
                    if not queue_datas:
                        del table[topic]
            self.broker_topics[broker_name] = diff.table
            self._queue_data_from[broker_name] = source_addr
            if diff.upserts or diff.removals:
                log.debug("queue data of %s: %d topics added or changed, %d removed "
                         "(%d topics)", broker_name, len(diff.upserts), len(diff.removals),
                         len(diff.table))
        return True

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
        remoting_addr: str = "",
    ) -> RegisterBrokerResult:
        """Add or refresh one broker; also the 30 s heartbeat.

        ``topic_configs`` is the broker's whole topic table (None: taken already, see
        the processor): it becomes the group's queue data when `needs_table` says so (a
        master's, or a prime slave's read-only).
        """
        needs_table = topic_configs is not None and self.needs_table(
            broker_addr, broker_name, broker_id, data_version)
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

        prev_live = self.broker_live_table.get(broker_addr)
        if needs_table and topic_configs is not None:
            self._rebuild_queue_data(broker_name, topic_configs,
                                     read_only=broker_id != MASTER_ID, source_addr=broker_addr)

        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update_timestamp=self._clock(),
            data_version=data_version,
            ha_server_addr=ha_server_addr,
            peer=peer,
            remoting_addr=remoting_addr,
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
                            read_only: bool, source_addr: str) -> None:
        """Make the group's queue data exactly the topic table of its master (or prime
        slave: `read_only`) at `source_addr`, all at once (the processor applies large
        tables by parts)."""
        table = queue_data_table(broker_name, topic_configs, read_only=read_only)
        diff = self.diff_queue_data(broker_name, table)
        applied = self.apply_queue_data_diff(broker_name, diff, source_addr=source_addr)
        assert applied

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
        self.broker_topics.pop(broker_name, None)
        for topic, queue_datas in list(self.topic_queue_table.items()):
            if queue_datas.pop(broker_name, None) is not None:
                self.route_entries.pop(topic, None)
                if not queue_datas:
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
