"""What mqchaos asks the cluster itself, through the name servers and the brokers' admin
service (the same for every target): preparing the topics, waiting for replication, and
probing the replication fall-behind of a group just before a fault."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from chaos.constants import ADMIN_TIMEOUT_S, POLL_S
from mqclient.admin import AdminError, MQAdmin
from mqclient.admin_types import BrokerGroup
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

# Raw pulls of the final read: the tools' group, which commits nothing (MixAll).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
PULL_BATCH = 32
# (topic, broker group, queue id) -> queue offsets to look for
Wanted = dict[tuple[str, str, int], set[int]]


class ClusterError(Exception):
    """The cluster is not in the shape a run needs; one line for a person."""


class ClusterObserver:
    def __init__(self, namesrv_addr: str) -> None:
        self.namesrv_addr = namesrv_addr
        self.admin = MQAdmin(namesrv_addr, timeout=ADMIN_TIMEOUT_S)
        self._each: dict[str, MQAdmin] = {}  # one admin per name server (listed_by)

    def close(self) -> None:
        self.admin.close()
        for admin in self._each.values():
            admin.close()

    # -- what each name server lists -----------------------------------------------------------
    def listed_by(self, group: str, broker_id: int) -> tuple[int, int]:
        """How many of the name servers list brokerId `broker_id` of `group`, of how many
        (one that does not answer lists nothing)."""
        addrs = [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]
        count = 0
        for addr in addrs:
            admin = self._each.get(addr)
            if admin is None:
                admin = self._each[addr] = MQAdmin(addr, timeout=ADMIN_TIMEOUT_S)
            try:
                groups = admin.cluster_info().all_groups()
            except AdminError:
                continue
            count += any(g.broker_name == group and broker_id in g.addrs for g in groups)
        return count, len(addrs)

    def caught_up(self, group: str) -> bool:
        """The group's master reports a slave in sync with nothing left to copy."""
        try:
            fb = self.fall_behind(group)
        except (ClusterError, AdminError):
            return False
        return bool(fb["in_sync"]) and fb["fall_behind_bytes"] == 0

    def committed_offsets(self, groups: list[str]) -> list[dict[str, Any]]:
        """The consumer groups' committed offsets as each reachable master reports them: one
        record per master, {broker, addr, groups: {group: {"TOPIC/QUEUE": offset}}}."""
        out: list[dict[str, Any]] = []
        try:
            broker_groups = self.groups()
        except AdminError:
            return out
        for g in broker_groups:
            if g.master_addr is None:
                continue
            try:
                _, progress = self.admin.broker_consume_stats(g.master_addr)
            except AdminError:
                continue
            offsets = {p.group: {f"{q.topic}/{q.queue_id}": q.consumer_offset
                                 for q in p.queues if q.consumer_offset >= 0}
                       for p in progress if p.group in groups}
            out.append({"broker": g.broker_name, "addr": g.master_addr, "groups": offsets})
        return out

    def groups(self) -> list[BrokerGroup]:
        return self.admin.cluster_info().all_groups()

    def group(self, name: str) -> BrokerGroup:
        for g in self.groups():
            if g.broker_name == name:
                return g
        raise ClusterError(f"the name servers list no broker group {name}")

    # -- preparing a run -----------------------------------------------------------------------
    def prepare_topics(self, topics: list[str], queues: int, timeout: float) -> None:
        """Creates the topics on every master and waits until every slave has copied them
        (a slave serves a topic it knows; it copies configs every 10 s) and every master
        has a slave in sync."""
        for topic in topics:
            self.admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        deadline = time.monotonic() + timeout
        groups = self.groups()
        for g in groups:
            for broker_id, addr in sorted(g.addrs.items()):
                if broker_id == 0:
                    continue
                _wait(lambda addr=addr: set(topics) <= self._topics_of(addr), deadline,
                      f"slave {addr} of {g.broker_name} to copy topics {', '.join(topics)}")
            master = g.master_addr
            if master is not None and len(g.addrs) > 1:
                _wait(lambda master=master: self._in_sync(master), deadline,
                      f"a slave of {g.broker_name} in sync with its master {master}")

    def _topics_of(self, addr: str) -> set[str]:
        with grpc.insecure_channel(addr) as channel:
            try:
                r = admin_pb2_grpc.AdminServiceStub(channel).GetTopicList(
                    admin_pb2.GetTopicListRequest(), timeout=ADMIN_TIMEOUT_S)
            except grpc.RpcError:
                return set()
        if r.status.code != common_pb2.SUCCESS:
            return set()
        return {c.topic_name for c in r.topic_configs}

    def _in_sync(self, master: str) -> bool:
        try:
            return self.admin.ha_status(master).in_sync_slave_nums >= 1
        except AdminError:
            return False

    # -- after a run ---------------------------------------------------------------------------
    def delete_topics(self, topics: list[str]) -> tuple[list[str], list[str]]:
        """Deletes the topics from every master the name servers list (their consumer
        offsets go with them; slaves follow their master within 10 s). Returns the topics
        deleted somewhere and the problems (a master that did not answer keeps them)."""
        deleted: set[str] = set()
        problems: list[str] = []
        try:
            groups = self.groups()
        except AdminError as e:
            return [], [str(e)]
        for g in groups:
            if g.master_addr is None:
                problems.append(f"{g.broker_name} has no master now: the topics stay on its "
                                "slave until the master is back and they are deleted there")
                continue
            for topic in topics:
                try:
                    if self.admin.delete_topic_at(g.master_addr, topic):
                        deleted.add(topic)
                except AdminError as e:
                    problems.append(f"{g.broker_name}: {e}")
                    break  # the next topics would fail alike
        return sorted(deleted), problems

    # -- the final read ------------------------------------------------------------------------
    def final_read(self, wanted: Wanted) -> tuple[list[dict[str, Any]], list[str]]:
        """Reads the given queue offsets back with raw pulls from any live broker of their
        group (master first, then slaves), committing nothing: what is still in the cluster.
        Returns the messages found (their properties) and the queues no broker answered."""
        try:
            groups = {g.broker_name: g for g in self.groups()}
        except AdminError as e:
            return [], [f"name servers: {e}"]
        found: list[dict[str, Any]] = []
        unanswered: list[str] = []
        for (topic, group, queue), offsets in sorted(wanted.items()):
            g = groups.get(group)
            addrs = [a for _, a in sorted(g.addrs.items())] if g is not None else []
            for addr in addrs:
                got = _pull_range(addr, topic, queue, min(offsets), max(offsets) + 1)
                if got is not None:
                    found += [dict(m, broker=group, addr=addr) for m in got
                              if m["queue_offset"] in offsets]
                    break
            else:
                unanswered.append(f"{topic}@{group}-{queue}")
        return found, unanswered

    # -- probes --------------------------------------------------------------------------------
    def fall_behind(self, group: str) -> dict[str, Any]:
        """The group master's view of its slaves: max offset, the best slave's ack offset and
        fall-behind in bytes and seconds (what `mqadmin haStatus` shows)."""
        g = self.group(group)
        if g.master_addr is None:
            raise ClusterError(f"broker group {group} has no master listed")
        status = self.admin.ha_status(g.master_addr)
        if not status.slaves:
            raise ClusterError(f"the master of {group} reports no slave")
        best = max(status.slaves, key=lambda s: s.ack_offset)
        return {"group": group, "master": g.master_addr,
                "master_max_offset": status.master_commit_log_max_offset,
                "slave": best.addr, "slave_ack_offset": best.ack_offset,
                "fall_behind_bytes": best.fall_behind_bytes,
                "fall_behind_seconds": best.fall_behind_seconds,
                "in_sync": best.in_sync}


def _pull_range(addr: str, topic: str, queue: int, start: int, end: int
                ) -> list[dict[str, Any]] | None:
    """Messages of queue offsets [start, end) on one broker; None when it does not answer."""
    out: list[dict[str, Any]] = []
    offset = start
    with grpc.insecure_channel(addr) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        while offset < end:
            try:
                r = stub.PullMessage(messaging_pb2.PullMessageRequest(
                    consumer_group=TOOLS_CONSUMER_GROUP, topic=topic, queue_id=queue,
                    queue_offset=offset, max_msg_nums=min(PULL_BATCH, end - offset),
                    subscription="*"), timeout=ADMIN_TIMEOUT_S)
            except grpc.RpcError:
                return None
            if r.status.code not in (common_pb2.SUCCESS, common_pb2.NO_MATCHED_MSG):
                break  # NO_NEW_MSG, OFFSET_ILLEGAL...: nothing more here
            for m in r.messages:
                sp = m.system_properties
                out.append({"queue_offset": sp.queue_offset, "properties": dict(m.user_properties),
                            "body": m.body[:64]})
            if r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
    return out


def _wait(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}")
        time.sleep(POLL_S)
