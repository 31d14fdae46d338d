"""The v2 gRPC server of one broker, on grpcProxyPort (broker.conf): RocketMQ 5's proxy in
local mode. broker/startup.py starts it once the broker serves and stops it first."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc

from broker.constants import GRPC_PROXY_PORT_OFFSET
from broker.context import BrokerContext
from broker.convert import format_host
from broker.send import SendProcessor
from mqproto.v2 import service_pb2_grpc
from proxy.consume import PopService
from proxy.pop import PopStateStore
from proxy.route import RouteService
from proxy.service import MessagingServiceV2
from proxy.timer import TimerService
from remoting.serving import add_servicer

log = logging.getLogger(__name__)

STOP_GRACE_S = 1.0


class GrpcProxy:
    def __init__(self, broker: BrokerContext, sender: SendProcessor) -> None:
        self.broker = broker
        root = Path(broker.store_config.store_path_root_dir)
        self.state = PopStateStore(root / "config", self._commit,
                                   on_write_failed=self._log_write_failed)
        self.pop = PopService(broker, sender, self.state,
                              broker.config.grpc_proxy_max_delivery_attempts)
        self.route = RouteService(broker)
        self.timer = TimerService(broker)
        self.service = MessagingServiceV2(broker, sender, self.route, self.pop, self.timer)
        self.server: grpc.aio.Server | None = None
        self.addr = ""

    def _log_write_failed(self, error: OSError) -> None:
        """A full disk under the pop state log is the store's disk-full state (logged once,
        puts refused until space is back); any other error is logged here."""
        if not self.broker.store.disk_full.report(error, f"cannot write {self.state.path}"):
            log.error("cannot write the pop state log %s: %s", self.state.path, error)

    def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's consumer offset on the broker (for consumerProgress and the lag)."""
        self.broker.offsets.commit_offset(group, topic, queue_id, offset)

    @classmethod
    async def start_for(cls, broker: BrokerContext, sender: SendProcessor) -> GrpcProxy | None:
        """Serves v2 for a started broker, sending through its send processor; None when
        grpcProxyPort is 0 (off)."""
        port = broker.config.grpc_proxy_port
        if port == 0:
            return None
        if broker.config.acl_enable or broker.config.tls_enable:
            # The v2 endpoint has neither yet: serving it would bypass the broker's access
            # control (and its encryption).
            log.warning("grpcProxyPort off: the v2 endpoint (RocketMQ 5 SDKs) does not "
                        "serve with aclEnable or tlsEnable yet")
            return None
        if port < 0:  # unset: listenPort + 3, or any free port when listenPort is
            listen = broker.config.listen_port
            port = int(broker.addresses.broker_addr.rpartition(":")[2]) + GRPC_PROXY_PORT_OFFSET \
                if listen else 0
        proxy = cls(broker, sender)
        await proxy.start(port)
        return proxy

    async def start(self, port: int) -> str:
        broker = self.broker
        await asyncio.to_thread(self.state.load)
        # consumerOffset.json is written every few seconds: after a kill it may lag behind
        # the pop state's log, which has every ack. The log wins (a later difference is an
        # admin's reset).
        for (group, topic, queue_id), queue in self.state.items():
            self._commit(group, topic, queue_id, queue.commit)
        max_receive = 2 * broker.store_config.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", max_receive),
            ("grpc.max_send_message_length", -1),
        ])
        add_servicer(server, service_pb2_grpc.add_MessagingServiceServicer_to_server,
                     self.service, log)
        try:
            bound = server.add_insecure_port(format_host((broker.config.bind_address, port)))
        except RuntimeError as e:
            raise OSError(f"cannot listen on grpcProxyPort {port}: {e}") from e
        if bound == 0:
            raise OSError(f"cannot listen on grpcProxyPort {port}")
        await server.start()
        self.server = server
        host = broker.addresses.broker_addr.rpartition(":")[0].removeprefix("[").removesuffix("]")
        self.addr = format_host((host, bound))
        broker.addresses.grpc_proxy_addr = self.addr
        self.pop.start()
        self.timer.start()
        log.info("broker %s serves apache.rocketmq.v2 (RocketMQ 5 SDKs) on %s (listening on "
                 "%s)", broker.config.broker_name, self.addr,
                 format_host((broker.config.bind_address, bound)))
        return self.addr

    async def stop(self) -> None:
        self.service.closed.set()
        await self.pop.stop()
        await self.timer.stop()
        if self.server is not None:
            await self.server.stop(STOP_GRACE_S)
            self.server = None
        await self.service.peers.close()
        await self.route.close()
        self.state.close()
        self.broker.addresses.grpc_proxy_addr = ""
