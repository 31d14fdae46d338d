"""The producers' check streams (RocketMQ's ProducerManager channels, used by
Broker2Client.checkProducerTransactionState).

A producer of a group keeps SubscribeTransactionCheck open on each master; a check goes to
one live member of the half's group, round-robin, as a message on that member's stream. A
member whose stream ended (it shut down or died) is gone at once. Event loop only.

A check carries the half message, body and all: with access control, a stream opened by an
account (acl.caller, at subscribe) gets only the checks of topics that account may PUB as
the account table has it at each check; a producer group is no resource of its own, and
anyone may name one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Generic, TypeVar

from acl import caller
from acl.decision import Denied
from acl.requirements import STORED_TOPIC, TRANSACTION_CHECKS
from broker.convert import message_to_proto
from broker.transaction.messages import LocalTransactionState
from common.codec import MessageExt
from mqproto import messaging_pb2

log = logging.getLogger(__name__)

# Checks waiting on one member's stream; past this the member is not keeping up and new
# checks skip it (the half is asked again at the next check run).
MAX_QUEUED_CHECKS = 10_000
MAX_LOGGED_REFUSALS = 1024  # (group, topic) pairs whose refused checks were logged

T = TypeVar("T")


class ProducerCheckStreams(Generic[T]):
    """`T` is what a stream carries (the servicer's CheckTransactionStateRequest)."""

    def __init__(self) -> None:
        # group -> client id -> the queues of that client's open streams
        self._streams: dict[str, dict[str, list[asyncio.Queue[T]]]] = {}
        # a stream's caller (acl.caller when it subscribed; None: unrestricted)
        self._callers: dict[asyncio.Queue[T], caller.Caller | None] = {}
        self._turn = itertools.count()
        self._logged: set[tuple[str, str]] = set()

    def subscribe(self, group: str, client_id: str) -> asyncio.Queue[T]:
        """A stream for the request being served (its account receives what it may)."""
        queue: asyncio.Queue[T] = asyncio.Queue(MAX_QUEUED_CHECKS)
        self._streams.setdefault(group, {}).setdefault(client_id, []).append(queue)
        self._callers[queue] = caller.current()
        log.info("producer %s of group %s listens for transaction checks", client_id, group)
        return queue

    def unsubscribe(self, group: str, client_id: str, queue: asyncio.Queue[T]) -> bool:
        """True when that was the client's last stream in the group."""
        by_client = self._streams.get(group, {})
        queues = by_client.get(client_id, [])
        if queue in queues:
            queues.remove(queue)
        self._callers.pop(queue, None)
        if queues:
            return False
        by_client.pop(client_id, None)
        if not by_client:
            self._streams.pop(group, None)
        log.info("producer %s of group %s stopped listening for transaction checks",
                 client_id, group)
        return True

    def members(self, group: str) -> list[str]:
        return sorted(self._streams.get(group, {}))

    def groups(self) -> dict[str, int]:
        """Producer group -> members listening."""
        return {g: len(m) for g, m in self._streams.items()}

    def send(self, group: str, item: T, *, topic: str) -> str | None:
        """Queues `item`, a check of a half of `topic`, on one live member's stream that may
        have it (round-robin over the members); the member's client id, None when no member
        of the group listens, may have it, or has room."""
        members = self._streams.get(group)
        if not members:
            return None
        ids = sorted(members)
        start = next(self._turn)
        refused = full = 0
        for i in range(len(ids)):
            client_id = ids[(start + i) % len(ids)]
            for queue in members[client_id]:
                if not self._may_have(queue, topic):
                    refused += 1
                    continue
                try:
                    queue.put_nowait(item)
                except asyncio.QueueFull:
                    full += 1
                    continue
                return client_id
        if full:
            log.warning("every producer of group %s allowed to have it has %d checks queued: "
                        "check skipped", group, MAX_QUEUED_CHECKS)
        elif refused and (group, topic) not in self._logged:
            if len(self._logged) >= MAX_LOGGED_REFUSALS:
                self._logged.clear()
            self._logged.add((group, topic))
            log.warning("no producer of group %s listening for transaction checks may PUB "
                        "topic %s (access control): its checks are not sent", group, topic)
        return None

    def _may_have(self, queue: asyncio.Queue[T], topic: str) -> bool:
        try:
            caller.check_found(self._callers.get(queue), TRANSACTION_CHECKS,
                               {STORED_TOPIC: (topic,)})
        except Denied:
            return False
        return True


def check_request(half: MessageExt) -> messaging_pb2.CheckTransactionStateRequest:
    """What a producer's check stream carries: the half with its real topic and queue, and
    the offsets its EndTransaction names (of the copy the check renewed)."""
    return messaging_pb2.CheckTransactionStateRequest(
        message=message_to_proto(half), tran_state_table_offset=half.queue_offset,
        commit_log_offset=half.commit_log_offset)


TRANSACTION_STATES = {
    messaging_pb2.TRANSACTION_COMMIT_TYPE: LocalTransactionState.COMMIT,
    messaging_pb2.TRANSACTION_ROLLBACK_TYPE: LocalTransactionState.ROLLBACK,
    messaging_pb2.TRANSACTION_NOT_TYPE: LocalTransactionState.UNKNOWN,
}
