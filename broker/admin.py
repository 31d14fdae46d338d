"""gRPC face of the broker's AdminService: topics, runtime info (SPEC §4), consume stats,
HA state and the tables a slave copies."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from broker import consume_stats, consumer_offsets
from broker.consumer_offsets import offset_key
from broker.status import RequestError, ok, rpc, status
from broker.topic_config import DataVersion, TopicConfig, config_problem
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2
from store.message import is_system_topic, topic_problem

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)
A = admin_pb2
Context = grpc.aio.ServicerContext
try:  # the installed distribution's version (runtime table's brokerVersion)
    BROKER_VERSION = importlib.metadata.version("pyrocketmq-cluster")
except importlib.metadata.PackageNotFoundError:
    BROKER_VERSION = "unknown"
DISPATCH_WAIT_S = 3.0  # MergeConsumerOffset waits this long at most for the dispatch


def topic_config_to_proto(c: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(topic_name=c.topic_name, read_queue_nums=c.read_queue_nums,
                                  write_queue_nums=c.write_queue_nums, perm=c.perm,
                                  topic_sys_flag=c.topic_sys_flag, order=c.order)


def topic_config_from_proto(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(pb.topic_name, pb.read_queue_nums, pb.write_queue_nums, pb.perm,
                       pb.topic_sys_flag, pb.order)


def data_version_to_proto(v: DataVersion) -> common_pb2.DataVersion:
    return common_pb2.DataVersion(timestamp=v.timestamp, counter=v.counter)


def earliest_message_store_timestamp(broker: BrokerContext) -> int:
    store = broker.store
    if store.min_phy_offset >= store.max_phy_offset:
        return 0
    ext = store.look_message_by_offset(store.min_phy_offset)
    return ext.store_timestamp if ext is not None else 0


def slave_ack_offsets(broker: BrokerContext) -> dict[str, int]:
    """Per live slave link (by the slave's address): the slave's last ack offset."""
    service = broker.ha_service
    if service is None:
        return {}
    return {c.status.broker_addr or c.status.address: c.status.ack_offset
            for c in service.connections if c.listed}


def ha_connection_infos(broker: BrokerContext) -> list[A.HAConnectionRuntimeInfo]:
    """A master's slaves: live links, absent slaves of the group (fall-behind growing), then
    recently closed links of slaves that never said who they are (state says why)."""
    service = broker.ha_service
    if service is None:
        return []
    return [A.HAConnectionRuntimeInfo(
        addr=s.broker_addr or s.address, slave_broker_id=s.broker_id, link_addr=s.address,
        connected=s.connected, slave_ack_offset=s.ack_offset, diff=s.fall_behind_bytes,
        fall_behind_seconds=s.fall_behind_seconds, in_sync=s.in_sync,
        last_ack_timestamp=s.last_ack_time_ms,
        transferred_byte_in_second=int(s.transfer_rate), transfer_from_where=s.transfer_from,
        state=s.problem or ("connected" if s.connected else "disconnected"))
        for s in service.slave_statuses()]


def ha_client_info(broker: BrokerContext) -> A.HAClientRuntimeInfo | None:
    """A slave's link to its master; None on a master."""
    client = broker.ha_client
    if client is None:
        return None
    st = client.status
    now_ms = broker.clock_ms()

    def wall_ms(t: float) -> int:  # the client's monotonic clock -> the broker's wall clock
        return now_ms - int((client.clock() - t) * 1000) if t else 0

    return A.HAClientRuntimeInfo(
        master_addr=st.master_address, connected=st.connected,
        max_offset=broker.store.max_phy_offset,
        transferred_byte_in_second=int(client.received.rate()),
        last_read_timestamp=wall_ms(st.last_read_time),
        last_write_timestamp=wall_ms(st.last_report_time),
        state=st.last_error if not st.connected else "connected",
        connect_count=st.connect_count)


def ha_runtime_entries(broker: BrokerContext) -> dict[str, str]:
    """HA figures of the runtime table (text, for tools that print the table); fall-behind
    counts every slave of the group, connected or not."""
    slaves = [c for c in ha_connection_infos(broker) if c.connected or c.slave_broker_id > 0]
    if broker.ha_service is not None:
        return {
            "haInSyncSlaveNums": str(sum(1 for c in slaves if c.in_sync)),
            "haSlaveNums": str(len(slaves)),
            "haSlaveFallBehindBytesMax": str(max((c.diff for c in slaves), default=0)),
            "haSlaveFallBehindSecondsMax":
                f"{max((c.fall_behind_seconds for c in slaves), default=0.0):.3f}",
            "haTransferredBytesPerSecond": str(sum(c.transferred_byte_in_second
                                                   for c in slaves)),
        }
    info = ha_client_info(broker)
    if info is None:
        return {}
    return {
        "haMasterAddr": info.master_addr,
        "haMasterConnected": str(info.connected).lower(),
        "haAckOffset": str(info.max_offset),
        "haReceivedBytesPerSecond": str(info.transferred_byte_in_second),
    }


def runtime_table(broker: BrokerContext) -> dict[str, str]:
    """Every runtime value by its RocketMQ name, as text (GetRuntimeInfo.table)."""
    stats = broker.stats
    table = dict(broker.store.runtime_info())
    table.update({
        "brokerVersion": BROKER_VERSION,
        "brokerName": broker.config.broker_name,
        "brokerId": str(broker.config.broker_id),
        "brokerAddr": broker.addresses.broker_addr,
        "brokerRole": broker.config.broker_role.value,
        "clusterName": broker.config.broker_cluster_name,
        "haServerAddr": broker.addresses.ha_server_addr,
        "grpcProxyAddr": broker.addresses.grpc_proxy_addr,
        "remotingAddr": broker.addresses.remoting_addr,
        "metricsAddr": broker.addresses.metrics_addr,
        "bootTimestamp": str(broker.boot_timestamp),
        "putTps": f"{stats.put_tps():.2f}",
        "getTotalTps": f"{stats.get_total_tps():.2f}",
        "msgPutTotal": str(stats.put_total),
        "msgGetTotal": str(stats.get_total),
        "earliestMessageTimeStamp": str(earliest_message_store_timestamp(broker)),
        "topicCount": str(len(broker.topics.table)),
        "topicDataVersion": f"{broker.topics.data_version.timestamp}:"
                            f"{broker.topics.data_version.counter}",
        "pullHoldCount": str(len(broker.pull_hold)),
    })
    table.update(ha_runtime_entries(broker))
    return table


def _all_consumer_offsets(table: dict[str, dict[int, int]], version: common_pb2.DataVersion
                          ) -> bytes:
    """GetAllConsumerOffset's answer, serialized, from a copy of the offset table (any
    thread: one entry per committed queue, added one by one so that the GIL, and the
    event loop, is never held for all of them)."""
    response = A.GetAllConsumerOffsetResponse(status=ok(), data_version=version)
    add = response.offset_table.add
    for t, g, q, o in consumer_offsets.table_entries(table):
        add(topic=t, consumer_group=g, queue_id=q, offset=o)
    return response.SerializeToString()


RESET_TARGETS = (A.RESET_TO_TIMESTAMP, A.RESET_TO_EARLIEST, A.RESET_TO_LATEST)


def _reset_offsets(broker: BrokerContext, topic: str, committed: dict[int, int],
                   read_queue_nums: int, target: int, timestamp: int) -> dict[int, int]:
    """The offset each queue (committed on, or 0 .. read_queue_nums - 1) is reset to
    (reads the store: run in a worker thread)."""
    store = broker.store
    queue_ids = sorted(set(committed).union(range(read_queue_nums)))
    if target == A.RESET_TO_EARLIEST:
        return {q: store.get_min_offset_in_queue(topic, q) for q in queue_ids}
    if target == A.RESET_TO_LATEST:
        return {q: store.get_max_offset_in_queue(topic, q) for q in queue_ids}
    return {q: store.get_offset_in_queue_by_time(topic, q, timestamp) for q in queue_ids}


def create_problem(config: TopicConfig, max_queue_nums: int, cluster_name: str) -> str | None:
    """Why an admin may not create or update `config` on this broker, or None."""
    problem = config_problem(config, max_queue_nums)
    if problem is not None:
        return problem
    if is_system_topic(config.topic_name):
        return f"the topic[{config.topic_name}] is conflict with system topic"
    if config.topic_name == cluster_name:
        return (f"the topic[{config.topic_name}] is conflict with system reserved words "
                "(the cluster name)")
    return None


def checked_configs(pbs: list[common_pb2.TopicConfig], max_queue_nums: int,
                    cluster_name: str) -> list[TopicConfig]:
    """The configs of a batch create, each checked (any thread: pure); RequestError naming
    the first refused one, or a topic listed twice."""
    out: list[TopicConfig] = []
    seen: set[str] = set()
    for pb in pbs:
        config = topic_config_from_proto(pb)
        problem = create_problem(config, max_queue_nums, cluster_name)
        if problem is None and config.topic_name in seen:
            problem = f"topic {config.topic_name} is listed twice"
        if problem is not None:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"{problem}; no topic of the batch was created")
        seen.add(config.topic_name)
        out.append(config)
    return out


