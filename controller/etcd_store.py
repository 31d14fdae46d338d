"""The controller's state in etcd: one key per broker group, one leader key.

- `{prefix}/groups/{brokerName}`: the group's ReplicaSet as JSON (controller/state.py).
- `{prefix}/leader`: the active controller's address, held by an etcd lease. Its
  create_revision is the controller's *term*.

Each change is one transaction that compares the group key's mod_revision with the one the
controller read and the leader key's create_revision with its own term: a controller that
lost its lease (another took the leader key meanwhile) or read a stale group writes
nothing (`Fenced`). etcd's locks are not relied on for mutual exclusion; the compare is.

Endpoints are tried in turn: a member that does not answer is left for the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aetcd
import aetcd.exceptions

from controller.state import ReplicaSet

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_PREFIX = "/mqcluster/controller"
REQUEST_TIMEOUT_S = 2.0


class Fenced(Exception):
    """The write was refused: this controller is not the leader any more, or the group
    changed since it was read."""


class EtcdUnreachable(Exception):
    """No endpoint answered."""


_RETRYABLE = (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError,
              aetcd.exceptions.InternalError, asyncio.TimeoutError, OSError)


def _lease_gone(e: Exception) -> bool:
    return "lease not found" in str(e)


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """`HOST:PORT;HOST:PORT` (or commas) -> [(host, port)]; ValueError when malformed."""
    out = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip().removeprefix("http://")
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {part!r} is not HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no etcd endpoint given")
    return out


class EtcdStore:
    def __init__(self, endpoints: list[tuple[str, int]], prefix: str = DEFAULT_PREFIX,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.endpoints = endpoints
        self.prefix = prefix.rstrip("/")
        self.timeout_s = timeout_s
        self._client: aetcd.Client | None = None
        self._index = 0
        self._lease: aetcd.Lease | None = None
        self.term = 0  # create_revision of our leader key; 0: not the leader

    @property
    def leader_key(self) -> bytes:
        return f"{self.prefix}/leader".encode()

    def group_key(self, broker_name: str) -> bytes:
        return f"{self.prefix}/groups/{broker_name}".encode()

    @property
    def groups_prefix(self) -> bytes:
        return f"{self.prefix}/groups/".encode()

    # -- connection ------------------------------------------------------------------------
    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.endpoints[self._index % len(self.endpoints)]
            client = aetcd.Client(host=host, port=port, timeout=self.timeout_s,
                                  connect_wait_timeout=self.timeout_s)
            await client.connect()
            self._client = client
        return self._client

    async def _drop(self, client: aetcd.Client | None) -> None:
        """Leaves a failed connection for the next endpoint (once, however many callers
        saw it fail)."""
        if client is None or client is not self._client:
            return
        self._client = None
        self._index += 1
        try:
            await asyncio.wait_for(client.close(), self.timeout_s)
        except Exception:  # closing a broken channel: nothing to save
            log.debug("closing etcd client", exc_info=True)

    async def _call(self, op: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Runs `op` on a member, trying each endpoint once more on a failure; every
        attempt (connecting included) bounded by `timeout_s`. EtcdUnreachable when none
        answered."""
        last: BaseException | None = None
        for _ in range(len(self.endpoints) + 1):
            client: aetcd.Client | None = None

            async def attempt() -> T:
                nonlocal client
                client = await self._connected()
                return await op(client)
            try:
                return await asyncio.wait_for(attempt(), self.timeout_s)
            except (*_RETRYABLE, aetcd.exceptions.ClientError) as e:
                last = e
                await self._drop(client if client is not None else self._client)
        raise EtcdUnreachable(f"etcd {self.endpoints_text}: {last!r}")

    @property
    def endpoints_text(self) -> str:
        return ";".join(f"{h}:{p}" for h, p in self.endpoints)

    async def close(self) -> None:
        await self._drop(self._client)

    # -- leadership ------------------------------------------------------------------------
    async def campaign(self, me: str, ttl_s: int) -> bool:
        """Takes the leader key under a fresh lease when nobody holds it. True: we lead
        (self.term set). A key already ours (same lease) keeps us leading."""
        async def op(c: aetcd.Client) -> bool:
            if self._lease is None:
                self._lease = await c.lease(ttl_s)
            try:
                return await attempt(c)
            except aetcd.exceptions.ClientError as e:
                if not _lease_gone(e):
                    raise
                self._lease = await c.lease(ttl_s)  # ours expired: campaign with a new one
                return await attempt(c)

        async def attempt(c: aetcd.Client) -> bool:
            assert self._lease is not None
            ok, responses = await c.transaction(
                compare=[c.transactions.create(self.leader_key) == 0],
                success=[c.transactions.put(self.leader_key, me.encode(), lease=self._lease.id)],
                failure=[c.transactions.get(self.leader_key)])
            if ok:
                got = await c.get(self.leader_key)
                if got is None:
                    return False
                self.term = got.create_revision
                return True
            held = responses[0][0][1] if responses and responses[0] else None
            if held is not None and held.lease == self._lease.id:
                self.term = held.create_revision
                return True
            self.term = 0
            return False
        return await self._call(op)

    async def keep_alive(self) -> bool:
        """Refreshes our lease; False when it is gone (expired: we do not lead)."""
        lease = self._lease
        if lease is None:
            return False

        async def op(c: aetcd.Client) -> bool:
            try:
                remaining = await c.refresh_lease(lease.id)
            except aetcd.exceptions.ClientError as e:
                if _lease_gone(e):
                    return False
                raise
            return remaining is not None and remaining.TTL > 0
        alive = await self._call(op)
        if not alive:
            self._lease = None
            self.term = 0
        return alive

    async def resign(self) -> None:
        lease, self._lease = self._lease, None
        self.term = 0
        if lease is not None:
            try:
                await self._call(lambda c: c.revoke_lease(lease.id))
            except EtcdUnreachable:
                pass

    def lose_lease(self) -> None:
        """Forget our lease (it expired or could not be refreshed in time)."""
        self._lease = None
        self.term = 0

    async def leader(self) -> str:
        """The address of the controller holding the leader key ("" when none)."""
        got = await self._call(lambda c: c.get(self.leader_key))
        return got.value.decode() if got is not None else ""

    # -- groups ----------------------------------------------------------------------------
    async def load_groups(self) -> dict[str, tuple[ReplicaSet, int]]:
        """Every group with the mod_revision it was read at."""
        found = await self._call(lambda c: c.get_prefix(self.groups_prefix))
        groups: dict[str, tuple[ReplicaSet, int]] = {}
        for kv in found:
            try:
                rs = ReplicaSet.from_json(kv.value)
            except ValueError as e:
                log.error("ignoring %s in etcd: %s", kv.key.decode(errors="replace"), e)
                continue
            groups[rs.broker_name] = (rs, kv.mod_revision)
        return groups

    async def save_group(self, rs: ReplicaSet | None, broker_name: str,
                         expected_revision: int) -> int:
        """Writes (None: deletes) a group if it is still at `expected_revision` (0: absent)
        and we still lead; returns its new mod_revision. Fenced otherwise."""
        if not self.term:
            raise Fenced("not the leader")
        key = self.group_key(broker_name)
        term = self.term

        async def op(c: aetcd.Client) -> tuple[bool, list]:
            write = (c.transactions.put(key, rs.to_json()) if rs is not None
                     else c.transactions.delete(key))
            return await c.transaction(
                compare=[c.transactions.create(self.leader_key) == term,
                         c.transactions.mod(key) == expected_revision],
                success=[write], failure=[])
        ok, responses = await self._call(op)
        if not ok:
            raise Fenced(f"group {broker_name} changed or leadership (term {term}) lost")
        return int(responses[0].response_put.header.revision if rs is not None
                   else responses[0].response_delete_range.header.revision)
