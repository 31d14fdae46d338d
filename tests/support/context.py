"""A broker's context around a real store in a directory of the test's: processors and
services are called directly, with no controller, gRPC server, HA or name server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from broker.clients import ClientManager
from broker.config import parse_config
from broker.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from broker.context import BrokerContext
from broker.convert import UniqKeyFactory
from broker.message_filter import FilterRegistry
from broker.pull import PullRequestHoldService
from broker.putting import MessagePutter
from broker.stats import BrokerStats
from broker.topic_config import Clock, TopicConfigManager
from broker.transaction import ProducerCheckStreams
from store.message_store import DefaultMessageStore
from store.waiters import OffsetWaiters

STORE_HOST = ("127.0.0.1", 10911)


@contextlib.asynccontextmanager
async def broker_context(root: Path, clock_ms: Clock | None = None,
                         **props: object) -> AsyncIterator[BrokerContext]:
    """A master's context over a store under `root` (broker.conf keys in `props`), on the
    running loop; the store is shut down on leaving. `topics_changed` only persists."""
    from tests.support.brokers import broker_props

    loaded = parse_config(broker_props(root, **props), env={})
    clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
    config, store_config = loaded.broker, loaded.store
    store_config.store_host = STORE_HOST
    topics = TopicConfigManager(root / "config" / "topics.json", config, clock,
                                delay_levels=len(store_config.delay_levels_ms))
    topics.load_and_init()
    store = DefaultMessageStore(store_config, clock_ms=clock)
    await asyncio.to_thread(store.load)
    store.start()
    pull_hold = PullRequestHoldService(asyncio.get_running_loop(),
                                       store.get_max_offset_in_queue)
    store.arriving_listeners.append(pull_hold.on_message_arriving)
    stats = BrokerStats(clock)
    context = BrokerContext(
        config=config, store_config=store_config, clock_ms=clock, store=store, topics=topics,
        offsets=ConsumerOffsetManager(root / "config" / "consumerOffset.json", clock),
        delay_offsets=DelayOffsetManager(root / "config" / "delayOffset.json"),
        stats=stats, clients=ClientManager(clock),
        filters=FilterRegistry(config.enable_property_filter), pull_hold=pull_hold,
        putter=MessagePutter(store, stats, config.broker_role, store_config.flush_disk_type,
                             OffsetWaiters(time.monotonic)),
        topics_changed=topics.persist_coalesced, check_streams=ProducerCheckStreams(),
        store_host=STORE_HOST, uniq_key=UniqKeyFactory(STORE_HOST[0]))
    try:
        yield context
    finally:
        pull_hold.shutdown()
        await asyncio.to_thread(store.shutdown)


async def dispatched(context: BrokerContext) -> None:
    """Returns once what was put is in the consume queues (the dispatch runs on its own
    thread; this runs one round of it now)."""
    def dispatch() -> None:
        context.store.commitlog.commit()
        context.store.do_reput()

    await asyncio.to_thread(dispatch)
