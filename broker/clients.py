"""Producers and consumers known to the broker through heartbeats (RocketMQ's
ProducerManager / ConsumerManager, reduced): who is in which group, for rebalancing."""

from __future__ import annotations

import dataclasses
import logging

from broker.constants import CHANNEL_EXPIRED_TIMEOUT_MS
from broker.topic_config import Clock

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ClientInfo:
    client_id: str
    last_update_timestamp: int
    subscriptions: dict[str, str] = dataclasses.field(default_factory=dict)  # topic -> tags


class ClientManager:
    """Used from the event loop only. A client silent for 120 s leaves its groups."""

    def __init__(self, clock_ms: Clock, expired_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS) -> None:
        self.clock_ms = clock_ms
        self.expired_ms = expired_ms
        self.consumer_groups: dict[str, dict[str, ClientInfo]] = {}
        self.producer_groups: dict[str, dict[str, ClientInfo]] = {}

    def heartbeat(self, client_id: str, producer_group: str, consumer_group: str,
                  subscriptions: dict[str, str]) -> None:
        now = self.clock_ms()
        if producer_group:
            self.producer_groups.setdefault(producer_group, {})[client_id] = ClientInfo(
                client_id, now)
        if consumer_group:
            group = self.consumer_groups.setdefault(consumer_group, {})
            if client_id not in group:
                log.info("new consumer connected, group: %s client: %s", consumer_group,
                         client_id)
            group[client_id] = ClientInfo(client_id, now, dict(subscriptions))

    def _scan(self, table: dict[str, dict[str, ClientInfo]], group: str) -> dict[str, ClientInfo]:
        clients = table.get(group, {})
        now = self.clock_ms()
        for client_id in [c for c, i in clients.items()
                          if now - i.last_update_timestamp > self.expired_ms]:
            log.info("client %s of group %s expired (no heartbeat for %d ms)", client_id, group,
                     now - clients[client_id].last_update_timestamp)
            del clients[client_id]
        if not clients:
            table.pop(group, None)
        return clients

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self._scan(self.consumer_groups, group))

    def producer_ids(self, group: str) -> list[str]:
        return sorted(self._scan(self.producer_groups, group))
