"""What the console knows of the cluster, asked through the admin API only (mqclient.admin).

The admin API blocks (grpc's sync stubs): every call here runs in a worker thread with a
budget (`budget_s`, at most 1 s per broker: the MQAdmin's RPC timeout), so a hung or
SIGSTOPped broker costs a page that budget, never the page's thread. Brokers are asked in
parallel; one that does not answer is listed as unreachable, and stays listed (remembered)
after the name servers drop it. Lists that are large or slow to gather (50,000 topics, the
consume stats of 2,000 groups) are cached a few seconds and refreshed in the background
while the stale copy is served.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mqclient.admin import MQAdmin
from mqclient.admin_types import (
    AdminError,
    BrokerRuntime,
    BrokerUnreachable,
    ClusterInfo,
    ConsumerProgress,
    QueueProgress,
)

T = TypeVar("T")
DEFAULT_BUDGET_S = 1.0
LIST_TTL_S = 5.0  # how long a topic list / group table is served before it is asked again
WORKERS = 32
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRANS_OP_HALF_TOPIC", "OFFSET_MOVED_EVENT",
                           "SELF_TEST_TOPIC", "rmq_sys_wheel_timer"})


class Unanswered(AdminError):
    """The cluster did not answer within the console's budget."""


@dataclasses.dataclass(frozen=True)
class BrokerRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    listed: bool  # the name servers list it now (False: remembered from before)
    runtime: BrokerRuntime | None
    error: str | None  # why it is unreachable

    @property
    def reachable(self) -> bool:
        return self.runtime is not None

    def value(self, key: str, default: str = "-") -> str:
        return self.runtime.table.get(key, default) if self.runtime else default


@dataclasses.dataclass(frozen=True)
class NamesrvRow:
    addr: str
    error: str | None


@dataclasses.dataclass(frozen=True)
class Overview:
    namesrvs: list[NamesrvRow]
    brokers: list[BrokerRow]
    error: str | None  # no name server answered

    @property
    def unreachable(self) -> list[BrokerRow]:
        return [b for b in self.brokers if not b.reachable]


@dataclasses.dataclass
class GroupRow:
    """One consumer group over every broker: what the group list shows."""

    group: str
    topics: set[str] = dataclasses.field(default_factory=set)
    message_lag: int = 0
    time_lag_s: float = 0.0  # the oldest unconsumed message's age, over all queues
    consume_tps: float = 0.0
    online_consumers: int = 0
    brokers: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class GroupTable:
    rows: dict[str, GroupRow]
    unreachable: list[BrokerUnreachable]
    taken_at: float


@dataclasses.dataclass(frozen=True)
class GroupDetail:
    group: str
    queues: list[QueueProgress]
    consume_tps: float
    online_consumers: int
    members: dict[str, list[str]]  # client id -> brokers it is connected to
    unreachable: list[BrokerUnreachable]

    @property
    def message_lag(self) -> int:
        return sum(q.diff for q in self.queues)

    @property
    def time_lag_s(self) -> float:
        return max((q.lag_seconds for q in self.queues), default=0.0)


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_"):
        return "system"
    return "normal"


def client_kind(client_id: str) -> str:
    """Our client names itself ip@pid#n; clients of the v2 SDKs (through the proxy) do not."""
    head, _, tail = client_id.partition("@")
    if tail and "#" in tail and tail.split("#", 1)[0].isdigit():
        return "mqclient"
    return "v2 SDK (proxy)" if tail else "other"


def client_address(client_id: str) -> str:
    return client_id.partition("@")[0]


