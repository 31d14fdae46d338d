"""Consumer offsets: on the brokers for clustering consumers (RemoteBrokerOffsetStore), in a
local file for broadcasting ones (LocalFileOffsetStore). The offset of a queue is the next
message to consume. Used on the client loop only."""

from __future__ import annotations

import asyncio
import collections
import fcntl
import json
import logging
import os
import threading
from pathlib import Path
from typing import IO, Protocol

import grpc

from common.constants import MASTER_ID
from mqclient.constants import ADMIN_CALL_TIMEOUT_S
from mqclient.instance import ClientInstance
from mqclient.message import MessageQueue, MQClientError, code_name
from mqproto import common_pb2, messaging_pb2

log = logging.getLogger(__name__)


# Commit calls in flight at once per persist: a consumer of 1,600 queues sent them all at
# once and some came back CANCELLED, their offsets uncommitted.
COMMITS_IN_FLIGHT = 32


class OffsetStore(Protocol):
    async def load(self) -> None: ...
    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...
    def read_memory(self, mq: MessageQueue) -> int: ...
    async def read_from_store(self, mq: MessageQueue) -> int: ...
    async def persist(self, mqs: list[MessageQueue]) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...
    def reset(self, mq: MessageQueue, offset: int) -> None: ...
    def close(self) -> None: ...


class _MemoryOffsets:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        old = self.offsets.get(mq)
        if old is None or not increase_only or offset > old:
            self.offsets[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        """-1 when this consumer has no offset for the queue."""
        return self.offsets.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)

    def reset(self, mq: MessageQueue, offset: int) -> None:
        """An admin moved the committed offset of `mq` to `offset`."""
        self.offsets[mq] = offset

    def close(self) -> None:
        pass


