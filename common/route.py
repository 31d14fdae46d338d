"""Route entries as the name servers keep them and clients read them (RocketMQ's QueueData,
BrokerData, TopicRouteData): pure values, shared by the name server, the broker and clients."""

from __future__ import annotations

import dataclasses

from common.constants import MASTER_ID


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


@dataclasses.dataclass(frozen=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
