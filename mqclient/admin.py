"""Admin API of the cluster (RocketMQ's DefaultMQAdminExt), over gRPC to the name servers and
brokers: cluster info, topics, consumer progress, runtime info, message queries, raw sends
and pulls, HA status.

Blocking calls (grpc's sync stubs), for tools and tests: never call it from an event loop.
Every failure is an AdminError whose message is one line naming what failed and why.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from acl.grpc_auth import ClientAuth
from common import codec as message_codec
from common.compression import COMPRESSED_FLAG, DecompressError, decompress_body
from common.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_READ, PERM_WRITE
from common.route import QueueData
from mqclient.admin_queries import TRANSACTION_STATUS, BrokerQuery, Row
from mqclient.admin_types import (
    AdminError,
    BrokerGroup,
    BrokerRuntime,
    BrokerUnreachable,
    ClusterInfo,
    ConsumerProgress,
    GroupSummary,
    HAStatus,
    MasterLink,
    PendingTransactions,
    QueueOffsetReset,
    QueueProgress,
    QueueStatus,
    SendResult,
    SlaveLink,
    StoredMessage,
    TopicRoute,
    TraceView,
)
from mqclient.codec import format_host
from mqclient.loop import CHANNEL_OPTIONS
from mqclient.message import SEND_STATUS_BY_CODE, code_name
from mqclient.route import split_addresses
from mqclient.trace import RMQ_SYS_TRACE_TOPIC, decode_trace_data
from mqproto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
)
from remoting.tls import ClientTls, grpc_channel, plaintext_hint

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"  # used when no address is given, as RocketMQ's tools do
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # MixAll.TOOLS_CONSUMER_GROUP: raw pulls of tools
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
DEFAULT_RPC_TIMEOUT_S = 5.0
PULL_BATCH = 32
QUERY_MAX_NUM = 64  # the broker answers at most this many messages per key query
# Results that mean "stored" although the requested durability is missing (SPEC §2.7).
STORED_CODES = frozenset(SEND_STATUS_BY_CODE)
T = TypeVar("T")
__all__ = ["AdminError", "MQAdmin", "decode_offset_msg_id", "parse_addresses"]


def parse_addresses(text: str | Sequence[str], *, allow_empty: bool = False) -> list[str]:
    """`host:port;host:port` or a list -> addresses; AdminError when one is not HOST:PORT."""
    try:
        addresses = split_addresses(text)
    except ValueError as e:
        raise AdminError(str(e)) from None
    if not addresses and not allow_empty:
        raise AdminError("no address given")
    return addresses


def decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int]:
    """offsetMsgId (SPEC §2.2: store host IP, port, commitlog offset in hex) ->
    (broker address, commitlog offset)."""
    try:
        store_host, offset = message_codec.decode_offset_msg_id(offset_msg_id)
    except ValueError:
        raise AdminError(f"{offset_msg_id!r} is not an offsetMsgId (32 or 56 hex digits)"
                         ) from None
    return format_host(*store_host), offset


def _message(pb: messaging_pb2.Message, broker_name: str) -> StoredMessage:
    """A stored message as the broker answered it, its body decompressed when marked
    COMPRESSED (else, with the reason in `body_error`, as stored)."""
    sp = pb.system_properties
    body, sys_flag, body_error = pb.body, sp.sys_flag, ""
    if sys_flag & COMPRESSED_FLAG:
        try:
            body, sys_flag = decompress_body(body, sys_flag), sys_flag & ~COMPRESSED_FLAG
        except DecompressError as e:
            body_error = str(e)
    return StoredMessage(
        topic=pb.topic, broker_name=broker_name, queue_id=sp.queue_id,
        queue_offset=sp.queue_offset, msg_id=sp.message_id, offset_msg_id=sp.offset_msg_id,
        tags=pb.tag, keys=list(pb.keys), body=body, properties=dict(pb.user_properties),
        born_timestamp=sp.born_timestamp, store_timestamp=sp.store_timestamp,
        born_host=sp.born_host, store_host=sp.store_host,
        commit_log_offset=sp.commit_log_offset, store_size=sp.store_size,
        reconsume_times=sp.reconsume_times, sys_flag=sys_flag, body_error=body_error)


def _group(pb: common_pb2.BrokerData) -> BrokerGroup:
    return BrokerGroup(pb.cluster, pb.broker_name, dict(sorted(pb.broker_addrs.items())))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _queue_progress(w: admin_pb2.OffsetWrapper, snapshot_ms: int) -> QueueProgress:
    start = max(w.consumer_offset, w.queue_min_offset)  # the first message not consumed
    diff = max(0, w.broker_offset - start)
    first = w.first_unconsumed_timestamp
    return QueueProgress(
        w.topic, w.broker_name, w.queue_id, w.broker_offset, w.consumer_offset, diff,
        w.last_timestamp, first_unconsumed_timestamp_ms=first,
        lag_seconds=max(0.0, (snapshot_ms - first) / 1000) if diff and first else 0.0,
        queue_min_offset=w.queue_min_offset, last_commit_timestamp_ms=w.last_commit_timestamp,
        lag_bytes=w.lag_bytes, lag_bytes_exact=w.lag_bytes_exact)


def _slave_link(c: admin_pb2.HAConnectionRuntimeInfo) -> SlaveLink:
    return SlaveLink(c.addr, c.slave_ack_offset, c.diff, c.fall_behind_seconds, c.in_sync,
                     c.transferred_byte_in_second, c.state, broker_id=c.slave_broker_id,
                     link_addr=c.link_addr, connected=c.connected,
                     last_ack_timestamp_ms=c.last_ack_timestamp)


# Reset targets of resetOffsetByTime (-s): a time, or one of these words.
RESET_EARLIEST = "earliest"
RESET_LATEST = "now"


# Cluster-wide commands ask this many brokers at once: each hung broker costs the command one
# timeout in all, not one each.
BROKERS_ASKED_AT_ONCE = 64
MIN_SECOND_CALL_TIMEOUT_S = 0.1
CREATE_TOPICS_CHUNK = 50_000  # topics per CreateOrUpdateTopics call (a few MiB)


class MQAdmin:
    """`MQAdmin("127.0.0.1:9876;127.0.0.1:9877")`; use as a context manager or close()."""

    def __init__(self, namesrv_addr: str | Sequence[str],
                 timeout: float = DEFAULT_RPC_TIMEOUT_S, *, access_key: str | None = None,
                 secret_key: str | None = None, tls_ca: str | None = None) -> None:
        """`access_key`/`secret_key`: an admin account of brokers with aclEnable (default
        $MQ_ACCESS_KEY / $MQ_SECRET_KEY); `tls_ca`: the CA of TLS servers (default
        $MQ_TLS_CA; none: plaintext)."""
        self.tls = ClientTls.from_env(tls_ca)
        try:
            self.auth = ClientAuth.from_env(access_key, secret_key)
        except ValueError as e:
            raise AdminError(str(e)) from None
        # Empty is allowed: commands aimed at one broker address need no name server.
        self.namesrv_addrs = parse_addresses(namesrv_addr, allow_empty=True)
        self.timeout = timeout
        self._channels: dict[str, grpc.Channel] = {}
        self._channels_lock = threading.Lock()  # cluster-wide calls ask brokers in parallel

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> MQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -------------------------------------------------------------------------
    def _channel(self, addr: str) -> grpc.Channel:
        with self._channels_lock:
            channel = self._channels.get(addr)
            if channel is None:
                channel = grpc_channel(
                    addr, self.tls, options=CHANNEL_OPTIONS)  # the clients' 200 ms - 2 s backoff
                if self.auth is not None:
                    channel = self.auth.intercept(channel)
                self._channels[addr] = channel
            return channel

    def each_broker(self, brokers: Sequence[tuple[str, str, int]],
                    ask: Callable[[str], T]) -> list[T | BrokerUnreachable]:
        """`ask(addr)` of each (broker name, address, id) at once; a broker that fails is a
        BrokerUnreachable in its place, so one broker down never hides the others."""
        def one(broker: tuple[str, str, int]) -> T | BrokerUnreachable:
            name, addr, broker_id = broker
            try:
                return ask(addr)
            except AdminError as e:
                return BrokerUnreachable(addr, name, broker_id, str(e))
        if not brokers:
            return []
        with concurrent.futures.ThreadPoolExecutor(min(BROKERS_ASKED_AT_ONCE,
                                                        len(brokers))) as pool:
            return list(pool.map(one, brokers))

    def cluster_brokers(self, cluster: str | None = None) -> list[tuple[str, str, int]]:
        """(broker name, address, id) of every broker of the cluster (of every cluster)."""
        info = self.cluster_info()
        groups = info.groups_of(cluster) if cluster is not None else info.all_groups()
        return [(g.broker_name, addr, broker_id) for g in groups
                for broker_id, addr in sorted(g.addrs.items())]

    def _call(self, what: str, addr: str, fn: Callable[..., T], request: Any,
              timeout: float | None = None) -> T:
        try:
            return fn(request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            code = e.code().name if isinstance(e, grpc.Call) else "ERROR"
            detail = _one_line(e.details() or "") if isinstance(e, grpc.Call) else str(e)
            hint = plaintext_hint(code, detail, self.tls)
            raise AdminError(f"{what} {addr}: {code}: {detail}{hint}") from None

    def _namesrv(self, method: str, request: Any) -> Any:
        """Asks each name server in turn until one answers."""
        if not self.namesrv_addrs:
            raise AdminError(f"no name server address: give -n HOST:PORT or set "
                             f"{NAMESRV_ADDR_ENV}")
        failures = []
        for addr in self.namesrv_addrs:
            stub = namesrv_pb2_grpc.NamesrvServiceStub(self._channel(addr))
            try:
                return self._call("name server", addr, getattr(stub, method), request)
            except AdminError as e:
                failures.append(str(e))
        raise AdminError("no name server answered: " + "; ".join(failures))

    def _admin_rpc(self, addr: str, method: str, request: Any,
                   timeout: float | None = None) -> Any:
        stub = admin_pb2_grpc.AdminServiceStub(self._channel(addr))
        return self._call("broker", addr, getattr(stub, method), request, timeout)

    def _messaging_rpc(self, addr: str, method: str, request: Any) -> Any:
        stub = messaging_pb2_grpc.MessagingServiceStub(self._channel(addr))
        return self._call("broker", addr, getattr(stub, method), request)

    @staticmethod
    def _check(status: common_pb2.Status, what: str, *ok: int) -> None:
        if status.code not in (ok or (common_pb2.SUCCESS,)):
            remark = f": {_one_line(status.remark)}" if status.remark else ""
            raise AdminError(f"{what} failed: {code_name(status.code)}{remark}")

    # -- name server -----------------------------------------------------------------------
    def cluster_info(self) -> ClusterInfo:
        r = self._namesrv("GetClusterInfo", namesrv_pb2.GetClusterInfoRequest())
        self._check(r.status, "cluster info")
        info = r.cluster_info
        groups = {name: _group(bd) for name, bd in sorted(info.broker_addr_table.items())}
        clusters = {name: sorted(s.broker_names)
                    for name, s in sorted(info.cluster_addr_table.items())}
        return ClusterInfo(groups, clusters)

    def topic_list(self) -> list[str]:
        r = self._namesrv("GetAllTopicList", namesrv_pb2.GetAllTopicListRequest())
        self._check(r.status, "topic list")
        return sorted(r.topic_list)

    def topic_route(self, topic: str) -> TopicRoute:
        r = self._namesrv("GetRouteInfoByTopic", namesrv_pb2.GetRouteInfoByTopicRequest(
            topic=topic))
        if r.status.code == common_pb2.TOPIC_NOT_EXIST:
            raise AdminError(f"topic {topic} not exist (no route on the name server)")
        self._check(r.status, f"route of topic {topic}")
        route = r.topic_route_data
        return TopicRoute(
            topic,
            [QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm,
                       q.topic_sys_flag) for q in route.queue_datas],
            [_group(b) for b in route.broker_datas])

    # -- topics ----------------------------------------------------------------------------
    def _readable_queues(self, route: TopicRoute, *, write_only_too: bool = False
                         ) -> list[tuple[BrokerGroup, int]]:
        out = []
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            group = route.group(q.broker_name)
            if q.perm & PERM_READ:
                out.extend((group, i) for i in range(q.read_queue_nums))
            elif write_only_too:  # e.g. a %DLQ% topic: its offsets are still of interest
                out.extend((group, i) for i in range(q.write_queue_nums))
        return out

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Min / max offset and last store time of every queue of a topic (the store time
        only of readable ones)."""
        out = []
        route = self.topic_route(topic)
        readable = {(g.broker_name, q) for g, q in self._readable_queues(route)}
        for group, queue_id in self._readable_queues(route, write_only_too=True):
            addr = group.read_addr
            lo = self._messaging_rpc(addr, "GetMinOffset", messaging_pb2.GetMinOffsetRequest(
                topic=topic, queue_id=queue_id))
            self._check(lo.status, f"min offset of {topic}-{queue_id} on {addr}")
            hi = self._messaging_rpc(addr, "GetMaxOffset", messaging_pb2.GetMaxOffsetRequest(
                topic=topic, queue_id=queue_id))
            self._check(hi.status, f"max offset of {topic}-{queue_id} on {addr}")
            last = 0
            if hi.offset > lo.offset and (group.broker_name, queue_id) in readable:
                newest = self._pull(addr, topic, queue_id, hi.offset - 1, 1).messages
                last = newest[0].system_properties.store_timestamp if newest else 0
            out.append(QueueStatus(group.broker_name, queue_id, lo.offset, hi.offset, last))
        return out

    def _master_addrs(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        if broker_addr is not None:
            return parse_addresses(broker_addr)
        info = self.cluster_info()
        groups = info.groups_of(cluster) if cluster is not None else info.all_groups()
        masters = [g.master_addr for g in groups if g.master_addr is not None]
        if not masters:
            raise AdminError(f"no live master in cluster {cluster}")
        return masters

    def create_topic(self, topic: str, *, cluster: str | None = None,
                     broker_addr: str | None = None, read_queue_nums: int = 8,
                     write_queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                     order: bool = False) -> list[str]:
        """Creates or updates the topic on one broker or on every master of a cluster (all
        clusters when neither is given); returns the brokers' addresses."""
        config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=read_queue_nums,
                                        write_queue_nums=write_queue_nums, perm=perm,
                                        order=order)
        addrs = self._master_addrs(cluster, broker_addr)
        for addr in addrs:
            r = self._admin_rpc(addr, "CreateOrUpdateTopic",
                             admin_pb2.CreateOrUpdateTopicRequest(topic_config=config))
            self._check(r.status, f"create topic {topic} on {addr}")
        return addrs

    def create_topics(self, topics: Sequence[str], *, cluster: str | None = None,
                      broker_addr: str | None = None, read_queue_nums: int = 8,
                      write_queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                      order: bool = False) -> list[str]:
        """Creates or updates many topics of one config with one CreateOrUpdateTopics call
        per broker (per CREATE_TOPICS_CHUNK topics), on one broker or on every master of a
        cluster (all clusters when neither is given); returns the brokers' addresses. A
        broker takes a call whole or refuses it whole."""
        names = list(topics)
        if not names:
            raise AdminError("no topic to create")
        seen: set[str] = set()
        for name in names:  # refused whole, as a broker refuses a batch (chunks hide some)
            if name in seen:
                raise AdminError(f"topic {name} is listed twice; no topic was created")
            seen.add(name)
        addrs = self._master_addrs(cluster, broker_addr)
        for addr in addrs:
            for start in range(0, len(names), CREATE_TOPICS_CHUNK):
                chunk = names[start:start + CREATE_TOPICS_CHUNK]
                request = admin_pb2.CreateOrUpdateTopicsRequest(topic_configs=[
                    common_pb2.TopicConfig(topic_name=t, read_queue_nums=read_queue_nums,
                                           write_queue_nums=write_queue_nums, perm=perm,
                                           order=order) for t in chunk])
                r = self._admin_rpc(addr, "CreateOrUpdateTopics", request,
                                    self.timeout + len(chunk) / 5_000)
                self._check(r.status, f"create {len(chunk)} topics (from {chunk[0]}) on {addr}")
        return addrs

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Deletes the topic from every master of the cluster (of its route when no cluster
        is given); returns the brokers it was deleted from."""
        if cluster is None:
            addrs = [g.master_addr for g in self.topic_route(topic).broker_groups
                     if g.master_addr is not None]
        else:
            addrs = self._master_addrs(cluster, None)
        deleted = [addr for addr in addrs if self.delete_topic_at(addr, topic)]
        if not deleted:
            raise AdminError(f"topic {topic} not exist on any master of cluster {cluster}")
        return deleted

    def delete_topic_at(self, addr: str, topic: str) -> bool:
        """Deletes the topic (and the consumer offsets on it) on the master at `addr`; False
        when that master has no such topic."""
        r = self._admin_rpc(addr, "DeleteTopic", admin_pb2.DeleteTopicRequest(topic=topic))
        self._check(r.status, f"delete topic {topic} on {addr}", common_pb2.SUCCESS,
                    common_pb2.TOPIC_NOT_EXIST)
        return r.status.code == common_pb2.SUCCESS

    # -- consumers -------------------------------------------------------------------------
    def _consume_stats(self, addr: str, group: str, topic: str
                       ) -> admin_pb2.GetConsumeStatsResponse:
        r = self._admin_rpc(addr, "GetConsumeStats", admin_pb2.GetConsumeStatsRequest(
            consumer_group=group, topic=topic))
        self._check(r.status, f"consume stats of {group or 'all groups'} on {addr}",
                    common_pb2.SUCCESS, common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST)
        return r

    def _has_offsets(self, addr: str | None, group: str, topic: str) -> bool:
        """Whether the group committed an offset on some queue of the topic at `addr`."""
        assert addr is not None
        r = self._consume_stats(addr, group, topic)
        return r.status.code == common_pb2.SUCCESS and any(
            w.consumer_offset >= 0 for s in r.consume_stats for w in s.offset_table)

    def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int,
                               offset: int) -> None:
        """Commits a group's offset on one broker, as a consumer does."""
        r = self._messaging_rpc(addr, "UpdateConsumerOffset",
                                messaging_pb2.UpdateConsumerOffsetRequest(
                                    consumer_group=group, topic=topic, queue_id=queue_id,
                                    commit_offset=offset))
        self._check(r.status, f"commit offset {offset} of {group} on {topic}-{queue_id} at "
                    f"{addr}")

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue: broker offset, committed offset (-1: never), diff, lag in seconds (the
        age of the first unconsumed message) and the last consumed store time."""
        groups = (self.topic_route(topic).broker_groups if topic
                  else self.cluster_info().all_groups())
        queues: list[QueueProgress] = []
        tps = 0.0
        online = 0
        known = False
        for g in groups:
            r = self._consume_stats(g.read_addr, group, topic or "")
            if r.status.code != common_pb2.SUCCESS:
                continue
            known = True
            for stats in r.consume_stats:
                tps += stats.consume_tps
                online = max(online, stats.online_consumers)
                queues.extend(_queue_progress(w, r.snapshot_timestamp)
                              for w in stats.offset_table)
        if not known:
            raise AdminError(f"consumer group {group} not exist (no broker has its offsets "
                             "or an online consumer of it)")
        queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return ConsumerProgress(group, queues, tps, online)

    def group_progress_at(self, addr: str, group: str) -> ConsumerProgress | None:
        """The group's progress on the queues of the broker at `addr` (None: the broker
        knows no such group): one RPC, for tools that ask brokers in parallel."""
        r = self._consume_stats(addr, group, "")
        if r.status.code != common_pb2.SUCCESS:
            return None
        queues = [_queue_progress(w, r.snapshot_timestamp)
                  for s in r.consume_stats for w in s.offset_table]
        return ConsumerProgress(group, queues, sum(s.consume_tps for s in r.consume_stats),
                                max((s.online_consumers for s in r.consume_stats), default=0))

    def consumer_ids_at(self, addr: str, group: str) -> list[str]:
        """Client ids of the group's consumers connected to the broker at `addr`."""
        r = self._messaging_rpc(addr, "GetConsumerListByGroup",
                                messaging_pb2.GetConsumerListByGroupRequest(
                                    consumer_group=group))
        self._check(r.status, f"consumers of {group} on {addr}", common_pb2.SUCCESS,
                    common_pb2.CONSUMER_NOT_ONLINE)
        return sorted(r.consumer_id_list)

    def consumer_groups(self) -> list[GroupSummary]:
        """Every group known to a broker: online consumers, consume TPS and total diff."""
        tps: dict[str, float] = {}
        diff: dict[str, int] = {}
        groups = self.cluster_info().all_groups()
        for g in groups:
            for stats in self._consume_stats(g.read_addr, "", "").consume_stats:
                name = stats.consumer_group
                tps[name] = tps.get(name, 0.0) + stats.consume_tps
                diff[name] = diff.get(name, 0) + sum(
                    _queue_progress(w, 0).diff for w in stats.offset_table)
        out = []
        for name in sorted(tps):
            consumers: set[str] = set()
            for g in groups:
                r = self._messaging_rpc(g.read_addr, "GetConsumerListByGroup",
                                 messaging_pb2.GetConsumerListByGroupRequest(
                                     consumer_group=name))
                consumers.update(r.consumer_id_list)
            out.append(GroupSummary(name, len(consumers), tps[name], diff[name]))
        return out

    # -- brokers ---------------------------------------------------------------------------
    def broker_runtime(self, addr: str, timeout: float | None = None) -> BrokerRuntime:
        r = self._admin_rpc(addr, "GetRuntimeInfo", admin_pb2.GetRuntimeInfoRequest(),
                            timeout)
        self._check(r.status, f"runtime info of {addr}")
        return BrokerRuntime(
            addr, r.broker_name, r.broker_id, r.broker_role, r.commit_log_min_offset,
            r.commit_log_max_offset, r.dispatch_behind_bytes, r.put_tps, r.get_total_tps,
            dict(r.slave_ack_offsets), dict(sorted(r.table.items())), r.snapshot_timestamp,
            [_slave_link(c) for c in r.ha_connection_info])

    def broker_consume_stats(self, addr: str) -> tuple[int, list[ConsumerProgress]]:
        """The broker's time and the progress of every group it knows on its queues."""
        r = self._consume_stats(addr, "", "")
        return r.snapshot_timestamp, [
            ConsumerProgress(s.consumer_group,
                             [_queue_progress(w, r.snapshot_timestamp) for w in s.offset_table],
                             s.consume_tps, s.online_consumers)
            for s in r.consume_stats]

    def ha_status(self, addr: str) -> HAStatus:
        """One timeout for both calls: a broker that answers the first slowly and then
        hangs costs one timeout, not two."""
        deadline = time.monotonic() + self.timeout
        r = self._admin_rpc(addr, "GetHAStatus", admin_pb2.GetHAStatusRequest())
        self._check(r.status, f"HA status of {addr}")
        runtime = self.broker_runtime(addr, max(deadline - time.monotonic(),
                                                MIN_SECOND_CALL_TIMEOUT_S))
        slaves = [_slave_link(c) for c in r.ha_connection_info]
        link = None
        if r.HasField("ha_client_info"):
            c = r.ha_client_info
            link = MasterLink(c.master_addr, c.connected, c.max_offset,
                              c.transferred_byte_in_second, c.last_read_timestamp, c.state)
        return HAStatus(addr, runtime.broker_name, r.master, r.master_commit_log_max_offset,
                        r.in_sync_slave_nums, slaves, link)

    def ha_status_of_cluster(self, cluster: str) -> list[HAStatus | BrokerUnreachable]:
        """Every broker of the cluster, masters and slaves, by group then id; one that does
        not answer is a BrokerUnreachable in its place."""
        return self.each_broker(self.cluster_brokers(cluster), self.ha_status)

    def broker_runtimes_of_cluster(self, cluster: str
                                   ) -> list[BrokerRuntime | BrokerUnreachable]:
        return self.each_broker(self.cluster_brokers(cluster), self.broker_runtime)

    def query_brokers(self, query: BrokerQuery, params: dict[str, object], *,
                      cluster: str | None = None, addrs: Sequence[str] = ()
                      ) -> list[list[Row] | BrokerUnreachable]:
        """`query` of the brokers at `addrs`, else of every master (or broker, as the query
        says) of the cluster (of every cluster): one list of rows per broker, or its
        BrokerUnreachable. `params` sets the request fields of the query's options."""
        if addrs:
            brokers = [("", addr, -1) for addr in addrs]
        else:
            brokers = [b for b in self.cluster_brokers(cluster)
                       if b[2] == 0 or not query.masters_only]
        names = {addr: name for name, addr, _ in brokers}
        request = query.request_of(params)

        def ask(addr: str) -> list[Row]:
            r = self._admin_rpc(addr, query.rpc, request)
            self._check(r.status, f"{query.command} of {addr}")
            return query.rows_of(r, names[addr], addr)
        return self.each_broker(brokers, ask)

    def pending_transactions_of_cluster(self, cluster: str | None = None,
                                        producer_group: str = ""
                                        ) -> list[list[PendingTransactions] | BrokerUnreachable]:
        """Halves without an outcome on every master of the cluster (of every cluster), per
        producer group: one list per master."""
        return [r if isinstance(r, BrokerUnreachable) else [PendingTransactions(**row)
                                                            for row in r]
                for r in self.query_brokers(TRANSACTION_STATUS,
                                            {"producer_group": producer_group}, cluster=cluster)]

    def remove_slave(self, master_addr: str, broker_id: int) -> None:
        """The master forgets an absent slave that left its group for good."""
        r = self._admin_rpc(master_addr, "RemoveHASlave",
                            admin_pb2.RemoveHASlaveRequest(broker_id=broker_id))
        self._check(r.status, f"remove slave {broker_id} from {master_addr}")

    def reset_offset_by_time(self, group: str, topic: str, when: int | str, *,
                             force: bool = False) -> list[QueueOffsetReset]:
        """Moves the group's offsets on every queue of the topic, on every master of its
        route, to the first message stored at or after `when` (epoch ms), or to
        RESET_EARLIEST / RESET_LATEST ("now": skip what accumulated). Refused while consumers
        of the group are online unless `force` (they then continue from the new offsets).
        Every group of the route needs a live master; nothing is reset otherwise."""
        if when == RESET_EARLIEST:
            target, timestamp = admin_pb2.RESET_TO_EARLIEST, 0
        elif when == RESET_LATEST:
            target, timestamp = admin_pb2.RESET_TO_LATEST, 0
        elif isinstance(when, int) and 0 <= when < 2**63:
            target, timestamp = admin_pb2.RESET_TO_TIMESTAMP, when
        else:
            raise AdminError(f"reset to {when!r}: expected epoch ms, {RESET_EARLIEST!r} or "
                             f"{RESET_LATEST!r}")
        route = self.topic_route(topic)
        names = sorted({q.broker_name for q in route.queue_datas})
        masters = {n: route.group(n).master_addr for n in names}
        missing = [n for n, addr in masters.items() if addr is None]
        if missing:
            raise AdminError(f"broker group(s) {', '.join(missing)} of topic {topic} have no "
                             "live master: nothing reset (retry when the masters are back)")
        if not force:  # asked first everywhere, so that no broker resets alone
            for name, addr in masters.items():
                online = self._messaging_rpc(addr, "GetConsumerListByGroup",
                                             messaging_pb2.GetConsumerListByGroupRequest(
                                                 consumer_group=group)).consumer_id_list
                if online:
                    raise AdminError(
                        f"{len(online)} consumer(s) of group {group} are online at {name}: "
                        "stop them first, or force the reset (they then drop their queues "
                        "and continue from the new offsets); nothing reset")
            if not any(self._has_offsets(addr, group, topic) for addr in masters.values()):
                raise AdminError(
                    f"group {group} has no committed offset on topic {topic} on any broker "
                    "(a typo?): nothing reset; force the reset to create its offsets")
        out: list[QueueOffsetReset] = []
        for name, addr in masters.items():
            assert addr is not None
            r = self._admin_rpc(addr, "ResetOffset", admin_pb2.ResetOffsetRequest(
                consumer_group=group, topic=topic, target=target, timestamp=timestamp,
                force=force))
            self._check(r.status, f"reset offsets of {group} on {topic} at {name} ({addr})"
                        + (f" ({len(out)} queue(s) of other brokers were already reset)"
                           if out else ""))
            out.extend(QueueOffsetReset(name, q.queue_id, q.old_offset, q.new_offset)
                       for q in r.queues)
        return out

    # -- messages --------------------------------------------------------------------------
    def query_msg_by_id(self, offset_msg_id: str) -> StoredMessage:
        """Straight to the commitlog of the broker the id names (its slave if it is gone)."""
        addr, _ = decode_offset_msg_id(offset_msg_id)
        group = None
        try:
            group = self.cluster_info().group_of_addr(addr)
        except AdminError:
            pass  # no name server: the id still names the broker
        candidates = [addr]
        if group is not None:
            candidates += [a for _, a in sorted(group.addrs.items()) if a != addr]
        failures = []
        for candidate in candidates:
            try:
                r = self._messaging_rpc(candidate, "QueryMessageById",
                                 messaging_pb2.QueryMessageByIdRequest(
                                     offset_msg_id=offset_msg_id))
            except AdminError as e:
                failures.append(str(e))
                continue
            if r.status.code == common_pb2.QUERY_NOT_FOUND:
                raise AdminError(f"no message with offsetMsgId {offset_msg_id} on {candidate}")
            self._check(r.status, f"query by id on {candidate}")
            return _message(r.message, group.broker_name if group else "")
        raise AdminError("; ".join(failures))

    def query_msg_by_key(self, topic: str, key: str, *, max_num: int = QUERY_MAX_NUM,
                         begin_ms: int = 0, end_ms: int = 0) -> list[StoredMessage]:
        """Messages of the topic with this KEYS entry, from every broker group of its route."""
        found = []
        for g in self.topic_route(topic).broker_groups:
            r = self._messaging_rpc(g.read_addr, "QueryMessageByKey",
                             messaging_pb2.QueryMessageByKeyRequest(
                                 topic=topic, key=key, max_num=max_num,
                                 begin_timestamp=begin_ms, end_timestamp=end_ms))
            self._check(r.status, f"query by key on {g.read_addr}", common_pb2.SUCCESS,
                        common_pb2.QUERY_NOT_FOUND)
            found.extend(_message(m, g.broker_name) for m in r.messages)
        found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
        return found

    def query_msg_trace_by_id(self, msg_id: str, *, trace_topic: str = RMQ_SYS_TRACE_TOPIC,
                              max_num: int = QUERY_MAX_NUM, begin_ms: int = 0,
                              end_ms: int = 0) -> list[TraceView]:
        """The trace records of the message with this id (its UNIQ_KEY), found by the
        trace messages' keys (QueryMsgTraceByIdSubCommand), oldest first."""
        views = []
        for m in self.query_msg_by_key(trace_topic, msg_id, max_num=max_num,
                                       begin_ms=begin_ms, end_ms=end_ms):
            try:
                contexts = decode_trace_data(m.body.decode("utf-8", errors="replace"))
            except (ValueError, IndexError) as e:
                raise AdminError(f"trace message {m.msg_id} of {trace_topic} is not trace "
                                 f"data: {e}") from None
            for ctx in contexts:
                bean = ctx.beans[0]
                if bean.msg_id != msg_id:
                    continue
                views.append(TraceView(
                    trace_type=ctx.trace_type.value, msg_id=msg_id, group=ctx.group,
                    timestamp=ctx.timestamp, cost_time=ctx.cost_time,
                    status="success" if ctx.success else "failed", topic=bean.topic or "",
                    tags=bean.tags or "", keys=bean.keys or "",
                    store_host=bean.store_host or "", offset_msg_id=bean.offset_msg_id or "",
                    client_host=m.born_host, request_id=ctx.request_id,
                    retry_times=bean.retry_times, context_code=ctx.context_code,
                    transaction_id=bean.transaction_id or "",
                    transaction_state=(bean.transaction_state
                                       if ctx.trace_type.value == "EndTransaction" else ""),
                    from_transaction_check=bean.from_transaction_check))
        views.sort(key=lambda v: v.timestamp)
        return views

    def send_message(self, topic: str, body: bytes, *, keys: Sequence[str] = (), tag: str = "",
                     broker_name: str | None = None, queue_id: int | None = None,
                     properties: dict[str, str] | None = None) -> SendResult:
        """One raw send to a master of the topic's route (of TBW102's for a new topic, which
        the broker then auto-creates); the broker picks the queue when none is given."""
        try:
            route = self.topic_route(topic)
        except AdminError:
            try:
                route = self.topic_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            except AdminError:
                raise AdminError(f"topic {topic} not exist and no broker auto-creates "
                                 "topics") from None
        writable = {q.broker_name for q in route.queue_datas if q.perm & PERM_WRITE}
        if broker_name is not None:
            if broker_name not in writable:
                raise AdminError(f"broker {broker_name} does not serve topic {topic} for "
                                 f"writing (brokers: {', '.join(sorted(writable)) or 'none'})")
            group = route.group(broker_name)
        else:
            groups = [g for g in route.broker_groups
                      if g.broker_name in writable and g.master_addr is not None]
            if not groups:
                raise AdminError(f"topic {topic} has no writable master")
            group = random.choice(groups)
        addr = group.master_addr
        if addr is None:
            raise AdminError(f"broker {group.broker_name} has no live master to send to")
        message = messaging_pb2.Message(topic=topic, body=body, tag=tag, keys=list(keys),
                                        user_properties=properties or {})
        r = self._messaging_rpc(addr, "SendMessage", messaging_pb2.SendMessageRequest(
            producer_group=TOOLS_PRODUCER_GROUP, message=message,
            queue_id=-1 if queue_id is None else queue_id))
        if r.status.code not in STORED_CODES:
            self._check(r.status, f"send to {group.broker_name} ({addr})")
        res = r.result
        return SendResult(code_name(r.status.code), group.broker_name, addr, res.queue_id,
                          res.queue_offset, res.message_id, res.offset_msg_id)

    def send_back(self, offset_msg_id: str, group: str, *, delay_level: int = 1,
                  max_reconsume_times: int | None = None) -> str:
        """The stored message goes to the group's retry topic (%RETRY%{group}) as a failed
        consume would send it (ConsumerSendMsgBack): only that group's consumers get it
        again, under its original topic, after `delay_level`'s delay (1: 1 s). A message
        already retried to its limit (a dead letter) needs a higher `max_reconsume_times`,
        else it goes back to the %DLQ%. Returns the master's address."""
        m = self.query_msg_by_id(offset_msg_id)
        addr, offset = decode_offset_msg_id(offset_msg_id)
        group_of = self.cluster_info().group_of_addr(addr)
        master = group_of.master_addr if group_of is not None else addr
        if master is None:
            raise AdminError(f"broker {group_of.broker_name if group_of else addr} has no live "
                             "master to resend from")
        request = messaging_pb2.ConsumerSendMsgBackRequest(
            consumer_group=group, commit_log_offset=offset, origin_message_id=m.msg_id,
            origin_topic=m.topic, delay_level=delay_level)
        if max_reconsume_times is not None:
            request.max_reconsume_times = max_reconsume_times
        r = self._messaging_rpc(master, "ConsumerSendMsgBack", request)
        self._check(r.status, f"resend {offset_msg_id} to group {group} at {master}")
        return master

    def _pull(self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int
              ) -> messaging_pb2.PullMessageResponse:
        r = self._messaging_rpc(addr, "PullMessage", messaging_pb2.PullMessageRequest(
            consumer_group=TOOLS_CONSUMER_GROUP, topic=topic, queue_id=queue_id,
            queue_offset=offset, max_msg_nums=max_nums, subscription="*"))
        self._check(r.status, f"pull {topic}-{queue_id} at {offset} from {addr}",
                    common_pb2.SUCCESS, common_pb2.NO_NEW_MSG, common_pb2.NO_MATCHED_MSG,
                    common_pb2.OFFSET_ILLEGAL)
        return r

    def offset_by_time(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The offset of the first message of the queue stored at or after `timestamp_ms`
        on the broker at `addr` (its max offset when none is)."""
        r = self._messaging_rpc(addr, "SearchOffsetByTimestamp",
                                messaging_pb2.SearchOffsetByTimestampRequest(
                                    topic=topic, queue_id=queue_id, timestamp=timestamp_ms))
        self._check(r.status, f"offset of {topic}-{queue_id} at {timestamp_ms} on {addr}")
        return r.offset

    def pull_at(self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int,
                broker_name: str = "") -> tuple[list[StoredMessage], int]:
        """One raw pull (committing nothing) of up to `max_nums` (<= 32) messages: the
        messages and the offset to pull next."""
        r = self._pull(addr, topic, queue_id, offset, min(max_nums, PULL_BATCH))
        return ([_message(m, broker_name) for m in r.messages],
                r.next_begin_offset if r.messages or r.next_begin_offset else offset)

    def consume_messages(self, topic: str, *, broker_name: str | None = None,
                         queue_id: int | None = None, offset: int | None = None,
                         count: int = 128) -> list[StoredMessage]:
        """Reads up to `count` messages with raw pulls (committing nothing), queue by queue,
        from `offset` (default: each queue's min offset)."""
        route = self.topic_route(topic)
        if broker_name is not None:
            route.group(broker_name)
        queues = [(g, q) for g, q in self._readable_queues(route)
                  if broker_name in (None, g.broker_name) and queue_id in (None, q)]
        if not queues:
            raise AdminError(f"topic {topic} has no readable queue {queue_id} on "
                             f"{broker_name or 'any broker'}")
        out: list[StoredMessage] = []
        for group, qid in queues:
            addr = group.read_addr
            next_offset = offset
            if next_offset is None:
                r = self._messaging_rpc(addr, "GetMinOffset", messaging_pb2.GetMinOffsetRequest(
                    topic=topic, queue_id=qid))
                self._check(r.status, f"min offset of {topic}-{qid} on {addr}")
                next_offset = r.offset
            while len(out) < count:
                r = self._pull(addr, topic, qid, next_offset, min(PULL_BATCH, count - len(out)))
                out.extend(_message(m, group.broker_name) for m in r.messages)
                if r.status.code == common_pb2.NO_NEW_MSG or r.next_begin_offset == next_offset:
                    break
                next_offset = r.next_begin_offset
        return out
