"""The client's I/O thread and its gRPC channels.

All network work of producers and consumers (route refreshes, heartbeats, async sends,
pulls, rebalancing) runs on one asyncio event loop in a daemon thread shared by every client
of the process; people call the sync API from their own threads. Sync sends skip the hop to
that thread and use a blocking gRPC channel on the caller's thread (lower latency).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc

from mqproto import messaging_pb2_grpc, namesrv_pb2_grpc

T = TypeVar("T")
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),
]


class ClientLoop:
    """An event loop running forever in a daemon thread."""

    _shared: ClientLoop | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "mqclient-io") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> ClientLoop:
        with cls._shared_lock:
            if cls._shared is None or not cls._shared.thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the loop and waits for it; not callable from the loop itself."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking client call was made on the client's I/O thread "
                               "(inside an async listener or callback); await the async "
                               "variant instead")
        return self.submit(coro).result(timeout)


class Channels:
    """One client's channels by address. The aio ones belong to the client loop (create and
    use them there only); the sync ones may be used from any thread."""

    def __init__(self) -> None:
        self._aio: dict[str, grpc.aio.Channel] = {}
        self._sync: dict[str, grpc.Channel] = {}
        self._sync_stubs: dict[str, messaging_pb2_grpc.MessagingServiceStub] = {}
        self._aio_stubs: dict[str, messaging_pb2_grpc.MessagingServiceStub] = {}
        self._lock = threading.Lock()
        self.closed = False

    def _aio_channel(self, address: str) -> grpc.aio.Channel:
        channel = self._aio.get(address)
        if channel is None:
            channel = self._aio[address] = grpc.aio.insecure_channel(
                address, options=CHANNEL_OPTIONS)
        return channel

    def messaging(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        """The asyncio stub of a broker (on the client loop only)."""
        stub = self._aio_stubs.get(address)
        if stub is None:
            stub = self._aio_stubs[address] = messaging_pb2_grpc.MessagingServiceStub(
                self._aio_channel(address))
        return stub

    def namesrv(self, address: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        return namesrv_pb2_grpc.NamesrvServiceStub(self._aio_channel(address))

    def sync_messaging(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        """The blocking stub of a broker (any thread)."""
        stub = self._sync_stubs.get(address)
        if stub is not None:
            return stub
        with self._lock:
            if self.closed:
                raise RuntimeError("the client is shut down")
            stub = self._sync_stubs.get(address)
            if stub is None:
                channel = self._sync[address] = grpc.insecure_channel(
                    address, options=CHANNEL_OPTIONS)
                stub = self._sync_stubs[address] = messaging_pb2_grpc.MessagingServiceStub(
                    channel)
            return stub

    async def close(self) -> None:
        """On the client loop: closes every channel."""
        with self._lock:
            self.closed = True
            sync = list(self._sync.values())
            self._sync.clear()
            self._sync_stubs.clear()
        for channel in sync:
            channel.close()
        aio = list(self._aio.values())
        self._aio.clear()
        self._aio_stubs.clear()
        for achannel in aio:
            await achannel.close()
