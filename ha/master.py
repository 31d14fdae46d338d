"""Master side of HA (RocketMQ's HAService + HAConnection, SPEC §5).

One asyncio server on haListenPort. Per slave link two tasks: one reads the slave's ack
offsets, one streams commitlog frames from where the slave asked. The best ack of the
live links goes to `on_ack`, so SYNC_MASTER sends waiting on an OffsetWaiters are released.

A slave that says who it is (its hello: brokerId and address) stays in the master's view of
the group after its link goes: its fall-behind keeps growing from its last ack while it is
paused or gone, until it catches up again or is removed (`remove_slave`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable

from acl.signing import AuthError, NonceCache
from common.codec import STORE_TIMESTAMP_HEAD, record_store_timestamp
from common.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from ha.auth import verify_hello
from ha.codec import (
    AckParser,
    HACodecError,
    SlaveHello,
    encode_frame_header,
    encode_heartbeat,
)
from ha.constants import (
    HA_HOUSEKEEPING_INTERVAL,
    HA_MAX_TIME_SLAVE_NOT_CATCHUP,
    HA_PROOF_TAIL_SIZE,
    HA_SEND_HEARTBEAT_INTERVAL,
    HA_SLAVE_FALLBEHIND_MAX,
    HA_TRANSFER_BATCH_SIZE,
    HA_TRANSFER_POLL_INTERVAL,
    HA_WRITE_HIGH_WATER,
)
from ha.interface import HAStore
from ha.proof import tail_crc
from ha.rate import TransferRate

log = logging.getLogger(__name__)

_RECORD_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_PHYSICAL_OFFSET = struct.Struct(">q")
_PHYSICAL_OFFSET_POS = 28  # TOTALSIZE 4, MAGIC 4, BODYCRC 4, QUEUEID 4, FLAG 4, QUEUEOFFSET 8
_CLOSED_LINKS_KEPT = 16


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(slots=True)
class SlaveStatus:
    """One slave as the master sees it (admin, analytics, SYNC_MASTER checks)."""

    address: str  # the link's peer (host:ephemeral port)
    broker_id: int = -1  # from the slave's hello; -1 for a slave that sent none
    broker_addr: str = ""  # the slave broker's own address, from its hello
    connected: bool = True
    ack_offset: int = -1  # -1 until the slave's first report
    last_ack_time_ms: int = 0
    fall_behind_bytes: int = 0
    # now - store time of the first record the slave lacks; 0 when it lacks none.
    fall_behind_seconds: float = 0.0
    transfer_from: int = -1  # the next commitlog offset sent on the link
    in_sync: bool = False
    transfer_rate: float = 0.0  # bytes/s sent over the last HA_TRANSFER_RATE_WINDOW seconds
    problem: str = ""
    # The slave proved what it holds (empty, or its hello's tail checksum matched the
    # master's commitlog): only then do its acks count for SYNC_MASTER.
    verified: bool = False

    @property
    def name(self) -> str:
        """How logs and tools name the slave: brokerId and address when it said them."""
        if self.broker_id < 0:
            return f"{self.address} (link)"
        return f"{self.broker_id}@{self.broker_addr or self.address}"


def is_record_boundary(store: HAStore, offset: int) -> bool:
    """True when a record (or an end-of-file blank) of `store` starts at `offset`, or the
    commitlog ends there."""
    if offset == store.max_phy_offset:
        return True
    head = store.read_commitlog(offset, _PHYSICAL_OFFSET_POS + _PHYSICAL_OFFSET.size)
    if len(head) < _RECORD_HEAD.size:
        return False
    total, magic = _RECORD_HEAD.unpack_from(head)
    if magic == BLANK_MAGIC_CODE:
        return total >= _RECORD_HEAD.size
    if magic != MESSAGE_MAGIC_CODE or len(head) < _PHYSICAL_OFFSET_POS + _PHYSICAL_OFFSET.size:
        return False
    return _PHYSICAL_OFFSET.unpack_from(head, _PHYSICAL_OFFSET_POS)[0] == offset


def store_timestamp_at(store: HAStore, offset: int) -> int | None:
    """STORETIMESTAMP (ms) of the record at `offset`, stepping over an end-of-file blank;
    None when no whole record head starts there (end of data, or not a record)."""
    for _ in range(2):  # a blank, then the first record of the next file
        head = store.read_commitlog(offset, STORE_TIMESTAMP_HEAD)
        if len(head) < _RECORD_HEAD.size:
            return None
        total, magic = _RECORD_HEAD.unpack_from(head)
        if magic == BLANK_MAGIC_CODE and total >= _RECORD_HEAD.size:
            offset += total
            continue
        return record_store_timestamp(head)
    return None


class HAConnection:
    """One slave link: acks in, frames out."""

    def __init__(self, service: HAService, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.status = SlaveStatus(address, last_ack_time_ms=service.wall_clock_ms())
        self.next_offset = -1  # next commitlog byte to send; -1 until the first report
        self.hello: SlaveHello | None = None
        # A slave, for the master's view (haStatus, metrics): it sent a valid hello (that
        # proved the cluster key when one is set) or, with no cluster key, a report not
        # beyond the master's max offset (a 4.x-style slave). A link that never did (a
        # port scan, a health check, a refused hello) is only logged.
        self.listed = False
        self._problem_kept_link = False
        # Ends of the frames sent and not yet acked: a slave acks only at a frame's end.
        self._frame_ends: collections.deque[int] = collections.deque()
        self.wake = asyncio.Event()
        self._reported = asyncio.Event()
        self._sent = TransferRate(service.clock)
        self._link_tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        self._link_tasks = tasks = [asyncio.create_task(self._read_acks()),
                                    asyncio.create_task(self._transfer())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    self.fail(f"link failed: {t.exception()!r}")
        finally:
            # The socket is closed first: the slave hears of it at once, and a reader whose
            # cancel was lost (a read completing in the cancel's loop turn) reads EOF next.
            self.status.connected = False
            self.writer.close()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def close(self) -> None:
        """Ends the link: `run` returns once its tasks are done."""
        for t in self._link_tasks:
            t.cancel()

    def fail(self, problem: str, *, link_kept: bool = False) -> None:
        """Records the link's problem (the first that closes it wins over a note about a
        link that is kept) and logs it."""
        if not self.status.problem or self._problem_kept_link:
            self.status.problem = problem
            self._problem_kept_link = link_kept
        log.warning("HA slave %s: %s", self.status.name, problem)

    # -- slave -> master -------------------------------------------------------------------
    async def _read_acks(self) -> None:
        parser = AckParser()
        timeout = self.service.housekeeping_interval
        while True:
            try:
                async with asyncio.timeout(timeout):  # wait_for can drop a cancel (3.11)
                    chunk = await self.reader.read(4096)
            except TimeoutError:
                self.fail(f"no report from the slave for {timeout:g} s: link dropped")
                return
            if not chunk:
                log.info("HA slave %s closed the link", self.status.name)
                return
            try:
                reports = parser.feed(chunk)
            except HACodecError as e:
                self.fail(f"{e}: link closed")
                return
            for report in reports:
                if isinstance(report, SlaveHello):
                    if not self.service.authenticate(self, report):
                        return
                    self.service.identify(self, report)
                elif self.service.cluster_key and self.hello is None:
                    self.fail("no hello proving the cluster key before its first ack: "
                              "refused, link closed")
                    return
                elif not self.on_report(report):
                    return

    def on_report(self, ack: int) -> bool:
        """Checks one report of the slave; False when the link must be closed."""
        store = self.service.store
        max_offset = store.max_phy_offset
        if ack > max_offset:
            self.fail(f"ack offset {ack} is beyond the master's max offset {max_offset}: "
                      "rejected, link closed")
            return False
        # A plausible offset: a (4.x-style, when no hello) slave, listed even when what it
        # holds is refused below. Bytes of another protocol read as an ack are beyond max.
        self.listed = True
        if self.next_offset < 0:
            start = self._start_offset(ack)
            if start is None:
                return False
            self.next_offset = start
            self._reported.set()
        elif ack > self.next_offset:
            self.fail(f"ack offset {ack} is beyond the data sent to the slave "
                      f"({self.next_offset}): rejected, link closed")
            return False
        elif ack < self.status.ack_offset:
            self.fail(f"ack offset {ack} went back from {self.status.ack_offset}: the slave's "
                      "commitlog diverged from the master; link closed")
            return False
        elif ack > self.status.ack_offset and not self._sent_frame_end(ack):
            self.fail(f"ack offset {ack} is not the end of a frame sent to the slave: "
                      "rejected, link closed")
            return False
        self.status.ack_offset = ack
        self.status.last_ack_time_ms = self.service.wall_clock_ms()
        self.service.acked()
        return True

    def _sent_frame_end(self, ack: int) -> bool:
        """True when a frame sent on this link ends at `ack` (forgets the ends before it)."""
        ends = self._frame_ends
        while ends and ends[0] < ack:
            ends.popleft()
        return bool(ends) and ends[0] == ack

    def _start_offset(self, reported: int) -> int | None:
        store = self.service.store
        min_offset, max_offset = store.min_phy_offset, store.max_phy_offset
        if reported == 0:  # an empty slave holds nothing to prove
            self.status.verified = True
            if max_offset > 0:
                log.info("HA slave %s is empty: sending the whole retained commitlog from %d",
                         self.status.name, min_offset)
            return min_offset
        if reported < min_offset:
            self.fail(f"slave offset {reported} is below the master's min offset {min_offset}: "
                      "the master no longer has the data the slave lacks; clear the slave "
                      "store to copy everything again")
            return None
        proven, why_not = self._check_proof(reported)
        if proven is False:
            return None
        # A proven tail holds the master's bytes up to `reported`, even mid-record (a link
        # that broke mid-frame); without a proof it must at least be a record boundary.
        if not proven and not is_record_boundary(store, reported):
            self.fail(f"slave offset {reported} is not a record boundary of the master's "
                      "commitlog: the slave's commitlog diverged from the master")
            return None
        if not proven:
            self.fail(f"slave offset {reported}: {why_not}; replicating to it, but its acks "
                      "never count as in sync", link_kept=True)
        return reported

    def _check_proof(self, reported: int) -> tuple[bool | None, str]:
        """Checks the hello's proof of what the slave holds: True (verified), False (the
        slave diverged: the link is closed) or None (no proof that can be checked, and why)."""
        hello = self.hello
        if hello is None or hello.max_offset != reported or hello.tail_size <= 0:
            return None, "no proof of the slave's data (no hello with its tail checksum)"
        size = hello.tail_size
        crc = tail_crc(self.service.store, reported, size) if size <= HA_PROOF_TAIL_SIZE else None
        if crc is None:
            return None, (f"the master cannot check the slave's last {size} bytes (min "
                          f"offset {self.service.store.min_phy_offset}); clear the slave "
                          "store to copy everything again")
        if crc != hello.tail_crc:
            self.fail(f"slave offset {reported}: the slave's last {size} bytes differ from "
                      "the master's commitlog: the slave's commitlog diverged from the "
                      "master; clear the slave store to copy everything again")
            return False, ""
        self.status.verified = True
        return True, ""

    # -- master -> slave -------------------------------------------------------------------
    async def _transfer(self) -> None:
        await self._reported.wait()
        service = self.service
        store, writer, clock = service.store, self.writer, service.clock
        batch = service.transfer_batch_size
        last_write = clock()
        unreadable_since: float | None = None
        while True:
            self.wake.clear()  # before looking, so a wake-up after the look is not lost
            max_offset = store.max_phy_offset
            if self.next_offset < max_offset:
                pieces: list[bytes] = []
                queued = 0
                offset = self.next_offset
                while offset < max_offset and queued < HA_WRITE_HIGH_WATER:
                    body = store.read_commitlog(offset, min(batch, max_offset - offset))
                    if not body:
                        break
                    pieces.append(encode_frame_header(offset, len(body)))
                    pieces.append(body)
                    offset += len(body)
                    self._frame_ends.append(offset)
                    queued += len(body)
                if not pieces:
                    # The max offset promises readable data; should a store report it a
                    # moment early, wait for the data rather than drop the link. Only data
                    # that is gone (or stays unreadable) ends the link.
                    now = clock()
                    if unreadable_since is None:
                        unreadable_since = now
                    min_offset = store.min_phy_offset
                    if (offset < min_offset
                            or now - unreadable_since >= service.housekeeping_interval):
                        self.fail(f"cannot read the master's commitlog at {offset} (min "
                                  f"{min_offset}, max {max_offset}): link closed")
                        return
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(service.poll_interval):  # not wait_for (below)
                            await self.wake.wait()
                    continue
                unreadable_since = None
                writer.write(b"".join(pieces))
                self.next_offset = offset
                self._sent.add(queued)
                await writer.drain()
                last_write = clock()
                continue
            now = clock()
            if now - last_write >= service.heartbeat_interval:
                writer.write(encode_heartbeat(self.next_offset))
                await writer.drain()
                last_write = now
            wait = min(service.poll_interval, service.heartbeat_interval - (now - last_write))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.0)):  # wait_for can swallow a cancel
                    await self.wake.wait()

    def transfer_rate(self) -> float:
        """Bytes/s sent over the last HA_TRANSFER_RATE_WINDOW seconds (or since connect)."""
        return self._sent.rate()


class HAService:
    """The master's HA server. Intervals are seconds; `clock` is monotonic seconds."""

    def __init__(self, store: HAStore, *, host: str = "0.0.0.0", port: int = 0,
                 on_ack: Callable[[int], None] | None = None,
                 transfer_batch_size: int = HA_TRANSFER_BATCH_SIZE,
                 heartbeat_interval: float = HA_SEND_HEARTBEAT_INTERVAL / 1000,
                 housekeeping_interval: float = HA_HOUSEKEEPING_INTERVAL / 1000,
                 poll_interval: float = HA_TRANSFER_POLL_INTERVAL / 1000,
                 slave_fallbehind_max: int = HA_SLAVE_FALLBEHIND_MAX,
                 max_time_slave_not_catchup_ms: int = HA_MAX_TIME_SLAVE_NOT_CATCHUP,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock_ms: Callable[[], int] = _wall_clock_ms,
                 cluster_key: str = "", ssl_context: ssl.SSLContext | None = None,
                 sock: socket.socket | None = None) -> None:
        self.store = store
        # A listening socket to serve on instead of binding host:port (controller mode
        # keeps its HA port bound while the broker is a slave, so it stays its own).
        self.sock = sock
        self.ssl_context = ssl_context  # TLS on the HA port; None: plain TCP
        # Links must open with a hello proving this key (ha/auth.py); empty: any may.
        self.cluster_key = cluster_key
        self._hello_nonces = NonceCache(capacity=10_000)
        self.host = host
        self.port = port
        self.on_ack = on_ack
        self.transfer_batch_size = transfer_batch_size
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.poll_interval = poll_interval
        self.slave_fallbehind_max = slave_fallbehind_max
        self.max_time_slave_not_catchup_ms = max_time_slave_not_catchup_ms
        self.clock = clock
        self.wall_clock_ms = wall_clock_ms
        self.connections: list[HAConnection] = []
        # Slaves (by brokerId) whose link is down, as last seen; a slave that sent no hello
        # cannot be told apart from the next one: its closed link goes to closed_links.
        self.absent_slaves: dict[int, SlaveStatus] = {}
        self.closed_links: collections.deque[SlaveStatus] = collections.deque(
            maxlen=_CLOSED_LINKS_KEPT)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Controller mode: only the acks of these slaves (the SyncStateSet, by brokerId)
        # release SYNC_MASTER sends; None: every verified slave's.
        self.counted_slaves: frozenset[int] | None = None
        # With counted_slaves, allAckInSyncStateSet: a send is released only once every
        # one of them acked it (a member without a live link holds every release).
        self.all_ack = False

    def _counts(self, status: SlaveStatus) -> bool:
        return self.counted_slaves is None or status.broker_id in self.counted_slaves

    async def start(self) -> int:
        """Listens; returns the bound port."""
        self._loop = asyncio.get_running_loop()
        where: dict[str, object] = ({"sock": self.sock} if self.sock is not None
                                    else {"host": self.host, "port": self.port})
        self._server = await asyncio.start_server(self._on_connect, **where,  # type: ignore[arg-type]
                                                  ssl=self.ssl_context,
                                                  ssl_handshake_timeout=(
                                                      10.0 if self.ssl_context else None))
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("HA service listening on %s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing the links (not cancelling the server's connection tasks) lets each
        # connection task finish normally.
        for conn in list(self.connections):
            conn.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _on_connect(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        log.info("HA link from %s connected", conn.status.address)
        self.connections.append(conn)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            await conn.run()
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            self.connections.remove(conn)
            closed = self._status_of(conn)
            if not conn.listed:  # never a slave: its problem, if any, was logged
                pass
            elif closed.broker_id < 0:
                self.closed_links.append(closed)
            elif not any(c.status.broker_id == closed.broker_id for c in self.connections):
                self.absent_slaves[closed.broker_id] = closed
            self.acked()

    def authenticate(self, conn: HAConnection, hello: SlaveHello) -> bool:
        """With a cluster key: False (the link is refused) unless the hello proves it."""
        if not self.cluster_key:
            return True
        try:
            verify_hello(hello, self.cluster_key, self._hello_nonces, self.wall_clock_ms())
        except AuthError as e:
            conn.fail(f"claims to be slave {hello.broker_id} of {hello.broker_name!r} but "
                      f"{e}: refused, link closed")
            return False
        return True

    def identify(self, conn: HAConnection, hello: SlaveHello) -> None:
        """A link's slave said who it is; an older link of the same slave is stale."""
        status = conn.status
        conn.hello = hello
        conn.listed = True
        status.broker_id, status.broker_addr = hello.broker_id, hello.broker_addr
        self.absent_slaves.pop(hello.broker_id, None)
        log.info("HA link from %s is slave %s of %s", status.address, status.name,
                 hello.broker_name)
        for other in self.connections:
            if other is not conn and other.status.broker_id == hello.broker_id:
                other.fail(f"replaced by a new link from the same slave ({status.address})")
                other.close()

    def remove_slave(self, broker_id: int) -> bool:
        """Forgets an absent slave (it left the group); False when unknown or connected."""
        return self.absent_slaves.pop(broker_id, None) is not None

    # -- acks and status -------------------------------------------------------------------
    def acked(self) -> None:
        """Tells `on_ack` of the best ack of the live links (push2SlaveMaxOffset)."""
        live = [c.status for c in self.connections
                if c.status.verified and not c.status.problem and self._counts(c.status)]
        if self.all_ack and self.counted_slaves:
            acks = {st.broker_id: st.ack_offset for st in live}
            if any(member not in acks for member in self.counted_slaves):
                return  # RocketMQ #6662: never past what a linkless member may lack
            best = min(acks[member] for member in self.counted_slaves)
        else:
            best = max((st.ack_offset for st in live), default=0)
        if self.on_ack is not None and best > 0:
            self.on_ack(best)

    def notify_data_arrived(self) -> None:
        """New commitlog data: wakes the transfer loops (callable from any thread)."""
        loop = self._loop
        if loop is None or not self.connections:
            # No link to wake (a new one looks at the offsets before it first waits): no
            # loop wake-up per put and commit of a master without slaves.
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_all()
        else:
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for c in self.connections:
            c.wake.set()

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def _status_of(self, conn: HAConnection) -> SlaveStatus:
        s = self._behind(conn.status)
        s.transfer_from = conn.next_offset
        s.transfer_rate = conn.transfer_rate() if s.connected else 0.0
        return s

    def _behind(self, status: SlaveStatus) -> SlaveStatus:
        """A copy of `status` with its fall-behind and in-sync flag as of now."""
        s = dataclasses.replace(status)
        store = self.store
        # Before its first report an empty slave lacks everything from the min offset.
        ack = max(s.ack_offset, store.min_phy_offset)
        s.fall_behind_bytes = max(0, store.max_phy_offset - ack)
        s.fall_behind_seconds = self._fall_behind_seconds(ack, s.fall_behind_bytes)
        s.in_sync = self._in_sync(s)
        return s

    def _fall_behind_seconds(self, ack: int, behind_bytes: int) -> float:
        if behind_bytes <= 0:
            return 0.0
        stored = store_timestamp_at(self.store, ack)
        if stored is None:  # not a record head: the status names the problem instead
            return 0.0
        return max(0.0, (self.wall_clock_ms() - stored) / 1000)

    def slave_statuses(self) -> list[SlaveStatus]:
        """Live links, then absent slaves of the group (fall-behind as of now, growing),
        then recently closed links of slaves that never said who they are. Links that sent
        neither a valid hello nor a report (HAConnection.listed) are left out."""
        absent = sorted(self.absent_slaves.values(), key=lambda s: s.broker_id)
        return ([self._status_of(c) for c in self.connections if c.listed]
                + [self._behind(s) for s in absent] + list(self.closed_links))

    def _in_sync(self, s: SlaveStatus) -> bool:
        """A live, healthy link whose slave acked recently (haMaxTimeSlaveNotCatchup: a
        frozen slave is not in sync however close its last ack was) and is within
        haSlaveFallbehindMax of the master."""
        return (s.connected and s.verified and not s.problem and s.ack_offset >= 0
                and self.wall_clock_ms() - s.last_ack_time_ms
                <= self.max_time_slave_not_catchup_ms
                and self.store.max_phy_offset - s.ack_offset <= self.slave_fallbehind_max)

    def slave_ok(self) -> bool:
        """SYNC_MASTER (on every send, so no status copies): some slave is in sync."""
        return any(self._in_sync(c.status) and self._counts(c.status)
                   for c in self.connections)