BATCH_APPLY_CHUNK = 5000  # topics put into the table per loop turn


def _topic_list(configs: list[TopicConfig], version: DataVersion) -> bytes:
    """GetTopicList's answer, serialized (any thread), by topic name."""
    configs.sort(key=lambda c: c.topic_name)
    return A.GetTopicListResponse(
        status=ok(), topic_configs=[topic_config_to_proto(c) for c in configs],
        data_version=data_version_to_proto(version)).SerializeToString()


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    # -- topics ----------------------------------------------------------------------------
    @rpc(A.CreateOrUpdateTopicResponse)
    async def CreateOrUpdateTopic(self, request: A.CreateOrUpdateTopicRequest,
                                  context: Context) -> Any:
        config = topic_config_from_proto(request.topic_config)
        problem = create_problem(config, self.broker.config.max_topic_queue_nums,
                                 self.broker.config.broker_cluster_name)
        if problem is not None:
            raise RequestError(common_pb2.INVALID_PARAMETER, problem)
        self.broker.topics.update(config)
        await self.broker.topics_changed()
        return A.CreateOrUpdateTopicResponse(status=ok())

    @rpc(A.CreateOrUpdateTopicsResponse)
    async def CreateOrUpdateTopics(self, request: A.CreateOrUpdateTopicsRequest,
                                   context: Context) -> Any:
        """Checked whole in a worker thread, put into the table a chunk per loop turn, then
        one write of topics.json and one registration."""
        c = self.broker.config
        configs = await asyncio.to_thread(checked_configs, list(request.topic_configs),
                                          c.max_topic_queue_nums, c.broker_cluster_name)
        created = updated = 0
        for start in range(0, len(configs), BATCH_APPLY_CHUNK):
            if start:
                await asyncio.sleep(0)
            n_created, n_updated = self.broker.topics.update_many(
                configs[start:start + BATCH_APPLY_CHUNK])
            created += n_created
            updated += n_updated
        if created or updated:
            await self.broker.topics_changed()
        return A.CreateOrUpdateTopicsResponse(status=ok(), created=created, updated=updated)

    @rpc(A.DeleteTopicResponse)
    async def DeleteTopic(self, request: A.DeleteTopicRequest, context: Context) -> Any:
        if self.broker.topics.is_broker_topic(request.topic):
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"the topic[{request.topic}] is a system topic of this broker "
                               "and cannot be deleted; nothing changed")
        if not self.broker.topics.delete(request.topic):
            return A.DeleteTopicResponse(status=status(
                common_pb2.TOPIC_NOT_EXIST, f"topic[{request.topic}] not exist"))
        self.broker.offsets.clean_topic(request.topic)
        await self.broker.topics_changed()
        return A.DeleteTopicResponse(status=ok())

    @rpc(A.GetTopicListResponse)
    async def GetTopicList(self, request: A.GetTopicListRequest, context: Context) -> Any:
        """Built and serialized in a worker thread from a copy of the table (a slave asks
        every 10 s; tens of thousands of topics would hold the loop)."""
        topics = self.broker.topics
        return await asyncio.to_thread(_topic_list, list(topics.table.values()),
                                       topics.data_version)

    # -- runtime ---------------------------------------------------------------------------
    @rpc(A.GetRuntimeInfoResponse)
    async def GetRuntimeInfo(self, request: A.GetRuntimeInfoRequest, context: Context) -> Any:
        broker = self.broker
        store = broker.store
        return A.GetRuntimeInfoResponse(
            status=ok(),
            table=runtime_table(broker),
            broker_name=broker.config.broker_name,
            broker_id=broker.config.broker_id,
            broker_role=broker.config.broker_role.value,
            snapshot_timestamp=broker.clock_ms(),
            commit_log_min_offset=store.min_phy_offset,
            commit_log_max_offset=store.max_phy_offset,
            dispatch_behind_bytes=store.dispatch_behind_bytes,
            put_tps=broker.stats.put_tps(),
            get_total_tps=broker.stats.get_total_tps(),
            slave_ack_offsets=slave_ack_offsets(broker),
            earliest_message_store_timestamp=earliest_message_store_timestamp(broker),
            ha_connection_info=ha_connection_infos(broker),
            ha_client_info=ha_client_info(broker),
        )

    @rpc(A.GetConsumeStatsResponse)
    async def GetConsumeStats(self, request: A.GetConsumeStatsRequest,
                              context: Context) -> Any:
        broker = self.broker
        now = broker.clock_ms()
        group = request.consumer_group
        if group and group not in broker.offsets.groups() | set(broker.clients.consumer_groups):
            return A.GetConsumeStatsResponse(status=status(
                common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"the consumer group[{group}] not exist"), snapshot_timestamp=now)
        plans = consume_stats.plan(broker, group, request.topic)
        # Built and serialized in a worker thread (see remoting.serving: bytes pass as they
        # are): a topic's reply may be megabytes.
        return await asyncio.to_thread(consume_stats.serialized_response, broker.store,
                                       broker.config.broker_name, plans, now)

    @rpc(A.ResetOffsetResponse)
    async def ResetOffset(self, request: A.ResetOffsetRequest, context: Context) -> Any:
        broker = self.broker
        group, topic = request.consumer_group, request.topic
        if not group or not topic:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "consumer_group and topic are required")
        if request.target not in RESET_TARGETS:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"unknown reset target {request.target}")
        if broker.config.is_slave:
            raise RequestError(common_pb2.INVALID_PARAMETER, "this broker is a slave: reset "
                               "offsets on the master (the slave copies them)")
        config = broker.topics.get(topic)
        if config is None:
            raise RequestError(common_pb2.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        online = broker.clients.consumer_ids(group)
        if online and not request.force:
            return A.ResetOffsetResponse(status=status(
                common_pb2.CONSUMER_ONLINE,
                f"{len(online)} consumer(s) of group {group} are online "
                f"({', '.join(online[:3])}{', ...' if len(online) > 3 else ''}): stop them "
                "first, or force the reset (they then drop their queues and continue from "
                "the new offsets); nothing changed"))
        committed = dict(broker.offsets.offset_table.get(offset_key(topic, group), {}))
        new = await asyncio.to_thread(_reset_offsets, broker, topic, committed,
                                      config.read_queue_nums, request.target,
                                      request.timestamp)
        broker.offsets.reset_offsets(group, topic, new)
        await broker.offsets.persist_if_dirty()
        shown = list(new.items())[:16]
        log.info("offsets of group %s on topic %s reset (%s): %s%s", group, topic,
                 A.ResetOffsetTarget.Name(request.target),
                 ", ".join(f"{q}: {committed.get(q, -1)} -> {o}" for q, o in shown),
                 f", ... ({len(new)} queues)" if len(new) > len(shown) else "")
        if online:
            broker.clients.notify_reset(group, topic, broker.config.broker_name, new)
        return A.ResetOffsetResponse(status=ok(), queues=[
            A.QueueOffsetReset(queue_id=q, old_offset=committed.get(q, -1), new_offset=o)
            for q, o in new.items()])

    @rpc(A.GetHAStatusResponse)
    async def GetHAStatus(self, request: A.GetHAStatusRequest, context: Context) -> Any:
        broker = self.broker
        response = A.GetHAStatusResponse(
            status=ok(), master=not broker.config.is_slave,
            master_commit_log_max_offset=broker.store.max_phy_offset)
        links = ha_connection_infos(broker)
        response.in_sync_slave_nums = sum(1 for c in links if c.in_sync)
        response.ha_connection_info.extend(links)
        client = ha_client_info(broker)
        if client is not None:
            response.ha_client_info.CopyFrom(client)
        return response

    # -- tables a slave copies -------------------------------------------------------------
    @rpc(A.GetAllConsumerOffsetResponse)
    async def GetAllConsumerOffset(self, request: A.GetAllConsumerOffsetRequest,
                                   context: Context) -> Any:
        offsets = self.broker.offsets
        table = {key: dict(queues) for key, queues in offsets.offset_table.items()}
        version = data_version_to_proto(offsets.data_version)
        return await asyncio.to_thread(_all_consumer_offsets, table, version)

    @rpc(A.GetAllDelayOffsetResponse)
    async def GetAllDelayOffset(self, request: A.GetAllDelayOffsetRequest,
                                context: Context) -> Any:
        return A.GetAllDelayOffsetResponse(status=ok(),
                                           offset_table=self.broker.delay_offsets.offset_table)

    @rpc(A.RemoveHASlaveResponse)
    async def RemoveHASlave(self, request: A.RemoveHASlaveRequest, context: Context) -> Any:
        service = self.broker.ha_service
        if service is None or not service.remove_slave(request.broker_id):
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"no absent slave with brokerId {request.broker_id} on this "
                               "master (a connected slave is stopped first)")
        log.info("slave %d removed from the group by an admin", request.broker_id)
        return A.RemoveHASlaveResponse(status=ok())

    @rpc(A.MergeConsumerOffsetResponse)
    async def MergeConsumerOffset(self, request: A.MergeConsumerOffsetRequest,
                                  context: Context) -> Any:
        broker = self.broker
        topics = dict(broker.topics.table)  # a snapshot: checked in a worker thread
        entries = await asyncio.to_thread(_checked_offset_entries, broker.store, topics,
                                          list(request.offset_table))
        merged = broker.offsets.merge_larger(entries)
        if merged:
            log.info("merged %d larger consumer offsets reported by a slave", merged)
        return A.MergeConsumerOffsetResponse(status=ok(), merged=merged)

    @rpc(A.GetPendingTransactionsResponse)
    async def GetPendingTransactions(self, request: A.GetPendingTransactionsRequest,
                                     context: Context) -> Any:
        service = self.broker.transactions
        if service is None:
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE,
                               "transactions live on the master; this broker is a slave")
        summary = await service.current_summary(request.producer_group)
        return A.GetPendingTransactionsResponse(
            status=ok(), half_offset=summary.half_offset, op_offset=summary.op_offset,
            half_max_offset=summary.half_max_offset,
            groups=[A.PendingTransactionGroup(
                producer_group=g.producer_group, pending=g.pending,
                oldest_born_timestamp=g.oldest_born_timestamp,
                max_check_times=g.max_check_times, online_producers=g.online_producers)
                for g in summary.groups])


