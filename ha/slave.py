"""Slave side of HA (RocketMQ's HAClient, SPEC §5).

Connects to the master's HA address, reports its commitlog max offset (on connect, after
applied frames that moved it, and every haSendHeartbeatInterval), appends frame bodies at
exactly its max offset, drops a link silent for haHousekeepingInterval and reconnects
(soon while the master is down or restarting: ha/backoff.py).
The socket reads straight into one large buffer (a BufferedProtocol) and frame bodies go
to the store as views of it: no copy on the way, few large reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

from ha.auth import sign_hello
from ha.backoff import ReconnectBackoff
from ha.codec import (
    FRAME_HEADER_SIZE,
    FrameSpan,
    HACodecError,
    SlaveHello,
    encode_ack,
    encode_hello,
    scan_frames,
)
from ha.constants import (
    HA_CONNECT_RETRY_DOWN_INTERVAL,
    HA_CONNECT_RETRY_INTERVAL,
    HA_CONNECT_RETRY_MIN_INTERVAL,
    HA_CONNECT_TIMEOUT,
    HA_HOUSEKEEPING_INTERVAL,
    HA_READ_MAX_SIZE,
    HA_SEND_HEARTBEAT_INTERVAL,
)
from ha.interface import HAStore
from ha.proof import with_proof
from ha.rate import TransferRate

log = logging.getLogger(__name__)

_MAX_FRAME_BODY = 64 * 1024 * 1024  # anything larger is garbage, not a frame
_MIN_BUFFER = 64 * 1024
_MIN_READ = 64 * 1024  # below this much free space the buffer is compacted first
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # the store cannot append: its disk is full


class HALinkError(Exception):
    """Why the slave closed its link to the master."""


@dataclasses.dataclass(slots=True)
class HAClientStatus:
    master_address: str = ""
    connected: bool = False
    reported_offset: int = -1  # the last ack sent
    master_offset: int = -1  # the offset of the last frame (or heartbeat) received
    last_read_time: float = 0.0  # clock() of the last bytes from the master
    last_report_time: float = 0.0  # clock() of the last ack sent
    connect_count: int = 0
    last_error: str = ""


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class HAClient:
    """The slave's HA client. Intervals are seconds; `clock` is monotonic seconds."""

    def __init__(self, store: HAStore, master_address: str = "", *,
                 hello: SlaveHello | None = None,
                 report_interval: float = HA_SEND_HEARTBEAT_INTERVAL / 1000,
                 housekeeping_interval: float = HA_HOUSEKEEPING_INTERVAL / 1000,
                 reconnect_interval: float = HA_CONNECT_RETRY_INTERVAL / 1000,
                 reconnect_down_interval: float = HA_CONNECT_RETRY_DOWN_INTERVAL / 1000,
                 reconnect_min_interval: float = HA_CONNECT_RETRY_MIN_INTERVAL / 1000,
                 connect_timeout: float = HA_CONNECT_TIMEOUT / 1000,
                 read_size: int = HA_READ_MAX_SIZE,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 backoff: ReconnectBackoff | None = None,
                 on_connected: Callable[[], None] | None = None,
                 cluster_key: str = "", ssl_context: ssl.SSLContext | None = None) -> None:
        """`on_connected` runs on the loop each time a link to the master is up (the broker
        then reconciles its consumer offsets with the master at once). `hello` tells the
        master who this slave is, first thing on every link. The reconnect waits
        (ha/backoff.py): from `reconnect_min_interval`, doubling up to
        `reconnect_down_interval` while the master's port does not take the connection, up
        to `reconnect_interval` while the master takes it and drops it before any data;
        `backoff` replaces them (a test's, with its own random numbers)."""
        self.store = store
        self.hello = hello
        self.cluster_key = cluster_key  # signs the hello (ha/auth.py); empty: unsigned
        self.ssl_context = ssl_context  # TLS to the master's HA port; None: plain TCP
        self.report_interval = report_interval
        self.housekeeping_interval = housekeeping_interval
        down_cap = min(reconnect_down_interval, reconnect_interval)
        self.backoff = backoff or ReconnectBackoff(min(reconnect_min_interval, down_cap),
                                                   down_cap, reconnect_interval)
        self.connect_timeout = min(connect_timeout, housekeeping_interval)
        self._sleep = sleep
        self._link_connected = False  # the master took this attempt's connection
        self._link_worked = False  # and its frames were applied
        self._failures = 0  # attempts failed since the last link that worked
        self._failing_since = 0.0
        self._warned = ""  # the error logged last at WARNING
        self.read_size = read_size
        self.clock = clock
        self.on_connected = on_connected
        self.status = HAClientStatus(master_address)
        self.received = TransferRate(clock)
        self._task: asyncio.Task[None] | None = None
        self._link_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # ends the wait before the next attempt
        self._last_report = 0.0
        self._stopping = False

    @property
    def master_address(self) -> str:
        return self.status.master_address

    def update_master_address(self, address: str) -> None:
        """A new master (from the name servers): drops the current link, connects there."""
        if address == self.status.master_address:
            return
        log.info("HA master address %r -> %r", self.status.master_address, address)
        self.status.master_address = address
        if self._link_task is not None:
            self._link_task.cancel()
        self._wake.set()

    def reconnect_now(self) -> None:
        """The master is back (the name server says it registered anew): a slave without
        a link tries at once instead of after the rest of its wait."""
        if not self.status.connected:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="HAClient")

    async def stop(self) -> None:
        self._stopping = True
        task = self._task
        if task is None:
            return
        # Cancel until done: a cancel that races a finishing connect can be lost (3.11).
        while not task.done():
            task.cancel()
            if self._link_task is not None:
                self._link_task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        self._task = None

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()  # a wake-up from here on ends the wait after this attempt
            address = self.status.master_address
            if address:
                self._link_connected = self._link_worked = False
                self._link_task = asyncio.create_task(self._link(address))
                try:
                    await self._link_task
                except asyncio.CancelledError:
                    if self._stopping:
                        raise
                    self.status.last_error = f"link to {address} closed: master address changed"
                except (OSError, ValueError, HACodecError, HALinkError, TimeoutError) as e:
                    error = f"link to {address}: {str(e) or type(e).__name__}"
                    if isinstance(e, OSError) and e.errno in _NO_SPACE:
                        # The store's disk-full state said so once; try again less often
                        # (connected, not worked: the waits grow as for a refused link).
                        self.status.last_error = error
                        self._link_worked = False
                    else:
                        self._link_failed(error)
                except Exception as e:  # a store failure: report it, keep retrying
                    self._link_failed(f"link to {address} failed: {e!r}", exc_info=True)
                finally:
                    self._link_task = None
                    self.status.connected = False
                if self.status.master_address != address:
                    self.backoff.reset()
                    self._failures = 0
                    continue
            if self._link_worked:
                self.backoff.reset()
            await self._pause(self.backoff.after_failure(self._link_connected))

    def _link_failed(self, error: str, exc_info: bool = False) -> None:
        """Logs the first failure since a link that worked, and each that fails otherwise
        than the one before; retries that fail alike only at DEBUG (a master down a while
        is retried every few hundred milliseconds)."""
        self.status.last_error = error
        if self._link_worked or not self._failures:
            self._failures = 0
            self._failing_since = self.clock()
            self._warned = ""
        if error != self._warned:
            self._warned = error
            log.warning("HA %s; reconnecting", error, exc_info=exc_info)
        else:
            log.debug("HA %s", error, exc_info=exc_info)
        self._failures += 1

    async def _pause(self, delay: float) -> None:
        """`delay` seconds, or until woken (a new master address, or the master back)."""
        sleeper = asyncio.ensure_future(self._sleep(delay))
        changed = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            changed.cancel()

    async def _link(self, address: str) -> None:
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        try:
            transport, link = await asyncio.wait_for(
                loop.create_connection(lambda: _LinkProtocol(self, self.read_size), host, port,
                                       ssl=self.ssl_context,
                                       server_hostname=host if self.ssl_context else None),
                self.connect_timeout)
        except TimeoutError:
            raise HALinkError(f"no answer to the connect within {self.connect_timeout:g} s "
                              "(TimeoutError)") from None
        self._link_connected = self.status.connected = True
        self.status.connect_count += 1
        self.status.last_read_time = self.clock()
        retried = (f" (link down {self.clock() - self._failing_since:.1f} s, attempt "
                   f"{self._failures})" if self._failures else "")
        log.info("HA connected to master %s, slave max offset %d%s", address,
                 self.store.max_phy_offset, retried)
        if self.on_connected is not None:
            try:
                self.on_connected()
            except Exception:
                log.exception("HA on_connected callback failed")
        reporter = asyncio.create_task(self._report_loop(transport))
        try:
            if self.hello is not None:
                hello = with_proof(self.hello, self.store)  # at the offset reported next
                if self.cluster_key:
                    hello = sign_hello(hello, self.cluster_key)
                transport.write(encode_hello(hello))  # type: ignore[attr-defined]
            self._report(transport)
            await self._watch(link)
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reporter
            if link.closed.done():
                link.closed.exception()  # retrieved here; raised above when it ended the link
            else:
                link.closed.set_result(None)  # so that connection_lost records nothing more
            transport.close()

    async def _watch(self, link: _LinkProtocol) -> None:
        """Until the link fails; drops it when the master was silent too long."""
        timeout = self.housekeeping_interval
        while True:
            idle = self.clock() - self.status.last_read_time
            if idle >= timeout:
                raise HALinkError(f"nothing from the master for {timeout:g} s: link dropped")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(link.closed), timeout - idle)

    def _report(self, transport: asyncio.BaseTransport) -> None:
        offset = self.store.max_phy_offset
        transport.write(encode_ack(offset))  # type: ignore[attr-defined]
        self.status.reported_offset = offset
        self._last_report = self.status.last_report_time = self.clock()

    async def _report_loop(self, transport: asyncio.BaseTransport) -> None:
        while True:
            due = self._last_report + self.report_interval - self.clock()
            if due > 0:
                await asyncio.sleep(due)
                continue
            self._report(transport)

    def on_frames(self, view: memoryview, frames: list[FrameSpan], received: int,
                  transport: asyncio.BaseTransport) -> None:
        """The whole frames of one read, applied in order; one report after them."""
        self.status.last_read_time = self.clock()
        self.received.add(received)
        moved = False
        for frame in frames:
            moved = self._apply(view, frame) or moved
        self._link_worked = True  # applied: a store that refuses frames backs off as refused
        if moved:
            self._report(transport)

    def _apply(self, view: memoryview, frame: FrameSpan) -> bool:
        """Appends one frame's body; True when it moved the max offset."""
        expected = self.store.max_phy_offset
        self.status.master_offset = frame.phy_offset
        # An empty slave takes the master's first frame where it starts (its min offset).
        if frame.phy_offset != expected and expected != 0:
            raise HALinkError(f"frame at offset {frame.phy_offset}, but the slave's commitlog "
                              f"ends at {expected}: link closed")
        if frame.body_size == 0:  # a heartbeat
            return False
        self.store.append_commitlog(
            frame.phy_offset, view[frame.body_start:frame.body_start + frame.body_size])
        return True