class _Cached:
    """A value asked at most every `ttl` seconds; a stale copy is served while one refresh
    runs in the background (a page never waits on a slow broker for a list it has)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.value: Any = None
        self.taken_at = 0.0
        self.refreshing: asyncio.Task[Any] | None = None

    async def get(self, fetch: Callable[[], Any]) -> Any:
        now = time.monotonic()
        if self.value is not None and now - self.taken_at < self.ttl:
            return self.value
        if self.refreshing is None or self.refreshing.done():
            self.refreshing = asyncio.ensure_future(self._refresh(fetch))
        if self.value is not None:
            return self.value
        return await asyncio.shield(self.refreshing)

    async def _refresh(self, fetch: Callable[[], Any]) -> Any:
        value = await fetch()
        self.value, self.taken_at = value, time.monotonic()
        return value

    def invalidate(self) -> None:
        self.taken_at = 0.0


class ClusterBackend:
    """One account's view of the cluster (the console's own account without ACL)."""

    def __init__(self, namesrv: str | Sequence[str], *, budget_s: float = DEFAULT_BUDGET_S,
                 access_key: str | None = None, secret_key: str | None = None,
                 tls_ca: str | None = None) -> None:
        self.budget_s = budget_s
        self.admin = MQAdmin(namesrv, timeout=budget_s, access_key=access_key,
                             secret_key=secret_key, tls_ca=tls_ca)
        self._namesrv_admins = {addr: MQAdmin([addr], timeout=budget_s, access_key=access_key,
                                              secret_key=secret_key, tls_ca=tls_ca)
                                for addr in self.admin.namesrv_addrs}
        self._pool = concurrent.futures.ThreadPoolExecutor(WORKERS,
                                                           thread_name_prefix="console-admin")
        self._seen: dict[str, tuple[str, str, int]] = {}  # addr -> cluster, name, id
        self._topics = _Cached(LIST_TTL_S)
        self._groups = _Cached(LIST_TTL_S)
        self._info = _Cached(1.0)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.admin.close()
        for a in self._namesrv_admins.values():
            a.close()

    async def call(self, fn: Callable[..., T], *args: Any, rpcs: int = 1, **kwargs: Any) -> T:
        """`fn(*args)` in a worker thread, given `rpcs` budgets (each broker's RPC is bounded
        by the admin's timeout; this bounds the whole call, e.g. a name server that is
        asked in turn)."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))
        limit = self.budget_s * rpcs + 0.5
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError:
            raise Unanswered(f"the cluster did not answer within {limit:.1f} s") from None

    # -- cluster ---------------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        return await self._info.get(lambda: self.call(self.admin.cluster_info,
                                                      rpcs=len(self._namesrv_admins) or 1))

    async def overview(self) -> Overview:
        async def ping(addr: str, admin: MQAdmin) -> NamesrvRow:
            try:
                await self.call(admin.cluster_info)
                return NamesrvRow(addr, None)
            except AdminError as e:
                return NamesrvRow(addr, str(e))
        namesrvs = list(await asyncio.gather(*(ping(a, m)
                                               for a, m in self._namesrv_admins.items())))
        error = None
        listed: dict[str, tuple[str, str, int]] = {}
        try:  # asked anew (one name server RPC): this page shows who left just now
            info = await self.call(self.admin.cluster_info, rpcs=len(self._namesrv_admins) or 1)
            for cluster, names in info.clusters.items():
                for name in names:
                    group = info.groups.get(name)
                    for broker_id, addr in sorted(group.addrs.items()) if group else ():
                        listed[addr] = (cluster, name, broker_id)
        except AdminError as e:
            error = str(e)
        self._seen.update(listed)
        brokers = sorted(self._seen.items(), key=lambda kv: (kv[1], kv[0]))
        runtimes = await self.call(self.admin.each_broker,
                                   [(name, addr, bid) for addr, (_, name, bid) in brokers],
                                   self.admin.broker_runtime)
        rows = []
        for (addr, (cluster, name, bid)), rt in zip(brokers, runtimes, strict=True):
            if isinstance(rt, BrokerUnreachable):
                rows.append(BrokerRow(cluster, name, bid, addr, addr in listed, None,
                                      rt.error if addr in listed else
                                      f"{rt.error} (no longer listed by the name servers)"))
            else:
                rows.append(BrokerRow(cluster, name, bid, addr, addr in listed, rt, None))
        return Overview(namesrvs, rows, error)

    async def warm(self) -> None:
        """Opens the channels and fills the caches; failures are the pages' to report."""
        for step in (self.overview, self.topics, self.group_table):
            try:
                await step()
            except AdminError:
                pass

    def forget_broker(self, addr: str) -> None:
        self._seen.pop(addr, None)

    # -- topics ----------------------------------------------------------------------------
    async def topics(self) -> list[str]:
        return await self._topics.get(lambda: self.call(self.admin.topic_list,
                                                        rpcs=len(self._namesrv_admins) or 1))

    def topics_changed(self) -> None:
        self._topics.invalidate()

    # -- groups ----------------------------------------------------------------------------
    async def group_table(self) -> GroupTable:
        return await self._groups.get(self._gather_groups)

    def groups_changed(self) -> None:
        self._groups.invalidate()

    async def _gather_groups(self) -> GroupTable:
        info = await self.cluster_info()
        brokers = [(g.broker_name, g.read_addr, min(g.addrs)) for g in info.all_groups()
                   if g.addrs]
        answers = await self.call(self.admin.each_broker, brokers,
                                  self.admin.broker_consume_stats)
        rows: dict[str, GroupRow] = {}
        unreachable = []
        for (name, _, _), answer in zip(brokers, answers, strict=True):
            if isinstance(answer, BrokerUnreachable):
                unreachable.append(answer)
                continue
            _, progresses = answer
            for p in progresses:
                row = rows.setdefault(p.group, GroupRow(p.group))
                row.brokers.add(name)
                row.consume_tps += p.consume_tps
                row.online_consumers = max(row.online_consumers, p.online_consumers)
                for q in p.queues:
                    row.topics.add(q.topic)
                    row.message_lag += q.diff
                    row.time_lag_s = max(row.time_lag_s, q.lag_seconds)
        return GroupTable(rows, unreachable, time.time())

    async def group_detail(self, group: str) -> GroupDetail:
        info = await self.cluster_info()
        brokers = [(g.broker_name, g.read_addr, min(g.addrs)) for g in info.all_groups()
                   if g.addrs]
        answers, members_by_broker = await asyncio.gather(  # one budget for both
            self.call(self.admin.each_broker, brokers,
                      lambda addr: self.admin.group_progress_at(addr, group)),
            self.call(self.admin.each_broker, brokers,
                      lambda addr: self.admin.consumer_ids_at(addr, group)))
        queues: list[QueueProgress] = []
        tps = 0.0
        online = 0
        unreachable = []
        known = False
        for answer in answers:
            if isinstance(answer, BrokerUnreachable):
                unreachable.append(answer)
            elif answer is not None:
                known = True
                progress: ConsumerProgress = answer
                queues.extend(progress.queues)
                tps += progress.consume_tps
                online = max(online, progress.online_consumers)
        members: dict[str, list[str]] = {}
        for (name, _, _), ids in zip(brokers, members_by_broker, strict=True):
            if isinstance(ids, BrokerUnreachable):
                continue
            for client_id in ids:
                members.setdefault(client_id, []).append(name)
        if not known and not members and not unreachable:
            raise AdminError(f"consumer group {group} not exist (no broker has its offsets "
                             "or an online consumer of it)")
        queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return GroupDetail(group, queues, tps, online, members, unreachable)