class RemoteBrokerOffsetStore(_MemoryOffsets):
    """Offsets committed to the master of each queue's broker group (its slave while the
    master is gone)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        self._persisted: dict[MessageQueue, int] = {}
        self._persist_lock = asyncio.Lock()

    async def load(self) -> None:
        pass

    def _offset_addrs(self, mq: MessageQueue) -> list[str]:
        """Where the group's offsets live, best first: the master, then its slaves (a slave
        keeps the offsets committed on it while its master is gone and hands them back)."""
        group = self.instance.broker_group(mq)
        addrs = group.pull_addrs(MASTER_ID) if group is not None else []
        if not addrs:
            raise MQClientError("NO_ROUTE", f"broker group {mq.broker_name} of {mq} is gone")
        return addrs

    async def read_from_store(self, mq: MessageQueue) -> int:
        """The group's committed offset, -1 when it has none; MQClientError when no broker
        of the group can tell. A broker without the group's offset is not the last word:
        a master restarted after a kill -9 may have lost what was committed to its slave
        (or to itself) meanwhile, and starting the queue from its first offset would
        deliver it all again."""
        request = messaging_pb2.QueryConsumerOffsetRequest(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id)
        failures = []
        not_found = False
        for addr in self._offset_addrs(mq):
            stub = self.instance.channels.messaging(addr)
            try:
                r = await stub.QueryConsumerOffset(request, timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                failures.append(f"{addr} {e.code().name}")  # type: ignore[attr-defined]
                continue
            if r.status.code == common_pb2.SUCCESS:
                self._persisted[mq] = r.offset
                return r.offset
            if r.status.code == common_pb2.QUERY_NOT_FOUND:
                not_found = True
                continue
            if not_found:  # e.g. a slave that does not know the new topic yet
                continue
            raise MQClientError(code_name(r.status.code), r.status.remark)
        if not_found:
            return -1
        raise MQClientError("UNAVAILABLE", f"offset of {mq}: {', '.join(failures)}")

    async def persist(self, mqs: list[MessageQueue]) -> None:
        """Commits the offsets of `mqs` that moved since they were last committed, to the
        master or, while it does not answer, to a slave. Failures are logged once per
        address and reason (a consumer of thousands of queues would log a line each)."""
        failures: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
        in_flight = asyncio.Semaphore(COMMITS_IN_FLIGHT)

        async def commit(mq: MessageQueue, offset: int) -> None:
            async with in_flight:
                await commit_one(mq, offset)

        async def commit_one(mq: MessageQueue, offset: int) -> None:
            request = messaging_pb2.UpdateConsumerOffsetRequest(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                commit_offset=offset, client_id=self.instance.client_id)
            try:
                addrs = self._offset_addrs(mq)
            except MQClientError as e:
                failures[("", str(e))].append(f"{offset} of {mq}")
                return
            for addr in addrs:
                stub = self.instance.channels.messaging(addr)
                try:
                    r = await stub.UpdateConsumerOffset(request, timeout=ADMIN_CALL_TIMEOUT_S)
                except grpc.RpcError as e:
                    failures[(addr, e.code().name)].append(  # type: ignore[attr-defined]
                        f"{offset} of {mq}")
                    continue
                if r.status.code == common_pb2.SUCCESS:
                    self._persisted[mq] = offset
                else:
                    failures[(addr, f"refused: {code_name(r.status.code)} "
                                    f"{r.status.remark}")].append(f"{offset} of {mq}")
                return

        # One persist at a time, each taking the offsets when it starts: a later one
        # (a reset's, the final one) is never overtaken by an earlier one's old offsets.
        async with self._persist_lock:
            todo = [(mq, self.offsets[mq]) for mq in mqs
                    if mq in self.offsets and self._persisted.get(mq) != self.offsets[mq]]
            try:
                await asyncio.gather(*(commit(mq, offset) for mq, offset in todo))
            finally:  # also when a bound cancels it: what failed so far is said
                for (addr, reason), which in sorted(failures.items()):
                    log.warning("%d offset(s) of group %s not committed%s: %s (e.g. offset "
                                "%s)", len(which), self.group, f" to {addr}" if addr else "",
                                reason, which[0])

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._persisted.pop(mq, None)

    def reset(self, mq: MessageQueue, offset: int) -> None:
        super().reset(mq, offset)
        self._persisted.pop(mq, None)  # committed again once more (see reset_offsets)


def _key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


class LocalFileOffsetStore(_MemoryOffsets):
    """Broadcasting: every consumer keeps its own offsets in `path` (JSON), written
    atomically (temp file, fsync, rename). A live consumer holds an exclusive lock
    (flock) on `path`.lock from load() to close(): two instances of a group sharing the
    file would each resume from whichever wrote last and skip what the other consumed."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._stored: dict[str, int] = {}
        self._lock_file: IO[bytes] | None = None
        self._write_lock = threading.Lock()

    async def load(self) -> None:
        await asyncio.to_thread(self._lock)
        try:
            self._stored = await asyncio.to_thread(self._read)
        except BaseException:
            self.close()
            raise

    def _lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        f = lock_path.open("ab")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise MQClientError(
                "ILLEGAL_STATE",
                f"offsets file {self.path} is in use by another live consumer instance of "
                f"this group (it holds {lock_path}); give each broadcasting instance on a "
                f"host its own offsets_dir (now {self.path.parent.parent})") from None
        self._lock_file = f

    def close(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise MQClientError("ILLEGAL_ARGUMENT",
                                f"offsets file {self.path} is unreadable: {e}") from None
        table = data.get("offsetTable", {}) if isinstance(data, dict) else {}
        return {k: int(v) for k, v in table.items()}

    async def read_from_store(self, mq: MessageQueue) -> int:
        offset = self._stored.get(_key(mq), -1)
        if offset >= 0:
            self.update(mq, offset, False)
        return offset

    async def persist(self, mqs: list[MessageQueue]) -> None:
        for mq in mqs:
            if mq in self.offsets:
                self._stored[_key(mq)] = self.offsets[mq]
        await asyncio.to_thread(self._write, dict(self._stored))

    def _write(self, table: dict[str, int]) -> None:
        # One writer at a time: a periodic persist cancelled by shutdown goes on in its
        # thread while the final one starts (both wrote the same temp file).
        with self._write_lock:
            self._write_locked(table)

    def _write_locked(self, table: dict[str, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as f:
            json.dump({"offsetTable": table}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
