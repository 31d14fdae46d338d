"""The producers' check streams (RocketMQ's ProducerManager channels, used by
Broker2Client.checkProducerTransactionState).

A producer of a group keeps SubscribeTransactionCheck open on each master; a check goes to
one live member of the half's group, round-robin, as a message on that member's stream. A
member whose stream ended (it shut down or died) is gone at once. Event loop only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Generic, TypeVar

from broker.convert import message_to_proto
from broker.transaction.messages import LocalTransactionState
from common.codec import MessageExt
from mqproto import messaging_pb2

log = logging.getLogger(__name__)

# Checks waiting on one member's stream; past this the member is not keeping up and new
# checks skip it (the half is asked again at the next check run).
MAX_QUEUED_CHECKS = 10_000

T = TypeVar("T")


class ProducerCheckStreams(Generic[T]):
    """`T` is what a stream carries (the servicer's CheckTransactionStateRequest)."""

    def __init__(self) -> None:
        # group -> client id -> the queues of that client's open streams
        self._streams: dict[str, dict[str, list[asyncio.Queue[T]]]] = {}
        self._turn = itertools.count()

    def subscribe(self, group: str, client_id: str) -> asyncio.Queue[T]:
        queue: asyncio.Queue[T] = asyncio.Queue(MAX_QUEUED_CHECKS)
        self._streams.setdefault(group, {}).setdefault(client_id, []).append(queue)
        log.info("producer %s of group %s listens for transaction checks", client_id, group)
        return queue

    def unsubscribe(self, group: str, client_id: str, queue: asyncio.Queue[T]) -> bool:
        """True when that was the client's last stream in the group."""
        by_client = self._streams.get(group, {})
        queues = by_client.get(client_id, [])
        if queue in queues:
            queues.remove(queue)
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

    def send(self, group: str, item: T) -> str | None:
        """Queues `item` on one live member's stream (round-robin over the members); the
        member's client id, None when no member of the group listens or all are full."""
        members = self._streams.get(group)
        if not members:
            return None
        ids = sorted(members)
        start = next(self._turn)
        for i in range(len(ids)):
            client_id = ids[(start + i) % len(ids)]
            for queue in members[client_id]:
                try:
                    queue.put_nowait(item)
                except asyncio.QueueFull:
                    continue
                return client_id
        log.warning("every producer of group %s has %d checks queued: check skipped",
                    group, MAX_QUEUED_CHECKS)
        return None


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
