"""What the admin API (mqclient.admin) returns: plain dataclasses, printable as tables and
as JSON (dataclasses.asdict)."""

from __future__ import annotations

import dataclasses

from common.route import QueueData
from mqclient.route import BrokerGroup


class AdminError(Exception):
    """An admin operation failed; the message is one line for a person."""


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    groups: dict[str, BrokerGroup]  # by brokerName
    clusters: dict[str, list[str]]  # clusterName -> brokerNames

    def groups_of(self, cluster: str) -> list[BrokerGroup]:
        if cluster not in self.clusters:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise AdminError(f"cluster {cluster} not found (clusters: {known})")
        return [self.groups[n] for n in self.clusters[cluster] if n in self.groups]

    def all_groups(self) -> list[BrokerGroup]:
        return [self.groups[n] for n in sorted(self.groups)]

    def group_of_addr(self, addr: str) -> BrokerGroup | None:
        return next((g for g in self.groups.values() if addr in g.addrs.values()), None)


@dataclasses.dataclass(frozen=True)
class TopicRoute:
    topic: str
    queue_datas: list[QueueData]
    broker_groups: list[BrokerGroup]

    def group(self, broker_name: str) -> BrokerGroup:
        for g in self.broker_groups:
            if g.broker_name == broker_name:
                return g
        raise AdminError(f"broker {broker_name} does not serve topic {self.topic}")


@dataclasses.dataclass(frozen=True)
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_updated_ms: int  # store time of the newest message, 0 when empty


@dataclasses.dataclass(frozen=True)
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int  # -1: the group never committed an offset for this queue
    diff: int  # messages not consumed: broker offset - max(consumer offset, min offset)
    last_timestamp_ms: int  # store time of the last consumed message, 0 if none
    first_unconsumed_timestamp_ms: int = 0  # store time of the first unconsumed, 0 if none
    lag_seconds: float = 0.0  # the broker's time - first_unconsumed_timestamp_ms
    queue_min_offset: int = 0
    last_commit_timestamp_ms: int = 0  # the broker's time of the last commit, 0 if unknown
    lag_bytes: int = 0
    lag_bytes_exact: bool = True

    @property
    def committed(self) -> bool:
        return self.consumer_offset >= 0


@dataclasses.dataclass(frozen=True)
class ConsumerProgress:
    group: str
    queues: list[QueueProgress]
    consume_tps: float
    online_consumers: int = 0

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues)


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    group: str
    consumer_count: int
    consume_tps: float
    diff_total: int


@dataclasses.dataclass(frozen=True)
class BrokerRuntime:
    addr: str
    broker_name: str
    broker_id: int
    broker_role: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    dispatch_behind_bytes: int
    put_tps: float
    get_total_tps: float
    slave_ack_offsets: dict[str, int]
    table: dict[str, str]  # every value by its RocketMQ name
    snapshot_timestamp_ms: int = 0  # the broker's clock when it answered
    slaves: list[SlaveLink] = dataclasses.field(default_factory=list)  # a master's slaves


@dataclasses.dataclass(frozen=True)
class StoredMessage:
    """A message as a broker stored it (MessageExt)."""

    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    msg_id: str  # UNIQ_KEY
    offset_msg_id: str
    tags: str
    keys: list[str]
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    commit_log_offset: int
    store_size: int
    reconsume_times: int
    sys_flag: int  # less COMPRESSED once the body was decompressed
    body_error: str = ""  # why a body marked compressed could not be read (body: as stored)


@dataclasses.dataclass(frozen=True)
class SendResult:
    status: str  # SUCCESS, or FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
    broker_name: str
    broker_addr: str
    queue_id: int
    queue_offset: int
    msg_id: str
    offset_msg_id: str


@dataclasses.dataclass(frozen=True)
class SlaveLink:
    """A master's view of one slave of its group: a live link, or a slave whose link is
    down (its fall-behind growing from its last ack)."""

    addr: str  # the slave broker's address (the link's peer for a slave that never said it)
    ack_offset: int
    fall_behind_bytes: int
    fall_behind_seconds: float
    in_sync: bool
    transfer_bytes_per_s: int
    state: str  # connected, disconnected, or the problem that closed the link
    broker_id: int = -1  # -1: the slave never said its brokerId
    link_addr: str = ""
    connected: bool = True
    last_ack_timestamp_ms: int = 0


@dataclasses.dataclass(frozen=True)
class MasterLink:
    """A slave's view of its link to the master."""

    master_addr: str
    connected: bool
    max_offset: int
    transfer_bytes_per_s: int
    last_read_timestamp_ms: int
    state: str


@dataclasses.dataclass(frozen=True)
class BrokerUnreachable:
    """A broker the name servers list that did not answer (cluster-wide commands go on)."""

    broker_addr: str
    broker_name: str
    broker_id: int
    error: str


@dataclasses.dataclass(frozen=True)
class QueueOffsetReset:
    broker_name: str
    queue_id: int
    old_offset: int  # -1: the group had none
    new_offset: int


@dataclasses.dataclass(frozen=True)
class HAStatus:
    broker_addr: str
    broker_name: str
    master: bool
    master_commit_log_max_offset: int
    in_sync_slave_nums: int
    slaves: list[SlaveLink]
    master_link: MasterLink | None


@dataclasses.dataclass(frozen=True)
class PendingTransactions:
    """Half messages without an outcome on one master, for one producer group."""

    broker_name: str
    broker_addr: str
    producer_group: str
    pending: int
    oldest_born_timestamp_ms: int
    max_check_times: int
    online_producers: int



@dataclasses.dataclass(frozen=True)
class TraceView:
    """One trace record of a message (RocketMQ's TraceView): `trace_type` Pub, SubBefore,
    SubAfter or EndTransaction; `client_host` is the born host of the trace message (the
    client that wrote the record)."""

    trace_type: str
    msg_id: str
    group: str
    timestamp: int
    cost_time: int
    status: str  # success / failed
    topic: str
    tags: str
    keys: str
    store_host: str
    offset_msg_id: str
    client_host: str
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False
