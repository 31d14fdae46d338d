"""BrokerController: wires the store, the gRPC services, the name server registration and
the periodic persistence of one broker (RocketMQ's BrokerController).

Everything but the store's own service threads runs on one asyncio loop: handlers, long
polling, registration, persistence. Blocking work (store load and shutdown, config file
writes) goes to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from acl.config import AclConfigError
from acl.grpc_auth import ClientAuth, ServerAuth
from acl.store import AclStore
from broker.admin import AdminServicer, data_version_to_proto
from broker.clients import ClientManager
from broker.config import BrokerConfig, ConfigError, LoadedConfig, local_ip, resolve_ip
from broker.constants import (
    FIND_MASTER_REGISTER_PERIOD_S,
    RETRY_FAILED_REGISTER_S,
    SEND_LISTEN_PORT_OFFSET,
    SHUTDOWN_GRACE_S,
    STATS_SAMPLE_INTERVAL_S,
)
from broker.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from broker.convert import UniqKeyFactory, format_host
from broker.message_filter import FilterRegistry
from broker.messaging import MessagingServicer
from broker.metrics import BrokerMetrics
from broker.persistence import ConfigManager
from broker.pull import PullRequestHoldService
from broker.register_body import TopicTableEncoder
from broker.registration import BrokerOuterAPI, RegistrationRefused
from broker.schedule import ScheduleMessageService
from broker.send_channel import ChannelLimits, SendChannelServer
from broker.slave_sync import SlaveSynchronizer
from broker.stats import BrokerStats
from broker.status import STORED_STATUSES, RequestError
from broker.topic_config import Clock, TopicConfig, TopicConfigManager
from broker.transaction import ProducerCheckStreams, TransactionalMessageService
from broker.transaction.checks import check_request
from broker.transaction.prepare import HalfMessages
from ha.codec import SlaveHello
from ha.constants import HA_LISTEN_PORT_OFFSET, SLAVE_TIMEOUT
from ha.master import HAService
from ha.slave import HAClient
from mqproto import admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc, namesrv_pb2
from mqproto.serving import add_servicer, log_accept_errors_briefly, watch_loop_stalls
from mqproto.tls import ClientTls, ServerTls, TlsError
from store.config import StoreConfig
from store.constants import BrokerRole, FlushDiskType, PutMessageStatus
from store.disk_full import is_disk_full
from store.message import Message
from store.message_store import DefaultMessageStore, PutMessageResult
from store.waiters import OffsetWaiters

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreDirLocked(OSError):
    """Another broker process uses this storePathRootDir."""


class BrokerController:
    """One broker. `clock_ms` stamps data versions and statistics; `sleep` paces the
    registration, offset persistence and statistics tasks (tests pass fakes)."""

    def __init__(self, loaded: LoadedConfig, *, clock_ms: Clock = wall_clock_ms,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.config: BrokerConfig = loaded.broker
        self.store_config: StoreConfig = loaded.store
        self.clock_ms = clock_ms
        self._sleep = sleep
        root = Path(self.store_config.store_path_root_dir)
        self.root = root
        self.topics = TopicConfigManager(root / "config" / "topics.json", self.config, clock_ms,
                                         delay_levels=len(self.store_config.delay_levels_ms))
        self.offsets = ConsumerOffsetManager(root / "config" / "consumerOffset.json", clock_ms,
                                             track_local_commits=self.config.is_slave)
        self.delay_offsets = DelayOffsetManager(root / "config" / "delayOffset.json")
        self.stats = BrokerStats(clock_ms)
        self.clients = ClientManager(clock_ms)
        self.filters = FilterRegistry(self.config.enable_property_filter)
        # The cluster key signs what this broker asks of name servers and of its master.
        self.cluster_auth = ClientAuth.cluster(self.config.cluster_key)
        c = self.config
        self.tls = (ServerTls(c.tls_cert_path, c.tls_key_path, c.tls_ca_path, c.tls_mutual)
                    if c.tls_enable else None)
        self.peer_tls = self.tls.client() if self.tls is not None else None
        self.outer_api = BrokerOuterAPI(self.config.namesrv_addr_list,
                                        self.config.register_broker_timeout_mills / 1000,
                                        auth=self.cluster_auth, tls=self.peer_tls)
        self.acl: AclStore | None = None  # aclEnable: the accounts, once started
        self.auth: ServerAuth | None = None
        self.store: DefaultMessageStore = None  # type: ignore[assignment]  # set by start()
        self.pull_hold: PullRequestHoldService = None  # type: ignore[assignment]
        self.store_host: tuple[str, int] = ("127.0.0.1", 0)
        self.broker_addr = ""
        self.ha_server_addr = ""
        self.master_addr = ""  # a slave's master, as the name servers answer
        # HA (SPEC §5): a master serves slaves, a slave pulls from its master. SYNC_MASTER
        # sends wait on ha_waiters, advanced by the best slave ack.
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.ha_waiters = OffsetWaiters(time.monotonic)
        # A slave copies its master's tables (SPEC §4) and reports offsets committed on it.
        self.slave_sync: SlaveSynchronizer | None = None
        if self.config.is_slave:
            self.slave_sync = SlaveSynchronizer(
                self, self.config.slave_synchronize_interval / 1000,
                self.config.register_broker_timeout_mills / 1000)
        self.schedule: ScheduleMessageService | None = None  # a master's, once started
        # Transactions (broker/transaction): producers' check streams; a master's service.
        self.check_streams: ProducerCheckStreams[messaging_pb2.CheckTransactionStateRequest] = (
            ProducerCheckStreams())
        self.transactions: TransactionalMessageService | None = None
        self.boot_timestamp = 0
        self.uniq_key = UniqKeyFactory("127.0.0.1")
        self._server: grpc.aio.Server | None = None
        self.messaging: MessagingServicer | None = None
        self.send_channel: SendChannelServer | None = None
        self.send_channel_addr = ""  # empty: none (sendChannelEnable=false)
        self.metrics: BrokerMetrics | None = None
        self.metrics_addr = ""  # HOST:PORT of /metrics; empty: off (metricsPort=0)
        # RocketMQ 5's gRPC endpoint, once proxy/ serves it (broker/startup.py); empty: none.
        self.grpc_proxy_addr = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._register_now = asyncio.Event()
        # (data version, broker permission) -> the compressed topic table it registers
        self._register_body: tuple[tuple[object, int], bytes] | None = None
        self._topic_table_encoder = TopicTableEncoder()
        self._lock_fd: int | None = None
        self._started = False
        self._stopped = False
        # A config file not written for lack of space before the store was made.
        self._disk_full_at_start: tuple[OSError, Path] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        """Binds, loads the store and config files, serves, registers; returns brokerAddr."""
        self._lock_store_dir()
        log_accept_errors_briefly(asyncio.get_running_loop(), log)
        self._start_acl()
        server = self._build_server()
        self._server = server
        # brokerIP1, else the local address of a socket connected to a name server.
        host = self.config.broker_ip1 or await asyncio.to_thread(
            local_ip, self.config.namesrv_addr_list)
        listen = format_host((self.config.bind_address, self.config.listen_port))
        try:
            port = (server.add_secure_port(listen, self.tls.grpc_credentials())
                    if self.tls is not None else server.add_insecure_port(listen))
        except TlsError as e:
            raise ConfigError(str(e)) from None
        except RuntimeError as e:
            raise OSError(f"cannot listen on port {self.config.listen_port}: {e}") from e
        if port == 0:
            raise OSError(f"cannot listen on port {self.config.listen_port}")
        self.store_host = (resolve_ip(host), port)
        self.broker_addr = format_host((host, port))
        ha_port = self.config.ha_listen_port
        if ha_port < 0:  # unset: listenPort + 1, or any free port when listenPort is
            ha_port = port + HA_LISTEN_PORT_OFFSET if self.config.listen_port else 0
        ha_host = self.config.broker_ip2 or host  # slaves may reach us by another address
        self.ha_server_addr = format_host((ha_host, ha_port))
        self.uniq_key = UniqKeyFactory(self.store_host[0])
        self.store_config.store_host = self.store_host

        await asyncio.to_thread(self._load_config_files)
        store = DefaultMessageStore(self.store_config, clock_ms=self.clock_ms)
        await asyncio.to_thread(store.load)
        self.store = store  # loaded: shutdown() closes it from here on
        if self._disk_full_at_start is not None:
            self.config_write_failed(*self._disk_full_at_start)
        if store.recovered_from_crash:
            log.warning("the store was not shut down cleanly: recovered from a crash")
        store.start()
        loop = asyncio.get_running_loop()
        self.pull_hold = PullRequestHoldService(loop, store.get_max_offset_in_queue)
        store.arriving_listeners.append(self.pull_hold.on_message_arriving)
        await self._start_ha(ha_host, ha_port)
        await self._start_send_channel(host, port)
        await self._start_metrics(host)

        await server.start()
        self._started = True
        self.boot_timestamp = self.clock_ms()
        log.info("broker %s (%s, id %d, %s) serving on %s, store %s", self.config.broker_name,
                 self.config.broker_cluster_name, self.config.broker_id,
                 self.config.broker_role.value, self.broker_addr, self.root)
        await self.register_broker_all()
        if self.outer_api.all_refused():
            raise RegistrationRefused(
                "every name server refused this broker's registration, so none of its "
                "topics is routable: " + "; ".join(
                    f"{a}: {why}" for a, why in self.outer_api.refused.items()))
        # A name server that comes back (or restarted) hears from this broker at once.
        self.outer_api.start_links(self.broker_addr, lambda _addr: self._register_now.set())
        self._tasks = [
            asyncio.create_task(self._register_loop(), name="registerBrokerAll"),
            asyncio.create_task(self._periodic(
                "persistConsumerOffset", self.config.flush_consumer_offset_interval / 1000,
                lambda: self._persist_if_dirty(self.offsets)), name="persistConsumerOffset"),
            # topics.json is written at each change (a slave's delayOffset.json at each sync):
            # these write one whose write failed (a full disk).
            asyncio.create_task(self._periodic(
                "persistTopicConfig", self.config.flush_consumer_offset_interval / 1000,
                lambda: self._persist_if_dirty(self.topics)), name="persistTopicConfig"),
            asyncio.create_task(self._periodic(
                "persistDelayOffset", self.config.flush_delay_offset_interval / 1000,
                lambda: self._persist_if_dirty(self.delay_offsets)), name="persistDelayOffset"),
            asyncio.create_task(self._periodic(
                "sampleStats", STATS_SAMPLE_INTERVAL_S, self._sample_stats), name="sampleStats"),
        ]
        stall_watch = watch_loop_stalls(log)
        if stall_watch is not None:
            self._tasks.append(stall_watch)
        if self.slave_sync is not None:
            self._tasks.append(asyncio.create_task(self.slave_sync.run(), name="slaveSynchronize"))
        else:
            self.schedule = ScheduleMessageService(store, self.delay_offsets, self._put_one,
                                                   self.clock_ms)
            self.schedule.start()
            self.transactions = TransactionalMessageService(
                self, lambda group, half: self.check_streams.send(group, check_request(half)),
                self.check_streams.groups, clock_ms=self.clock_ms, sleep=self._sleep)
            self.transactions.start()
        return self.broker_addr

    async def _start_ha(self, host: str, ha_port: int) -> None:
        if self.config.is_slave:
            assert self.slave_sync is not None
            c = self.config
            self.ha_client = HAClient(
                self.store, c.ha_master_address, on_connected=self.slave_sync.wake,
                hello=SlaveHello(c.broker_id, c.broker_name, self.broker_addr),
                housekeeping_interval=c.ha_housekeeping_interval / 1000,
                cluster_key=c.cluster_key,
                ssl_context=self._ssl(self.peer_tls))
            self.ha_client.start()
            return
        service = HAService(self.store, host=self.config.bind_address, port=ha_port,
                            on_ack=self.ha_waiters.advance,
                            slave_fallbehind_max=self.config.ha_slave_fallbehind_max,
                            max_time_slave_not_catchup_ms=(
                                self.config.ha_max_time_slave_not_catchup),
                            housekeeping_interval=self.config.ha_housekeeping_interval / 1000,
                            cluster_key=self.config.cluster_key,
                            ssl_context=self._ssl(self.tls))
        try:
            bound = await service.start()
        except OSError as e:
            raise OSError(f"cannot listen on haListenPort {ha_port}: {e}") from e
        self.ha_service = service
        # With a write buffer, a put becomes readable only when committed: wake HA then too.
        self.store.commit_listeners.append(lambda _: service.notify_data_arrived())
        self.ha_server_addr = format_host((host, bound))

    @staticmethod
    def _ssl(tls: ServerTls | ClientTls | None) -> ssl.SSLContext | None:
        """The SSL context of `tls` (None: plaintext); ConfigError when it cannot be made."""
        if tls is None:
            return None
        try:
            return tls.ssl_context()
        except TlsError as e:
            raise ConfigError(str(e)) from None

    async def _start_send_channel(self, host: str, port: int) -> None:
        if not self.config.send_channel_enable:
            return
        send_port = self.config.send_listen_port
        if send_port < 0:  # unset: listenPort + 2, or any free port when listenPort is
            send_port = port + SEND_LISTEN_PORT_OFFSET if self.config.listen_port else 0
        assert self.messaging is not None
        c = self.config
        channel = SendChannelServer(self.messaging.send, ChannelLimits(
            max_connections=c.send_channel_max_connections,
            idle_timeout_s=c.send_channel_idle_timeout_mills / 1000,
            frame_timeout_s=c.send_channel_frame_timeout_mills / 1000),
            auth=self.auth)  # aclEnable: connections authenticate first (AUTH frame)
        try:
            bound = await channel.start(self.config.bind_address, send_port,
                                        self._ssl(self.tls))
        except OSError as e:
            raise OSError(f"cannot listen on sendListenPort {send_port}: {e}") from e
        self.send_channel = channel
        self.send_channel_addr = format_host((host, bound))

    async def _start_metrics(self, host: str) -> None:
        port = self.config.metrics_port
        if port == 0:
            return
        metrics = BrokerMetrics(self)
        try:
            bound = await metrics.start(self.config.bind_address, port)
        except OSError as e:
            raise OSError(f"cannot listen on metricsPort {port}: {e}") from e
        self.metrics = metrics
        self.metrics_addr = format_host((host, bound))
        log.info("metrics served on http://%s/metrics", self.metrics_addr)

    async def _stop_ha(self) -> None:
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None
        if self.ha_service is not None:
            await self.ha_service.stop()
            self.ha_service = None
        self.ha_waiters.fail_all()

    async def after_put(self, end_offset: int) -> PutMessageStatus | None:
        """After a stored put: wakes the slave links; a SYNC_MASTER waits until a slave
        acked `end_offset`. Returns the status to answer instead, None when replicated
        (or no wait is due)."""
        service = self.ha_service
        if service is None:
            return None
        service.notify_data_arrived()
        if self.config.broker_role is not BrokerRole.SYNC_MASTER:
            return None
        if not service.slave_ok():
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if not await self.ha_waiters.wait_async(end_offset, SLAVE_TIMEOUT / 1000):
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return None

    async def put_messages(self, msgs: list[Message]) -> PutMessageResult:
        """Stores messages in one append, waits for the flush / slave the role asks and
        counts them. The status is the store's, or the replication's when that failed."""
        result = await self.store.put_messages_async(msgs)
        return (await self._count_and_replicate([msgs], [result]))[0]

    async def put_message_groups(self, groups: list[list[Message]]
                                 ) -> list[PutMessageResult]:
        """put_messages for several message lists in one store append (each still stored
        in one piece or not at all, with its own result); one wait for the flush / slave
        the role asks, for the last of them."""
        if self.store_config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            results = self.store.append_groups(groups)
        else:  # a SYNC_FLUSH put waits for its flush: those of one loop turn share it
            results = list(await asyncio.gather(*(self.store.put_messages_async(msgs)
                                                  for msgs in groups)))
        return await self._count_and_replicate(groups, results)

    async def _count_and_replicate(self, groups: list[list[Message]],
                                   results: list[PutMessageResult]) -> list[PutMessageResult]:
        """Counts the stored puts and waits for the slave the role asks, once, for the
        last of them; a replication failure becomes the status of every stored one."""
        end = 0
        for msgs, result in zip(groups, results, strict=True):
            append = result.append
            if result.status in STORED_STATUSES and append is not None:
                self.stats.record_put(msgs[0].topic, len(msgs))
                end = max(end, append.end_offset)
        if not end:
            return results
        ha_status = await self.after_put(end)
        if ha_status is None:
            return results
        return [PutMessageResult(ha_status, r.append)
                if r.status in STORED_STATUSES and r.append is not None else r
                for r in results]

    async def _put_one(self, msg: Message) -> PutMessageStatus:
        return (await self.put_messages([msg])).status

    def _load_config_files(self) -> None:
        """topics.json, consumerOffset.json and delayOffset.json (each from its .bak when
        it is corrupt)."""
        try:
            self.topics.load_and_init()
        except OSError as e:  # its new system topics not written: a full disk
            if not is_disk_full(e):
                raise
            self.topics.dirty = True  # written by the periodic persistence
            self._disk_full_at_start = (e, self.topics.path)
        self.offsets.load()
        self.delay_offsets.load()

    def config_write_failed(self, err: OSError, path: Path) -> bool:
        """A config file could not be written: True when for lack of space, which becomes
        the store's disk-full state (puts refused until space is back, one log line); the
        file is written again by its periodic persistence or the next change."""
        if self.store is None:
            return False
        what = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        return self.store.disk_full.report(err, f"cannot write {what}")

    async def _persist_if_dirty(self, manager: ConfigManager[Any]) -> None:
        try:
            await manager.persist_if_dirty()
        except OSError as e:
            if not self.config_write_failed(e, manager.path):
                raise

    def _start_acl(self) -> None:
        if not self.config.acl_enable:
            return
        try:
            self.acl = AclStore(self.config.acl_file)
        except AclConfigError as e:
            raise ConfigError(f"aclFile: {e}") from None
        self.auth = ServerAuth(self.acl, self.config.cluster_key)
        self.acl.start()
        log.info("access control on: %d accounts from %s%s", len(self.acl.config.accounts),
                 self.config.acl_file, "" if self.config.cluster_key else
                 " (no clusterKey: slaves cannot call this broker's admin service)")
        if self.config.is_slave and not self.config.cluster_key:
            log.warning("aclEnable without clusterKey: this slave cannot sign its calls to "
                        "its master's admin service (set clusterKey on both)")

    def _build_server(self) -> grpc.aio.Server:
        max_receive = 2 * self.store_config.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", max_receive),
            ("grpc.max_send_message_length", -1),
        ], interceptors=[self.auth] if self.auth is not None else None)
        self.messaging = MessagingServicer(self)
        self.messaging.send.half_messages = HalfMessages(self)  # transactions
        # Requests that do not decode answer INVALID_ARGUMENT (one log line), not UNKNOWN.
        add_servicer(server, messaging_pb2_grpc.add_MessagingServiceServicer_to_server,
                     self.messaging, log)
        add_servicer(server, admin_pb2_grpc.add_AdminServiceServicer_to_server,
                     AdminServicer(self), log)
        return server

    def _lock_store_dir(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreDirLocked(f"{self.root} is in use by another broker (lock held on "
                                 f"{self.root / 'lock'})") from None
        self._lock_fd = fd

    async def shutdown(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Unregisters, answers waiting pulls, stops serving, persists offsets and topics,
        shuts the store down (flush, close files, remove `abort`)."""
        if self._stopped:
            return
        self._stopped = True
        if self._started:
            await self.unregister_broker_all()
        if self.pull_hold is not None:
            self.pull_hold.shutdown()
        if self.send_channel is not None:
            await self.send_channel.stop(grace)
            self.send_channel = None
        if self._server is not None:
            await self._server.stop(grace)
        if self.metrics is not None:
            await self.metrics.stop()
            self.metrics = None
        if self.acl is not None:
            await self.acl.stop()
        if self.schedule is not None:
            await self.schedule.stop()
        if self.transactions is not None:
            await self.transactions.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._stop_ha()
        if self._started:
            await asyncio.to_thread(self._persist_all)
        if self.store is not None:
            await asyncio.to_thread(self.store.shutdown)
        await self.outer_api.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("broker %s on %s stopped", self.config.broker_name, self.broker_addr)

    def _persist_all(self) -> None:
        """At shutdown; a file that cannot be written for lack of space keeps its previous
        content (logged) and the others are still written, the store still closed."""
        for manager in (self.offsets, self.topics, self.delay_offsets):
            try:
                manager.persist()
            except OSError as e:
                if not is_disk_full(e):
                    raise
                log.error("%s not written at shutdown (disk full: %s): it keeps its previous "
                          "content", manager.path, e.strerror)

    async def __aenter__(self) -> BrokerController:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.shutdown()

    # -- periodic tasks --------------------------------------------------------------------
    async def _periodic(self, name: str, interval_s: float,
                        step: Callable[[], Awaitable[object]]) -> None:
        while True:
            await self._sleep(interval_s)
            try:
                await step()
            except Exception:
                log.exception("%s failed; next run in %ss", name, interval_s)

    async def _sample_stats(self) -> None:
        self.stats.sample()

    async def _register_loop(self) -> None:
        """Registers every registerNameServerPeriod, and at once after a topic change; a
        slave that has not learnt its master yet (it registered first) asks again sooner,
        and so does a broker whose last registration with a name server failed."""
        while True:
            period = self.config.register_name_server_period / 1000
            if (self.config.is_slave and not self.master_addr
                    and not self.config.ha_master_address):
                period = min(period, FIND_MASTER_REGISTER_PERIOD_S)
            if self.outer_api.failing:
                period = min(period, RETRY_FAILED_REGISTER_S)
            sleeper = asyncio.ensure_future(self._sleep(period))
            woken = asyncio.ensure_future(self._register_now.wait())
            try:
                await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                woken.cancel()
            self._register_now.clear()
            try:
                await self.register_broker_all()
            except Exception:
                log.exception("registerBrokerAll failed")

    # -- name servers ----------------------------------------------------------------------
    async def register_request(self) -> namesrv_pb2.RegisterBrokerRequest:
        """The registration with the whole topic table, compressed. The table is encoded
        from a copy taken here, once per data version (broker/register_body.py)."""
        c = self.config
        key = (self.topics.data_version, c.broker_permission)
        cached = self._register_body
        if cached is None or cached[0] != key:
            configs: list[TopicConfig] = list(self.topics.table.values())
            body = await self._topic_table_encoder.encode(configs, c.broker_permission)
            cached = self._register_body = (key, body)
        return namesrv_pb2.RegisterBrokerRequest(
            cluster_name=c.broker_cluster_name, broker_name=c.broker_name,
            broker_addr=self.broker_addr, broker_id=c.broker_id,
            ha_server_addr=self.ha_server_addr,
            data_version=data_version_to_proto(key[0]),
            compressed_topic_configs=cached[1])

    async def register_broker_all(self) -> int:
        """Registers with every name server; returns how many answered."""
        if not self.outer_api.namesrv_addrs:
            return 0
        answers = await self.outer_api.register_broker_all(await self.register_request())
        for answer in answers:
            if answer.master_addr and answer.master_addr != self.master_addr:
                self.master_addr = answer.master_addr
                log.info("master of %s is %s (HA %s)", self.config.broker_name,
                         answer.master_addr, answer.ha_server_addr)
                if self.slave_sync is not None:
                    self.slave_sync.wake()
            if (self.ha_client is not None and answer.ha_server_addr
                    and not self.config.ha_master_address):
                self.ha_client.update_master_address(answer.ha_server_addr)
        return len(answers)

    async def unregister_broker_all(self) -> int:
        if not self.outer_api.namesrv_addrs:
            return 0
        c = self.config
        return await self.outer_api.unregister_broker_all(namesrv_pb2.UnregisterBrokerRequest(
            cluster_name=c.broker_cluster_name, broker_name=c.broker_name,
            broker_addr=self.broker_addr, broker_id=c.broker_id))

    async def topics_changed(self) -> None:
        """After a topic config change: persist the table (changes close together share
        one write), register again soon (likewise one registration)."""
        self._register_now.set()
        try:
            await self.topics.persist_coalesced()
        except OSError as e:
            if not self.config_write_failed(e, self.topics.path):
                raise
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE, (
                f"SERVICE_NOT_AVAILABLE: {self.store.disk_full.reason or 'disk full'}: the "
                "topic change is in use but not saved; it is written once space is freed"
            )) from None

    def master_available(self) -> bool:
        """A slave's view: its HA link to the master is up (a master is its own master)."""
        if not self.config.is_slave:
            return True
        return self.ha_client is not None and self.ha_client.status.connected

    def slave_read_allowed(self) -> bool:
        """A slave serves pulls when slaveReadEnable, or when its master is gone."""
        return (not self.config.is_slave or self.config.slave_read_enable
                or not self.master_available())

    # -- shared request checks -------------------------------------------------------------
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


__all__ = ["BrokerController", "ConfigError", "StoreDirLocked", "wall_clock_ms"]