def _checked_offset_entries(store: Any, topics: dict[str, TopicConfig],
                            offset_table: list[A.ConsumerOffsetEntry]
                            ) -> list[tuple[str, str, int, int]]:
    """MergeConsumerOffset's entries, each checked against this broker's topics and
    queues (RequestError naming the first bad one: nothing is merged then); an offset past
    the queue's max offset is taken as the max, as RocketMQ corrects an offset that
    overflows. Reads the store: run in a worker thread."""
    # The max offsets are those of the messages stored before this call: wait (a little)
    # until they are dispatched to their queues, lest a just-stored message be missed.
    target, deadline = store.max_phy_offset, time.monotonic() + DISPATCH_WAIT_S
    while store.reput_from_offset < target and time.monotonic() < deadline:
        time.sleep(0.002)
    entries = []
    for i, e in enumerate(offset_table):
        config = topics.get(e.topic)
        problem = (topic_problem(e.topic)
                   or ("consumer_group is required" if not e.consumer_group else None)
                   or ("queue_id and offset must be >= 0" if e.queue_id < 0 or e.offset < 0
                       else None))
        if problem is None and config is None:
            problem = "the topic does not exist on this broker"
        if problem is None and config is not None and e.queue_id >= config.queue_nums:
            problem = f"the topic has queues 0..{config.queue_nums - 1} on this broker"
        if problem is not None:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"offset entry {i} ({e.topic}@{e.consumer_group} queue "
                               f"{e.queue_id} offset {e.offset}): {problem}; nothing merged")
        offset = min(e.offset, store.get_max_offset_in_queue(e.topic, e.queue_id))
        entries.append((e.topic, e.consumer_group, e.queue_id, offset))
    return entries
