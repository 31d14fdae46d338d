"""BrokerController: wires the store, the gRPC services, the name server registration and
the periodic persistence of one broker (RocketMQ's BrokerController). Only the startup code
uses it: processors and services get the broker's context (broker/context.py).

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
import socket
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
    REMOTING_PORT_OFFSET,
    RETRY_FAILED_REGISTER_S,
    SEND_LISTEN_PORT_OFFSET,
    SHUTDOWN_GRACE_S,
    STATS_SAMPLE_INTERVAL_S,
)
from broker.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from broker.context import BrokerAddresses, BrokerContext
from broker.convert import UniqKeyFactory, format_host
from broker.message_filter import FilterRegistry
from broker.messaging import MessagingServicer
from broker.metrics import BrokerMetrics
from broker.persistence import ConfigManager
from broker.pull import PullRequestHoldService
from broker.putting import MessagePutter
from broker.register_body import TopicTableEncoder
from broker.registration import BrokerOuterAPI, RegistrationRefused
from broker.remoting4x.server import BrokerRemoting
from broker.replicas import ReplicasManager
from broker.schedule import ScheduleMessageService
from broker.send_channel import ChannelLimits, SendChannelServer
from broker.slave_sync import SlaveSynchronizer
from broker.stats import BrokerStats
from broker.status import RequestError
from broker.topic_config import Clock, TopicConfig, TopicConfigManager
from broker.transaction import ProducerCheckStreams, TransactionalMessageService
from broker.transaction.checks import check_request
from broker.transaction.prepare import HalfMessages
from common.constants import MASTER_ID
from ha.codec import SlaveHello
from ha.constants import HA_LISTEN_PORT_OFFSET
from ha.master import HAService, SlaveStatus
from ha.slave import HAClient
from mqproto import admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc, namesrv_pb2
from remoting.serving import add_servicer, log_accept_errors_briefly, watch_loop_stalls
from remoting.tls import ClientTls, ServerTls, TlsError
from store.config import StoreConfig
from store.constants import BrokerRole
from store.disk_full import is_disk_full
from store.message_store import DefaultMessageStore
from store.waiters import OffsetWaiters

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


def _listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket; OSError (naming the port) when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(128)
    except OSError as e:
        s.close()
        raise OSError(f"cannot listen on haListenPort {port}: {e}") from e
    return s


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
        self.putter: MessagePutter = None  # type: ignore[assignment]
        self.store_host: tuple[str, int] = ("127.0.0.1", 0)
        self.addresses = BrokerAddresses()
        # What the processors and services see of this broker, once the store is loaded.
        self.context: BrokerContext | None = None
        # HA (SPEC §5): a master serves slaves, a slave pulls from its master. SYNC_MASTER
        # sends wait on ha_waiters, advanced by the best slave ack.
        self.ha_waiters = OffsetWaiters(time.monotonic)
        # A slave copies its master's tables (SPEC §4) and reports offsets committed on it.
        self.slave_sync: SlaveSynchronizer | None = None
        # Transactions (broker/transaction): producers' check streams; a master's service.
        self.check_streams: ProducerCheckStreams[messaging_pb2.CheckTransactionStateRequest] = (
            ProducerCheckStreams())
        self.uniq_key = UniqKeyFactory("127.0.0.1")
        self._server: grpc.aio.Server | None = None
        self.messaging: MessagingServicer | None = None
        self.send_channel: SendChannelServer | None = None
        self.remoting: BrokerRemoting | None = None  # RocketMQ 4.x clients
        self.metrics: BrokerMetrics | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._register_now = asyncio.Event()
        # (data version, broker permission) -> the compressed topic table it registers
        self._register_body: tuple[tuple[object, int], bytes] | None = None
        self._topic_table_encoder = TopicTableEncoder()
        self._lock_fd: int | None = None
        # Controller mode (enableControllerMode): the controller decides the role.
        self.replicas: ReplicasManager | None = None
        self._ha_bind: tuple[str, int] = ("", 0)  # host, port a master's HA service takes
        self._ha_socket: socket.socket | None = None  # controller mode: the HA port, kept
        self._slave_sync_task: asyncio.Task[None] | None = None
        # Set when the broker must be started again (broker/startup.py does it).
        self.restart_requested = asyncio.Event()
        self._started = False
        self._stopped = False
        # A config file not written for lack of space before the store was made.
        self._disk_full_at_start: tuple[OSError, Path] | None = None

    # -- what tests and the startup code read of a running broker ------------------------
    @property
    def broker_addr(self) -> str:
        return self.addresses.broker_addr

    @property
    def ha_server_addr(self) -> str:
        return self.addresses.ha_server_addr

    @property
    def master_addr(self) -> str:
        return self.addresses.master_addr

    @master_addr.setter
    def master_addr(self, addr: str) -> None:  # tests point a slave at its master
        self.addresses.master_addr = addr

    @property
    def send_channel_addr(self) -> str:
        return self.addresses.send_channel_addr

    @property
    def metrics_addr(self) -> str:
        return self.addresses.metrics_addr

    @property
    def grpc_proxy_addr(self) -> str:
        return self.addresses.grpc_proxy_addr

    @property
    def ha_service(self) -> HAService | None:
        return self.context.ha_service if self.context is not None else None

    @property
    def ha_client(self) -> HAClient | None:
        return self.context.ha_client if self.context is not None else None

    @property
    def schedule(self) -> ScheduleMessageService | None:
        return self.context.schedule if self.context is not None else None

    @property
    def transactions(self) -> TransactionalMessageService | None:
        return self.context.transactions if self.context is not None else None

    def master_available(self) -> bool:
        return self.context is not None and self.context.master_available()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        """Binds, loads the store and config files, serves, registers; returns brokerAddr."""
        self._lock_store_dir()
        log_accept_errors_briefly(asyncio.get_running_loop(), log)
        self._start_acl()
        server = self._new_server()
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
        self.addresses.broker_addr = format_host((host, port))
        ha_port = self.config.ha_listen_port
        if ha_port < 0:  # unset: listenPort + 1, or any free port when listenPort is
            ha_port = port + HA_LISTEN_PORT_OFFSET if self.config.listen_port else 0
        ha_host = self.config.broker_ip2 or host  # slaves may reach us by another address
        if self.config.enable_controller_mode:
            # Any role may become master: its HA port is bound now and kept (its address is
            # told to the controller before it serves on it).
            self._ha_socket = _listening_socket(self.config.bind_address, ha_port)
            ha_port = self._ha_socket.getsockname()[1]
        self._ha_bind = (ha_host, ha_port)
        self.addresses.ha_server_addr = format_host((ha_host, ha_port))
        self.uniq_key = UniqKeyFactory(self.store_host[0])
        self.store_config.store_host = self.store_host

        await asyncio.to_thread(self._load_config_files)
        store = DefaultMessageStore(self.store_config, clock_ms=self.clock_ms)
        await asyncio.to_thread(store.load)
        self.store = store  # loaded: shutdown() closes it from here on
        if store.recovered_from_crash:
            log.warning("the store was not shut down cleanly: recovered from a crash")
        if self.config.enable_controller_mode:
            self.replicas = ReplicasManager(self.config, store, self.root / "epochFileCheckpoint",
                                            self.broker_addr, self.addresses.ha_server_addr)
            await self.replicas.prepare()  # may cut a tail the master never had
        store.start()
        loop = asyncio.get_running_loop()
        self.pull_hold = PullRequestHoldService(loop, store.get_max_offset_in_queue)
        store.arriving_listeners.append(self.pull_hold.on_message_arriving)
        self.putter = MessagePutter(store, self.stats, self.config.broker_role,
                                    self.store_config.flush_disk_type, self.ha_waiters)
        self.context = context = BrokerContext(
            config=self.config, store_config=self.store_config, clock_ms=self.clock_ms,
            store=store, topics=self.topics, offsets=self.offsets,
            delay_offsets=self.delay_offsets, stats=self.stats, clients=self.clients,
            filters=self.filters, pull_hold=self.pull_hold, putter=self.putter,
            topics_changed=self.topics_changed, check_streams=self.check_streams,
            store_host=self.store_host, uniq_key=self.uniq_key, addresses=self.addresses)
        if self._disk_full_at_start is not None:
            self.config_write_failed(*self._disk_full_at_start)
        self._add_services(server, context)
        if self.config.is_slave:
            self.slave_sync = SlaveSynchronizer(
                context, self.config.slave_synchronize_interval / 1000,
                self.config.register_broker_timeout_mills / 1000,
                auth=self.cluster_auth, tls=self.peer_tls)
        await self._start_ha(ha_host, ha_port)
        await self._start_send_channel(host, port)
        await self._start_metrics(host)
        await self._start_remoting(host, port)

        await server.start()
        self._started = True
        context.boot_timestamp = self.clock_ms()
        # The address clients are given, and where each port listens (bindAddress): they
        # differ with the default bindAddress 0.0.0.0 (every interface).
        log.info("broker %s (%s, id %d, %s) serving on %s (listening on %s: %s), store %s",
                 self.config.broker_name, self.config.broker_cluster_name,
                 self.config.broker_id, self.config.broker_role.value, self.broker_addr,
                 self.config.bind_address, self._listening(port), self.root)
        await self.register_broker_all()
        if self.outer_api.all_refused():
            raise RegistrationRefused(
                "every name server refused this broker's registration, so none of its "
                "topics is routable: " + "; ".join(
                    f"{a}: {why}" for a, why in self.outer_api.refused.items()))
        # A name server that comes back (or restarted) hears from this broker at once.
        self.outer_api.start_links(self.broker_addr, lambda _addr: self._register_now.set(),
                                   self._master_registered)
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
            self._slave_sync_task = asyncio.create_task(self.slave_sync.run(),
                                                        name="slaveSynchronize")
        else:
            self._start_master_services()
        if self.replicas is not None:
            self.replicas.start(self)
        return self.broker_addr

    def _start_master_services(self) -> None:
        context = self.context
        assert context is not None
        context.schedule = ScheduleMessageService(self.store, self.delay_offsets,
                                                  self.putter.put_one, self.clock_ms)
        context.schedule.start()
        context.transactions = TransactionalMessageService(
            context, lambda group, half: self.check_streams.send(
                group, check_request(half), topic=half.topic),
            self.check_streams.groups, clock_ms=self.clock_ms, sleep=self._sleep)
        context.transactions.start()

    async def _stop_master_services(self) -> None:
        context = self.context
        assert context is not None
        if context.schedule is not None:
            await context.schedule.stop()
            context.schedule = None
        if context.transactions is not None:
            await context.transactions.stop()
            context.transactions = None

    # -- controller mode: the role changes at run time -----------------------------------
    def _set_role(self, role: BrokerRole, broker_id: int) -> None:
        self.config.broker_role = role
        self.config.broker_id = broker_id
        self.store_config.broker_role = role
        self.store.role = role
        self.putter.role = role
        self.offsets.track_local_commits = role is BrokerRole.SLAVE

    async def become_master(self, epoch: int) -> None:
        """The controller made this broker master: stop following, serve slaves, take the
        master's services, register with every name server at once."""
        context = self.context
        assert context is not None
        if context.ha_client is not None:
            await context.ha_client.stop()
            context.ha_client = None
        if self._slave_sync_task is not None:
            self._slave_sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._slave_sync_task
            self._slave_sync_task = None
        self.slave_sync = None
        self.config.ha_master_address = ""
        self.addresses.master_addr = ""
        self._set_role(self.config.controller_master_role, MASTER_ID)
        if context.ha_service is None:
            await self._start_ha(*self._ha_bind)
        if context.schedule is None:
            self._start_master_services()
        await self.register_broker_all()

    async def become_slave(self, master_addr: str, master_ha_addr: str) -> None:
        """The controller made another broker master: stop serving as master, follow it."""
        context = self.context
        assert context is not None
        if context.ha_service is not None:
            self.putter.replicator = None
            await context.ha_service.stop()
            context.ha_service = None
            self.ha_waiters.fail_all()
        await self._stop_master_services()
        self._set_role(BrokerRole.SLAVE, self.config.replica_id)
        self.config.ha_master_address = master_ha_addr
        self.addresses.master_addr = master_addr
        if context.ha_client is not None:
            context.ha_client.update_master_address(master_ha_addr)
            context.ha_client.reconnect_now()
        else:
            if self.slave_sync is None:
                self.slave_sync = SlaveSynchronizer(
                    context, self.config.slave_synchronize_interval / 1000,
                    self.config.register_broker_timeout_mills / 1000,
                    auth=self.cluster_auth, tls=self.peer_tls)
                self._slave_sync_task = asyncio.create_task(self.slave_sync.run(),
                                                            name="slaveSynchronize")
            await self._start_ha(*self._ha_bind)
        if self.slave_sync is not None:
            self.slave_sync.wake()
        await self.register_broker_all()

    def slave_statuses(self) -> list[SlaveStatus]:
        service = self.ha_service
        return service.slave_statuses() if service is not None else []

    def request_restart(self, reason: str) -> None:
        """Controller mode: this broker must start again (its store cut first); the startup
        code does it in this process."""
        log.warning("controller mode: restarting this broker in place: %s", reason)
        self.restart_requested.set()

    def master_linked(self) -> bool:
        return self.config.is_slave and self.master_available()

    def count_acks_of(self, slaves: frozenset[int]) -> None:
        service = self.ha_service
        if service is not None:
            service.counted_slaves = slaves
            service.all_ack = self.config.all_ack_in_sync_state_set
            service.acked()

    def _listening(self, grpc_port: int) -> str:
        """`gRPC 10911, HA 10912, send channel 10913, metrics 5557`: the ports this broker
        listens on (all on bindAddress; the v2 endpoint's is logged when it starts)."""
        ports = [("gRPC", grpc_port)]
        if self.ha_service is not None:
            ports.append(("HA", self.ha_service.port))
        for name, addr in (("send channel", self.send_channel_addr),
                           ("remoting", self.addresses.remoting_addr),
                           ("metrics", self.metrics_addr)):
            if addr:
                ports.append((name, int(addr.rpartition(":")[2])))
        return ", ".join(f"{name} {port}" for name, port in ports)

    async def _start_ha(self, host: str, ha_port: int) -> None:
        assert self.context is not None
        if self.config.is_slave:
            assert self.slave_sync is not None
            c = self.config
            client = HAClient(
                self.store, c.ha_master_address, on_connected=self.slave_sync.wake,
                hello=SlaveHello(c.broker_id, c.broker_name, self.broker_addr),
                housekeeping_interval=c.ha_housekeeping_interval / 1000,
                cluster_key=c.cluster_key,
                ssl_context=self._ssl(self.peer_tls))
            self.context.ha_client = client
            client.start()
            return
        service = HAService(self.store, host=self.config.bind_address, port=ha_port,
                            on_ack=self.ha_waiters.advance,
                            slave_fallbehind_max=self.config.ha_slave_fallbehind_max,
                            max_time_slave_not_catchup_ms=(
                                self.config.ha_max_time_slave_not_catchup),
                            housekeeping_interval=self.config.ha_housekeeping_interval / 1000,
                            cluster_key=self.config.cluster_key,
                            ssl_context=self._ssl(self.tls),
                            sock=self._ha_socket.dup() if self._ha_socket is not None else None)
        try:
            bound = await service.start()
        except OSError as e:
            raise OSError(f"cannot listen on haListenPort {ha_port}: {e}") from e
        self.context.ha_service = service
        self.putter.replicator = service
        # With a write buffer, a put becomes readable only when committed: wake HA then too.
        self.store.commit_listeners.append(lambda _: service.notify_data_arrived())
        self.addresses.ha_server_addr = format_host((host, bound))

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
        self.addresses.send_channel_addr = format_host((host, bound))

    async def _start_remoting(self, host: str, port: int) -> None:
        """RocketMQ 4.x clients' port (remotingPort, remotingEnable), registered with the
        name servers so that their routes name it."""
        remoting_port = self.config.remoting_port
        if not self.config.remoting_enable:
            return
        if self.config.tls_enable:
            log.warning("remotingPort off: the RocketMQ 4.x port does not serve with "
                        "tlsEnable yet")
            return
        if remoting_port < 0:  # unset: listenPort + 4, or any free port when listenPort is
            remoting_port = port + REMOTING_PORT_OFFSET if self.config.listen_port else 0
        assert self.context is not None and self.messaging is not None
        remoting = BrokerRemoting(self.context, self.messaging.send, self.messaging.pull,
                                  self.messaging.queue_locks, self.auth)
        try:
            bound = await remoting.start(self.config.bind_address, remoting_port)
        except OSError as e:
            raise OSError(f"cannot listen on remotingPort {remoting_port}: {e}") from e
        self.remoting = remoting
        self.addresses.remoting_addr = format_host((host, bound))

    async def _start_metrics(self, host: str) -> None:
        port = self.config.metrics_port
        if port == 0:
            return
        assert self.context is not None
        metrics = BrokerMetrics(self.context)
        try:
            bound = await metrics.start(self.config.bind_address, port)
        except OSError as e:
            raise OSError(f"cannot listen on metricsPort {port}: {e}") from e
        self.metrics = metrics
        self.addresses.metrics_addr = format_host((host, bound))
        log.info("metrics served on http://%s/metrics", self.metrics_addr)

    async def _stop_ha(self) -> None:
        context = self.context
        if context is not None and context.ha_client is not None:
            await context.ha_client.stop()
            context.ha_client = None
        if context is not None and context.ha_service is not None:
            self.putter.replicator = None
            await context.ha_service.stop()
            context.ha_service = None
        self.ha_waiters.fail_all()

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
        return self.context is not None and self.context.config_write_failed(err, path)

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

    def _new_server(self) -> grpc.aio.Server:
        max_receive = 2 * self.store_config.max_message_size + (1 << 20)
        return grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", max_receive),
            ("grpc.max_send_message_length", -1),
        ], interceptors=[self.auth] if self.auth is not None else None)

    def _add_services(self, server: grpc.aio.Server, context: BrokerContext) -> None:
        """The messaging and admin services, on the loaded store (before the server starts)."""
        self.messaging = MessagingServicer(context)
        self.messaging.send.half_messages = HalfMessages(context)  # transactions
        # Requests that do not decode answer INVALID_ARGUMENT (one log line), not UNKNOWN.
        add_servicer(server, messaging_pb2_grpc.add_MessagingServiceServicer_to_server,
                     self.messaging, log)
        add_servicer(server, admin_pb2_grpc.add_AdminServiceServicer_to_server,
                     AdminServicer(context), log)

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
        if self.replicas is not None:
            await self.replicas.stop()
        if self._started:
            await self.unregister_broker_all()
        if self.pull_hold is not None:
            self.pull_hold.shutdown()
        if self.send_channel is not None:
            await self.send_channel.stop(grace)
            self.send_channel = None
        if self.remoting is not None:
            await self.remoting.stop()
            self.remoting = None
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
        if self._slave_sync_task is not None:
            self._tasks.append(self._slave_sync_task)
            self._slave_sync_task = None
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
        if self._ha_socket is not None:
            self._ha_socket.close()
            self._ha_socket = None
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
            remoting_addr=self.addresses.remoting_addr,
            data_version=data_version_to_proto(key[0]),
            compressed_topic_configs=cached[1])

    async def register_broker_all(self) -> int:
        """Registers with every name server; returns how many answered."""
        if not self.outer_api.namesrv_addrs:
            return 0
        answers = await self.outer_api.register_broker_all(await self.register_request())
        if self.config.enable_controller_mode:  # the controller names the master
            return len(answers)
        for answer in answers:
            if answer.master_addr and answer.master_addr != self.master_addr:
                self.addresses.master_addr = answer.master_addr
                log.info("master of %s is %s (HA %s)", self.config.broker_name,
                         answer.master_addr, answer.ha_server_addr)
                if self.slave_sync is not None:
                    self.slave_sync.wake()
            if (self.ha_client is not None and answer.ha_server_addr
                    and not self.config.ha_master_address):
                self.ha_client.update_master_address(answer.ha_server_addr)
        return len(answers)

    def _master_registered(self, master_addr: str, ha_server_addr: str) -> None:
        """A name server says this group's master registered anew (it started or
        restarted): a slave links to it now, not at its next reconnect attempt."""
        client = self.ha_client
        if client is None or self.config.enable_controller_mode:
            return
        log.info("name server: master %s of %s registered (HA %s)", master_addr,
                 self.config.broker_name, ha_server_addr)
        if master_addr != self.master_addr:
            self.master_addr = master_addr
            if self.slave_sync is not None:
                self.slave_sync.wake()
        if ha_server_addr and not self.config.ha_master_address:
            client.update_master_address(ha_server_addr)
        client.reconnect_now()

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
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE, (  # clients prefix the code
                f"{self.store.disk_full.reason or 'disk full'}: the topic change is in use "
                "but not saved; it is written once space is freed"
            )) from None


__all__ = ["BrokerController", "ConfigError", "StoreDirLocked", "wall_clock_ms"]
