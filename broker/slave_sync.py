"""A slave's copy of its master's tables (RocketMQ's SlaveSynchronize, SPEC §4).

Every slaveSynchronizeInterval (10 s), and at once when the HA link to the master comes
up, a slave:
1. copies the master's topic configs (when their data version changed);
2. reports to the master the consumer offsets committed on it that the master has not
   taken yet (MergeConsumerOffset: the master keeps the larger offset per queue, up to the
   queue's max offset), so a master that comes back after its slave served consumers learns
   their progress; offsets on topics or queues the master no longer has are dropped;
3. copies the master's consumer offsets (never lowering one still to be reported) and
   delay offsets.

The master's admin service is called at its listen port (from the brokerAddr the name
servers answer the slave's registration with) on the host of its HA address (brokerIP2):
brokerIP1 is the address clients reach, which a slave may not (in Docker: 127.0.0.1 and a
port published on the host), while the group's own network carries replication. Without a
master address (no name server, or no live master) there is nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from broker.admin import topic_config_from_proto
from broker.topic_config import DataVersion
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2
from remoting.tls import ClientTls, aio_channel

if TYPE_CHECKING:
    from acl.grpc_auth import ClientAuth
    from broker.context import BrokerContext

log = logging.getLogger(__name__)
A = admin_pb2


class MasterRefused(Exception):
    """The master answered a sync call with a status other than SUCCESS."""


def master_admin_address(master_addr: str, ha_master_addr: str) -> str:
    """Where a slave calls its master's admin service: the port of `master_addr` (the
    master's brokerAddr, brokerIP1:listenPort) on the host of `ha_master_addr` (its HA
    address, brokerIP2:haListenPort). `master_addr` as it is when either is unknown."""
    if not master_addr or not ha_master_addr:
        return master_addr
    ha_host = ha_master_addr.rpartition(":")[0]
    port = master_addr.rpartition(":")[2]
    return f"{ha_host}:{port}" if ha_host and port.isdigit() else master_addr


def _checked(response: object, call: str) -> None:
    status: common_pb2.Status = response.status  # type: ignore[attr-defined]
    if status.code != common_pb2.SUCCESS:
        raise MasterRefused(f"{call}: {common_pb2.ResponseCode.Name(status.code)} "
                            f"{status.remark}")


class SlaveSynchronizer:
    """Runs on the broker's loop; `run` until cancelled, `wake` for a sync now."""

    def __init__(self, broker: BrokerContext, interval_s: float, timeout_s: float, *,
                 auth: ClientAuth | None = None, tls: ClientTls | None = None) -> None:
        self.broker = broker
        self.auth = auth  # the cluster key's signer (aclEnable on the master)
        self.tls = tls
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.sync_count = 0  # successful rounds
        self.last_error = ""
        self._wake = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._channel_addr = ""

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        try:
            while True:
                self._wake.clear()
                await self.sync_all()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_s):  # wait_for can swallow a cancel
                        await self._wake.wait()
        finally:
            await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _stub(self, addr: str) -> admin_pb2_grpc.AdminServiceStub:
        """A stub on a channel to `addr`; the channel to a previous master is closed."""
        if self._channel is None or self._channel_addr != addr:
            await self.close()
            auth = self.auth
            self._channel = aio_channel(
                addr, self.tls,
                interceptors=auth.aio_interceptors() if auth else None)
            self._channel_addr = addr
        return admin_pb2_grpc.AdminServiceStub(self._channel)

    async def sync_all(self) -> bool:
        """One round; False when there is no master to copy from or a call failed."""
        ha_client = self.broker.ha_client
        addr = master_admin_address(self.broker.addresses.master_addr,
                                    ha_client.master_address if ha_client else "")
        if not addr:
            return False
        stub = await self._stub(addr)
        try:
            await self._copy_topic_configs(stub)  # first: commits on deleted topics drop
            await self._report_local_commits(stub)
            await self._copy_consumer_offsets(stub)
            await self._copy_delay_offsets(stub)
        except (grpc.aio.AioRpcError, MasterRefused, ValueError, OSError) as e:
            error = (f"{e.code().name} {e.details()}" if isinstance(e, grpc.aio.AioRpcError)
                     else str(e))
            # A config file not written for lack of space: the store's disk-full state, whose
            # own line says so; the next round writes it.
            quiet = isinstance(e, OSError) and self.broker.config_write_failed(
                e, Path(e.filename) if e.filename
                else Path(self.broker.store_config.store_path_root_dir) / "config")
            if error != self.last_error and not quiet:  # once per streak of the same failure
                log.warning("sync from master %s failed: %s", addr, error)
            self.last_error = error
            return False
        if self.last_error:
            log.info("sync from master %s OK again", addr)
            self.last_error = ""
        self.sync_count += 1
        return True

    async def _report_local_commits(self, stub: admin_pb2_grpc.AdminServiceStub) -> None:
        offsets = self.broker.offsets
        entries = offsets.local_commit_entries()
        # The master refuses a report naming a topic or queue it does not have (nothing
        # merged): commits on what the master deleted meanwhile are dropped here.
        topics = self.broker.topics
        gone = [e for e in entries if (c := topics.get(e[0])) is None or e[2] >= c.queue_nums]
        if gone:
            log.warning("dropping %d consumer offsets committed on this slave for topics or "
                        "queues the master no longer has (first: %s@%s queue %d)", len(gone),
                        gone[0][0], gone[0][1], gone[0][2])
            offsets.forget_local_commits(gone)
            entries = offsets.local_commit_entries()
        if not entries:
            return
        response = await stub.MergeConsumerOffset(A.MergeConsumerOffsetRequest(offset_table=[
            A.ConsumerOffsetEntry(topic=t, consumer_group=g, queue_id=q, offset=o)
            for t, g, q, o in entries]), timeout=self.timeout_s)
        _checked(response, "MergeConsumerOffset")
        offsets.forget_local_commits(entries)
        log.info("reported %d consumer offsets committed on this slave to the master "
                 "(%d moved forward there)", len(entries), response.merged)

    async def _copy_topic_configs(self, stub: admin_pb2_grpc.AdminServiceStub) -> None:
        response = await stub.GetTopicList(A.GetTopicListRequest(), timeout=self.timeout_s)
        _checked(response, "GetTopicList")
        version = DataVersion(response.data_version.timestamp, response.data_version.counter)
        topics = self.broker.topics
        if version == topics.data_version:
            return  # unchanged: nothing to convert (tens of thousands of topics)
        pbs = list(response.topic_configs)
        configs = await asyncio.to_thread(lambda: [topic_config_from_proto(c) for c in pbs])
        if topics.copy_from_master(configs, version):
            await topics.persist_async()

    async def _copy_consumer_offsets(self, stub: admin_pb2_grpc.AdminServiceStub) -> None:
        response = await stub.GetAllConsumerOffset(A.GetAllConsumerOffsetRequest(),
                                                   timeout=self.timeout_s)
        _checked(response, "GetAllConsumerOffset")
        # Persisted by the periodic consumer offset task (the table is marked dirty).
        self.broker.offsets.copy_from_master(
            (e.topic, e.consumer_group, e.queue_id, e.offset) for e in response.offset_table)

    async def _copy_delay_offsets(self, stub: admin_pb2_grpc.AdminServiceStub) -> None:
        response = await stub.GetAllDelayOffset(A.GetAllDelayOffsetRequest(),
                                                timeout=self.timeout_s)
        _checked(response, "GetAllDelayOffset")
        delay = self.broker.delay_offsets
        if delay.copy_from_master(dict(response.offset_table)):
            await delay.persist_async()
