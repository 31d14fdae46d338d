"""What a request processor or service sees of its broker: `BrokerContext`.

The controller (broker/controller.py) builds one once the store is loaded and hands it to
the send, pull, admin and messaging processors, the transaction service, the metrics, the
slave's synchronizer and the v2 endpoint (proxy/); none of them sees the controller. A test
builds one around a store of its own (tests/support/context.py) and calls a processor
without booting a broker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from broker.status import RequestError
from mqproto import common_pb2

if TYPE_CHECKING:
    from broker.clients import ClientManager
    from broker.config import BrokerConfig
    from broker.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
    from broker.convert import UniqKeyFactory
    from broker.message_filter import FilterRegistry
    from broker.pull import PullRequestHoldService
    from broker.putting import MessagePutter
    from broker.schedule import ScheduleMessageService
    from broker.stats import BrokerStats
    from broker.topic_config import Clock, TopicConfig, TopicConfigManager
    from broker.transaction import ProducerCheckStreams, TransactionalMessageService
    from ha.master import HAService
    from ha.slave import HAClient
    from mqproto import messaging_pb2
    from store.config import StoreConfig
    from store.message_store import DefaultMessageStore


@dataclasses.dataclass(eq=False)
class BrokerAddresses:
    """Where this broker serves and whom it follows; "" for what it does not serve (yet).
    Set by the controller as it binds; read by the processors that answer with them."""

    broker_addr: str = ""  # the gRPC port, as registered with the name servers
    ha_server_addr: str = ""  # where slaves connect (a master's)
    send_channel_addr: str = ""  # empty: none (sendChannelEnable=false)
    metrics_addr: str = ""  # HOST:PORT of /metrics; empty: off (metricsPort=0)
    grpc_proxy_addr: str = ""  # RocketMQ 5's gRPC endpoint (proxy/); empty: none
    remoting_addr: str = ""  # RocketMQ 4.x clients' port (broker/remoting4x); empty: none
    master_addr: str = ""  # a slave's master, as the name servers answer


@dataclasses.dataclass(eq=False)
class BrokerContext:
    """One broker's configuration, clock, loaded store and tables, its clients, the
    put-then-replicate policy and its addresses.

    `topics_changed` persists the topic table and registers again soon (call it after any
    topic change). The services a role or a setting adds (`ha_service` on a master,
    `ha_client` on a slave, `schedule` and `transactions` on a master) are None until the
    controller starts them."""

    config: BrokerConfig
    store_config: StoreConfig
    clock_ms: Clock
    store: DefaultMessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetManager
    stats: BrokerStats
    clients: ClientManager
    filters: FilterRegistry
    pull_hold: PullRequestHoldService
    putter: MessagePutter
    topics_changed: Callable[[], Awaitable[None]]
    check_streams: ProducerCheckStreams[messaging_pb2.CheckTransactionStateRequest]
    store_host: tuple[str, int]
    uniq_key: UniqKeyFactory
    addresses: BrokerAddresses = dataclasses.field(default_factory=BrokerAddresses)
    ha_service: HAService | None = None
    ha_client: HAClient | None = None
    schedule: ScheduleMessageService | None = None
    transactions: TransactionalMessageService | None = None
    boot_timestamp: int = 0  # ms, when it began serving

    def config_write_failed(self, err: OSError, path: Path) -> bool:
        """A config file (topics.json, consumerOffset.json, ...) could not be written: True
        when for lack of space, which becomes the store's disk-full state (puts refused
        until space is back, one log line); the file is written again later by its periodic
        persistence or the next change."""
        root = Path(self.store_config.store_path_root_dir)
        what = path.relative_to(root) if path.is_relative_to(root) else path
        return self.store.disk_full.report(err, f"cannot write {what}")

    def master_available(self) -> bool:
        """A slave's view: its HA link to the master is up (a master is its own master)."""
        if not self.config.is_slave:
            return True
        return self.ha_client is not None and self.ha_client.status.connected

    def slave_read_allowed(self) -> bool:
        """A slave serves pulls when slaveReadEnable, or when its master is gone."""
        return (not self.config.is_slave or self.config.slave_read_enable
                or not self.master_available())

    def check_queue(self, topic: str, queue_id: int) -> TopicConfig:
        config = self.topics.get(topic)
        if config is None:
            raise RequestError(common_pb2.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if not 0 <= queue_id < config.queue_nums:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"queueId[{queue_id}] is illegal, topic {topic} has queues "
                               f"0..{config.queue_nums - 1} on this broker")
        return config

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Stores a consumer offset after checking it lies within the queue."""
        if not group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "consumer_group is required")
        self.check_queue(topic, queue_id)
        max_offset = self.store.get_max_offset_in_queue(topic, queue_id)
        if not 0 <= offset <= max_offset:
            min_offset = self.store.get_min_offset_in_queue(topic, queue_id)
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"offset {offset} out of range for {topic}-{queue_id}: the "
                               f"queue holds [{min_offset}, {max_offset}]")
        self.offsets.commit_offset(group, topic, queue_id, offset)