class _LinkProtocol(asyncio.BufferedProtocol):
    """The slave's end of one link: the socket reads straight into one large buffer, whose
    whole frames are applied in place. Few large reads mean few hand-overs of the GIL
    between this loop and the store's threads (each costs up to the switch interval)."""

    def __init__(self, client: HAClient, buffer_size: int) -> None:
        self.client = client
        self.buffer = bytearray(max(buffer_size, _MIN_BUFFER))
        self.view = memoryview(self.buffer)
        self.start = 0  # first unparsed byte
        self.end = 0  # end of the received bytes
        self.needed = FRAME_HEADER_SIZE  # bytes the incomplete frame at `start` needs
        self.transport: asyncio.BaseTransport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.start == self.end:
            self.start = self.end = 0
        elif (len(self.buffer) - self.start < self.needed
              or len(self.buffer) - self.end < _MIN_READ):
            self._make_room()
        return self.view[self.end:]

    def _make_room(self) -> None:
        """Moves the incomplete frame to the buffer start; grows the buffer for a frame
        larger than it."""
        pending = self.end - self.start
        if self.needed > len(self.buffer):
            bigger = bytearray(self.needed + _MIN_READ)
            bigger[:pending] = self.view[self.start:self.end]
            self.buffer, self.view = bigger, memoryview(bigger)
        else:  # the pending bytes are at most one frame: the copy is small
            self.buffer[:pending] = self.buffer[self.start:self.end]
        self.start, self.end = 0, pending

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if self.closed.done():
            return
        try:
            frames, self.start, self.needed = scan_frames(self.view, self.start, self.end,
                                                          _MAX_FRAME_BODY)
            assert self.transport is not None
            self.client.on_frames(self.view, frames, nbytes, self.transport)
        except Exception as e:  # a bad frame or a store that refused: the link is done
            self._close(e)

    def eof_received(self) -> bool:
        self._close(HALinkError("the master closed the link"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._close(HALinkError(f"the master closed the link: {exc}" if exc
                                else "the master closed the link"))

    def _close(self, error: BaseException) -> None:
        """Ends the link with `error`; the client closes the transport once it recorded why."""
        if not self.closed.done():
            self.closed.set_exception(error)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()  # type: ignore[attr-defined]
