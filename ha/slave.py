"""Slave side of HA (RocketMQ's HAClient, SPEC §5).

Connects to the master's HA address, reports its commitlog max offset (on connect, after
applied frames that moved it, and every haSendHeartbeatInterval), appends frame bodies at
exactly its max offset, drops a link silent for haHousekeepingInterval and reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

from ha.codec import Frame, FrameParser, HACodecError, encode_ack
from ha.constants import (
    HA_CONNECT_RETRY_INTERVAL,
    HA_HOUSEKEEPING_INTERVAL,
    HA_READ_MAX_SIZE,
    HA_SEND_HEARTBEAT_INTERVAL,
)
from ha.interface import HAStore

log = logging.getLogger(__name__)

_MAX_FRAME_BODY = 64 * 1024 * 1024  # anything larger is garbage, not a frame


class HALinkError(Exception):
    """Why the slave closed its link to the master."""


@dataclasses.dataclass(slots=True)
class HAClientStatus:
    master_address: str = ""
    connected: bool = False
    reported_offset: int = -1  # the last ack sent
    master_offset: int = -1  # the offset of the last frame (or heartbeat) received
    last_read_time: float = 0.0  # clock() of the last bytes from the master
    connect_count: int = 0
    last_error: str = ""


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class HAClient:
    """The slave's HA client. Intervals are seconds; `clock` is monotonic seconds."""

    def __init__(self, store: HAStore, master_address: str = "", *,
                 report_interval: float = HA_SEND_HEARTBEAT_INTERVAL / 1000,
                 housekeeping_interval: float = HA_HOUSEKEEPING_INTERVAL / 1000,
                 reconnect_interval: float = HA_CONNECT_RETRY_INTERVAL / 1000,
                 read_size: int = HA_READ_MAX_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.report_interval = report_interval
        self.housekeeping_interval = housekeeping_interval
        self.reconnect_interval = reconnect_interval
        self.read_size = read_size
        self.clock = clock
        self.status = HAClientStatus(master_address)
        self._task: asyncio.Task[None] | None = None
        self._link_task: asyncio.Task[None] | None = None
        self._address_changed = asyncio.Event()
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
        self._address_changed.set()

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
            address = self.status.master_address
            if address:
                self._link_task = asyncio.create_task(self._link(address))
                try:
                    await self._link_task
                except asyncio.CancelledError:
                    if self._stopping:
                        raise
                    self.status.last_error = f"link to {address} closed: master address changed"
                except (OSError, ValueError, HACodecError, HALinkError, TimeoutError) as e:
                    self.status.last_error = f"link to {address}: {e}"
                    log.warning("HA %s", self.status.last_error)
                finally:
                    self._link_task = None
                    self.status.connected = False
                if self.status.master_address != address:
                    continue
            self._address_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._address_changed.wait(), self.reconnect_interval)

    async def _link(self, address: str) -> None:
        host, port = split_address(address)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                self.housekeeping_interval)
        self.status.connected = True
        self.status.connect_count += 1
        self.status.last_read_time = self.clock()
        log.info("HA connected to master %s, slave max offset %d", address,
                 self.store.max_phy_offset)
        reporter = asyncio.create_task(self._report_loop(writer))
        try:
            self._report(writer)
            await self._read_frames(reader, writer)
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reporter
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _report(self, writer: asyncio.StreamWriter) -> None:
        offset = self.store.max_phy_offset
        writer.write(encode_ack(offset))
        self.status.reported_offset = offset
        self._last_report = self.clock()

    async def _report_loop(self, writer: asyncio.StreamWriter) -> None:
        while True:
            due = self._last_report + self.report_interval - self.clock()
            if due > 0:
                await asyncio.sleep(due)
                continue
            self._report(writer)
            await writer.drain()

    async def _read_frames(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        parser = FrameParser(max_body_size=_MAX_FRAME_BODY)
        timeout = self.housekeeping_interval
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(self.read_size), timeout)
            except TimeoutError:
                raise HALinkError(f"nothing from the master for {timeout:g} s: "
                                  "link dropped") from None
            if not chunk:
                raise HALinkError("the master closed the link")
            self.status.last_read_time = self.clock()
            moved = False
            for frame in parser.feed(chunk):
                moved = self._apply(frame) or moved
            if moved:  # one report for the frames of this read, after they are applied
                self._report(writer)

    def _apply(self, frame: Frame) -> bool:
        """Appends one frame's body; True when it moved the max offset."""
        expected = self.store.max_phy_offset
        self.status.master_offset = frame.phy_offset
        # An empty slave takes the master's first frame where it starts (its min offset).
        if frame.phy_offset != expected and expected != 0:
            raise HALinkError(f"frame at offset {frame.phy_offset}, but the slave's commitlog "
                              f"ends at {expected}: link closed")
        if frame.is_heartbeat:
            return False
        self.store.append_commitlog(frame.phy_offset, frame.body)
        return True
