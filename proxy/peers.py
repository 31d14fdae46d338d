"""A SimpleConsumer's receive served from the topic's other brokers, and the acks of what
they served forwarded to them.

The SDK's SimpleConsumer sends each receive to one queue's broker, in turn over the
topic's queues of every broker. A broker with nothing for the group held the call for its
whole long-polling time (20 s) while another broker had the message: the first receive of
a fresh topic came back empty after 20 s, the next one (on the other broker) at once. A
receive naming a queue (a SimpleConsumer's; the PushConsumer's name every broker, queue
-1, and poll each) that finds nothing here asks the topic's other masters, on their v2
endpoint and without waiting there, at once and then once a second while it waits.

The messages keep the receipt handles of the broker that served them (its pop state has
them in flight). The SDK sends their ack, change of invisible duration or move to the DLQ
to the broker it received them from: this one forwards those to the handle's broker.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import grpc
from google.protobuf import duration_pb2

from broker.registration import CHANNEL_OPTIONS
from common.constants import PERM_READ
from mqproto.v2 import definition_pb2 as D
from mqproto.v2 import service_pb2 as S
from mqproto.v2 import service_pb2_grpc
from proxy.convert import ReceiptHandle, V2Error
from proxy.route import RouteService
from remoting.tls import aio_channel

log = logging.getLogger(__name__)
Metadata = tuple[tuple[str, str], ...]
Forwarded = S.ChangeInvisibleDurationRequest | S.ForwardMessageToDeadLetterQueueRequest

PEER_POLL_INTERVAL_S = 1.0  # a waiting receive asks the other brokers this often
PEER_CALL_TIMEOUT_S = 3.0
PEER_ROUTE_TTL_S = 10.0  # the other brokers of a topic are looked up again after this
MAX_CACHED_ROUTES = 10_000


def handle_broker(receipt_handle: str) -> str | None:
    """The broker a receipt handle names; None when it is not one (the local checks say
    what is wrong with it)."""
    try:
        return ReceiptHandle.decode(receipt_handle).broker_name
    except V2Error:
        return None


class PeerBrokers:
    def __init__(self, broker_name: str, route: RouteService) -> None:
        self.broker_name = broker_name
        self.route = route
        self._routes: dict[str, tuple[float, dict[str, str]]] = {}  # topic -> (when, peers)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._unanswered: set[str] = set()  # peers whose failure was logged (once each)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def peers(self, topic: str) -> dict[str, str]:
        """Broker name -> v2 address of the topic's other readable masters."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < PEER_ROUTE_TTL_S:
            return cached[1]
        try:
            route = await self.route.topic_route(topic)
        except V2Error as e:
            log.debug("other brokers of %s not known now: %s", topic, e.message)
            return cached[1] if cached is not None else {}
        peers = {q.broker_name: q.v2_addr for q in route
                 if q.broker_name != self.broker_name and q.read_queue_nums > 0
                 and q.perm & PERM_READ}
        if len(self._routes) >= MAX_CACHED_ROUTES:
            self._routes.clear()
        self._routes[topic] = (now, peers)
        return peers

    def _stub(self, addr: str) -> service_pb2_grpc.MessagingServiceStub:
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = aio_channel(addr, self.route.tls, CHANNEL_OPTIONS)
        return service_pb2_grpc.MessagingServiceStub(channel)

    def _failed(self, addr: str, what: str, e: grpc.aio.AioRpcError) -> None:
        if addr not in self._unanswered:
            self._unanswered.add(addr)
            log.warning("%s at broker %s failed: %s %s (said once per broker)", what, addr,
                        e.code().name, e.details())

    async def receive(self, request: S.ReceiveMessageRequest, batch: int, *,
                      metadata: Metadata) -> list[D.Message]:
        """Up to `batch` messages of the other brokers for the request's group, none
        waited for."""
        topic = request.message_queue.topic.name
        peers = list((await self.peers(topic)).items())
        random.shuffle(peers)  # no broker always asked first
        out: list[D.Message] = []
        for name, addr in peers:
            if len(out) >= batch:
                break
            forwarded = S.ReceiveMessageRequest()
            forwarded.CopyFrom(request)
            forwarded.message_queue.id = -1  # every queue of that broker; not forwarded on
            forwarded.message_queue.broker.CopyFrom(D.Broker(name=name))
            forwarded.batch_size = batch - len(out)
            forwarded.long_polling_timeout.CopyFrom(duration_pb2.Duration())
            try:
                async for r in self._stub(addr).ReceiveMessage(
                        forwarded, timeout=PEER_CALL_TIMEOUT_S, metadata=metadata):
                    if r.HasField("message"):
                        out.append(r.message)
            except grpc.aio.AioRpcError as e:
                self._failed(addr, f"receive of {topic} for {request.group.name}", e)
                continue
            self._unanswered.discard(addr)
        return out

    def served(self, receipt_handle: str) -> str | None:
        """The other broker a receipt handle names (the message was received here from
        it); None when it names this one or is no handle at all."""
        name = handle_broker(receipt_handle)
        return name if name is not None and name != self.broker_name else None

    async def _addr(self, topic: str, broker_name: str) -> str:
        addr = (await self.peers(topic)).get(broker_name)
        if addr is None:
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"the receipt handle is of broker {broker_name}, which serves "
                          f"no queue of {topic} now")
        return addr

    async def ack(self, request: S.AckMessageRequest, metadata: Metadata
                  ) -> list[S.AckMessageResultEntry]:
        """The results of the request's entries served by other brokers, acked there (one
        call per broker)."""
        by_broker: dict[str, list[S.AckMessageEntry]] = {}
        for entry in request.entries:
            name = self.served(entry.receipt_handle)
            if name is not None:
                by_broker.setdefault(name, []).append(entry)
        results: list[S.AckMessageResultEntry] = []
        for name, entries in by_broker.items():
            forwarded = S.AckMessageRequest(group=request.group, topic=request.topic,
                                            entries=entries)
            try:
                addr = await self._addr(request.topic.name, name)
                try:
                    answer = await self._stub(addr).AckMessage(
                        forwarded, timeout=PEER_CALL_TIMEOUT_S, metadata=metadata)
                except grpc.aio.AioRpcError as e:
                    raise _unreachable(name, e) from None
                results.extend(answer.entries)
            except V2Error as e:
                results.extend(S.AckMessageResultEntry(
                    message_id=m.message_id, receipt_handle=m.receipt_handle,
                    status=e.status()) for m in entries)
        return results

    async def forward(self, method: str, request: Forwarded, metadata: Metadata) -> Any:
        """ChangeInvisibleDuration or ForwardMessageToDeadLetterQueue of a message another
        broker served: that broker's answer."""
        name = self.served(request.receipt_handle) or ""
        addr = await self._addr(request.topic.name, name)
        try:
            return await getattr(self._stub(addr), method)(
                request, timeout=PEER_CALL_TIMEOUT_S, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            raise _unreachable(name, e) from None


def _unreachable(broker_name: str, e: grpc.aio.AioRpcError) -> V2Error:
    return V2Error(D.PROXY_TIMEOUT if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                   else D.INTERNAL_SERVER_ERROR,
                   f"broker {broker_name}, which handed out the message, did not answer: "
                   f"{e.code().name}")
