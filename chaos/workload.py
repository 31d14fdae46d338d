"""The workload: producer threads sending messages with keys and per-key sequence numbers,
push consumers recording every message they are given; everything goes to the history.

Two streams, each with its own topic and consumer group:
- plain: `Producer.send` (retried on another broker by the client), consumed concurrently;
- ordered: `Producer.send_orderly(msg, sharding_key=key)` (one queue per key, no retry
  elsewhere: RocketMQ orders only within a queue), consumed by an orderly listener, so
  per-key order can be checked.

Each key belongs to one producer thread, which sends its keys' messages in turn with
sequence numbers 0, 1, 2, ...; a message is identified by `key#seq` (history.message_id),
carried in the properties `chaos_key` / `chaos_seq` and at the head of the body.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from chaos.constants import (
    BALANCE_NUDGE_S,
    PROPERTY_KEY,
    PROPERTY_SEQ,
    SHARE_POLL_S,
    SHUTDOWN_TIMEOUT_S,
    THROTTLED_PULL_BATCH,
)
from chaos.history import CONSUME, FAIL, INFO, INVOKE, OK, SEND, HistoryWriter, message_id
from mqclient import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    MQClientError,
    Producer,
    PushConsumer,
)
from mqclient.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_RETRY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
)

log = logging.getLogger(__name__)
# Client errors raised before anything reached a broker: the send certainly did not happen.
DEFINITE_FAILURES = frozenset({"ILLEGAL_ARGUMENT", "SHUTDOWN"})


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    run_id: str
    producers: int = 4  # plain producer threads
    ordered_producers: int = 2
    keys_per_producer: int = 4
    rate: float = 200.0  # messages per second over all threads; 0 = as fast as they go
    body_size: int = 256
    consumers: int = 2  # per stream (each stream is one consumer group)
    max_messages: int = 100_000  # sends over all threads, then the send phase ends
    queues: int = 8  # per topic and master
    # Consumers take at most this share of their stream's send rate during the send phase,
    # so that a backlog builds up and a fault finds messages still to consume (0: no limit).
    consume_ratio: float = 0.0
    # the producers' send timeout (None: the client's, 3 s); longer than the broker's wait
    # for a slave ack (3 s) to see FLUSH_SLAVE_TIMEOUT answered rather than a client timeout
    send_timeout_s: float | None = None

    @property
    def plain_topic(self) -> str:
        return f"ChaosPlain-{self.run_id}"

    @property
    def ordered_topic(self) -> str:
        return f"ChaosOrdered-{self.run_id}"

    @property
    def topics(self) -> list[str]:
        return [self.plain_topic] + ([self.ordered_topic] if self.ordered_producers else [])

    def group(self, stream: str) -> str:
        return f"chaos-{stream}-{self.run_id}"

    @property
    def groups(self) -> list[str]:
        return [self.group("plain")] + ([self.group("ordered")] if self.ordered_producers
                                        else [])

    @property
    def cluster_topics(self) -> list[str]:
        """Every topic the run leaves on the brokers: its topics, and its consumer groups'
        retry and dead-letter topics (their offsets go with them)."""
        return self.topics + [f"{prefix}{g}" for g in self.groups
                              for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)]

    @property
    def threads(self) -> int:
        return self.producers + self.ordered_producers


class Throttle:
    """At most `rate` calls of acquire() per second over all threads (a token bucket of one
    second's worth; rate 0: no limit), and, with `produced`, at most `share` of what
    `produced()` counts (the messages of the stream acknowledged so far: the limit holds
    whatever rate the producers reach); off() lets everything through from then on."""

    def __init__(self, rate: float, share: float = 0.0,
                 produced: Callable[[], int] | None = None) -> None:
        self.rate = rate
        self._share = share if produced is not None else 0.0
        self._produced = produced
        self._taken = 0
        self._lock = threading.Lock()
        self._next = time.monotonic()
        self._off = threading.Event()
        if rate <= 0 and self._share <= 0:
            self._off.set()

    def acquire(self) -> None:
        if self._off.is_set():
            return
        if self.rate > 0:
            with self._lock:
                now = time.monotonic()
                self._next = max(self._next + 1.0 / self.rate, now - 1.0)
                delay = self._next - now
            if delay > 0:
                self._off.wait(delay)
        if self._share > 0 and self._produced is not None:
            while not self._off.is_set():
                with self._lock:
                    if self._taken < self._share * self._produced():
                        self._taken += 1
                        return
                self._off.wait(SHARE_POLL_S)

    def off(self) -> None:
        self._off.set()


class Counters:
    """What the progress line and the drain need, updated from every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent_ok = 0
        self.sent_failed = 0
        self.consumed = 0
        # acknowledged message -> where it was stored: (topic, broker group, queue, offset)
        self.acked: dict[str, tuple[str, str, int, int]] = {}
        self.delivered: set[str] = set()
        self.acked_by_stream: collections.Counter[str] = collections.Counter()  # any status

    def missing(self) -> int:
        """Acknowledged messages not consumed yet."""
        with self.lock:
            return len(self.acked.keys() - self.delivered)

    def missing_where(self) -> dict[tuple[str, str, int], set[int]]:
        """The queue offsets of the acknowledged messages not consumed yet."""
        out: dict[tuple[str, str, int], set[int]] = {}
        with self.lock:
            for mid in self.acked.keys() - self.delivered:
                topic, broker, queue, offset = self.acked[mid]
                out.setdefault((topic, broker, queue), set()).add(offset)
        return out


class Workload:
    def __init__(self, config: WorkloadConfig, namesrv_addr: str, history: HistoryWriter,
                 stop_sending: threading.Event, masters: int) -> None:
        """`masters`: broker groups serving the topics (each has `config.queues` queues)."""
        self.config = config
        self._masters = masters
        self.namesrv_addr = namesrv_addr
        self.history = history
        self.stop_sending = stop_sending
        self.counters = Counters()
        self._budget = itertools.count()
        self._producers: list[Producer] = []
        self._consumers: list[tuple[str, PushConsumer]] = []
        self._threads: list[threading.Thread] = []
        self._throttles: list[Throttle] = []

    # -- consumers -----------------------------------------------------------------------------
    def start_consumers(self) -> None:
        streams = [("plain", self.config.plain_topic, False)]
        if self.config.ordered_producers:
            streams.append(("ordered", self.config.ordered_topic, True))
        c = self.config
        for stream, topic, orderly in streams:
            threads = c.ordered_producers if orderly else c.producers
            share = c.rate * threads / c.threads if c.rate > 0 else 0.0
            ratio = c.consume_ratio if c.consume_ratio > 0 else 0.0
            throttle = Throttle(share * ratio, ratio,
                                lambda stream=stream: self.counters.acked_by_stream[stream])
            self._throttles.append(throttle)
            for i in range(self.config.consumers):
                process = f"consumer-{stream}-{i}"
                # A throttled consumer pulls little ahead, so that its backlog stays on the
                # brokers: what it pulled from a master before the master died would count
                # as delivered, whether or not the slave has it.
                cache = ({"pull_batch_size": THROTTLED_PULL_BATCH,
                          "pull_threshold_for_queue": THROTTLED_PULL_BATCH}
                         if c.consume_ratio > 0 else {})
                consumer = PushConsumer(
                    self.config.group(stream), self.namesrv_addr,
                    message_model=MessageModel.CLUSTERING,
                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **cache)
                consumer.subscribe(topic, "*")
                listener = self._listener(process, throttle)
                if orderly:
                    consumer.register_listener_orderly(listener)
                else:
                    consumer.register_listener_concurrently(listener)
                consumer.start()
                self._consumers.append((process, consumer))

    def consume_freely(self) -> None:
        """Lifts the consume throttle (the drain after the send phase)."""
        for throttle in self._throttles:
            throttle.off()

    def wait_balanced(self, timeout: float) -> bool:
        """Until each group's consumers together own every queue of its topic and each owns
        some (orderly ones: locked), so that the send phase starts from a steady state."""
        deadline = time.monotonic() + timeout
        by_group: dict[str, list[PushConsumer]] = {}
        for _, consumer in self._consumers:
            by_group.setdefault(consumer.group, []).append(consumer)
        topics = {self.config.group("plain"): self.config.plain_topic,
                  self.config.group("ordered"): self.config.ordered_topic}
        want = self.config.queues * self._masters
        nudge_at = time.monotonic() + BALANCE_NUDGE_S
        while time.monotonic() < deadline:
            pending = [consumers for g, consumers in by_group.items()
                       if not _balanced(consumers, topics[g], want)]
            if not pending:
                return True
            if time.monotonic() >= nudge_at:
                # An orderly consumer that lost the race for a queue's lock to the consumer
                # giving it up tries again only at its next rebalance (20 s): ask for it now.
                for consumer in (c for consumers in pending for c in consumers):
                    consumer.rebalance_immediately()
                nudge_at = time.monotonic() + BALANCE_NUDGE_S
            time.sleep(0.2)
        return False

    def _listener(self, process: str, throttle: Throttle
                  ) -> Callable[[list[MessageExt]], ConsumeStatus]:
        def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                throttle.acquire()
                key, seq = _identity(m)
                mid = message_id(key, seq)
                self.history.append(process, OK, CONSUME, {
                    "id": mid, "key": key, "seq": seq,
                    "topic": m.properties.get(PROPERTY_RETRY_TOPIC, m.topic),
                    "broker": m.broker_name, "queue": m.queue_id,
                    "queue_offset": m.queue_offset, "commit_log_offset": m.commit_log_offset,
                    "msg_id": m.msg_id, "reconsume_times": m.reconsume_times})
                with self.counters.lock:
                    self.counters.consumed += 1
                    self.counters.delivered.add(mid)
            return ConsumeStatus.CONSUME_SUCCESS
        return listener

    # -- producers -----------------------------------------------------------------------------
    def start_producers(self) -> None:
        c = self.config
        timeout = {} if c.send_timeout_s is None else {"send_timeout_s": c.send_timeout_s}
        plain = Producer(f"chaos-producer-{c.run_id}", self.namesrv_addr, **timeout).start()
        self._producers.append(plain)
        ordered = plain
        per_thread_rate = c.rate / c.threads if c.rate > 0 else 0.0
        for t in range(c.threads):
            is_ordered = t >= c.producers
            name = f"ordered-{t - c.producers}" if is_ordered else f"producer-{t}"
            keys = [f"{'o' if is_ordered else 'p'}{t:02d}k{j}" for j in range(c.keys_per_producer)]
            thread = threading.Thread(
                target=self._produce, name=f"chaos-{name}",
                args=(ordered if is_ordered else plain, name, keys, is_ordered, per_thread_rate),
                daemon=True)
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def _produce(self, producer: Producer, process: str, keys: list[str], ordered: bool,
                 rate: float) -> None:
        topic = self.config.ordered_topic if ordered else self.config.plain_topic
        seqs = dict.fromkeys(keys, 0)
        padding = b"x" * self.config.body_size
        next_at = time.monotonic()
        for key in itertools.cycle(keys):
            if self.stop_sending.is_set() or next(self._budget) >= self.config.max_messages:
                return
            if rate:
                next_at += 1.0 / rate
                delay = next_at - time.monotonic()
                if delay > 0 and self.stop_sending.wait(delay):
                    return
                next_at = max(next_at, time.monotonic() - 1.0)  # no burst after a stall
            seq = seqs[key]
            seqs[key] += 1
            mid = message_id(key, seq)
            body = (f"{mid} ".encode() + padding)[:max(self.config.body_size, len(mid) + 1)]
            msg = Message(topic, body, keys=[key],
                          properties={PROPERTY_KEY: key, PROPERTY_SEQ: str(seq)})
            self.history.append(process, INVOKE, SEND, {"id": mid, "key": key, "seq": seq,
                                                        "topic": topic, "ordered": ordered})
            started = time.monotonic()
            try:
                r = (producer.send_orderly(msg, key) if ordered else producer.send(msg))
            except MQClientError as e:
                self._failed(process, mid, FAIL if e.code in DEFINITE_FAILURES else INFO,
                             e.code, str(e), started)
                continue
            except Exception as e:  # noqa: BLE001 - anything else is an unknown outcome
                self._failed(process, mid, INFO, type(e).__name__, str(e), started)
                continue
            latency = time.monotonic() - started
            self.history.append(process, OK, SEND, {
                "id": mid, "status": r.status.value, "broker": r.message_queue.broker_name,
                "queue": r.message_queue.queue_id, "queue_offset": r.queue_offset,
                "msg_id": r.msg_id, "commit_log_offset": _commit_log_offset(r.offset_msg_id)},
                latency=round(latency, 6))
            with self.counters.lock:
                self.counters.sent_ok += 1
                self.counters.acked_by_stream["ordered" if ordered else "plain"] += 1
                if r.status.value == "SEND_OK":
                    mq = r.message_queue
                    self.counters.acked[mid] = (topic, mq.broker_name, mq.queue_id,
                                                r.queue_offset)

    def _failed(self, process: str, mid: str, type_: str, code: str, text: str,
                started: float) -> None:
        self.history.append(process, type_, SEND, {"id": mid, "detail": text[:300]},
                            error=code, latency=round(time.monotonic() - started, 6))
        with self.counters.lock:
            self.counters.sent_failed += 1

    def producing(self) -> bool:
        """Some producer thread still sends (the message budget is not used up)."""
        return any(t.is_alive() for t in self._threads)

    def wait_producers(self, timeout: float) -> bool:
        """Joins the producer threads (each send ends within its timeout)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    # -- shutdown ------------------------------------------------------------------------------
    def shutdown(self, report: Callable[[str, str, dict[str, Any]], None]) -> None:
        """Shuts clients down, each bounded: one that does not finish is reported (the
        thread is left behind as a daemon) and the run goes on."""
        clients: list[tuple[str, Any]] = [*self._consumers,
                                          *((f"producer-client-{i}", p)
                                            for i, p in enumerate(self._producers))]
        for process, client in clients:
            started = time.monotonic()
            thread = threading.Thread(target=client.shutdown, name=f"shutdown-{process}",
                                      daemon=True)
            thread.start()
            thread.join(SHUTDOWN_TIMEOUT_S)
            took = round(time.monotonic() - started, 3)
            if thread.is_alive():
                report(process, "shutdown hang", {"waited_s": took})
            else:
                report(process, "shutdown", {"took_s": took})
        self._consumers.clear()
        self._producers.clear()


def _balanced(consumers: list[PushConsumer], topic: str, queues: int) -> bool:
    owned = [consumer.assigned_queues(topic) for consumer in consumers]
    return all(owned) and len(set().union(*owned)) == queues and sum(map(len, owned)) == queues


def _identity(m: MessageExt) -> tuple[str, int]:
    return identity(m.properties, m.body)


def identity(properties: dict[str, str], body: bytes) -> tuple[str, int]:
    """A message's key and sequence number (properties; else the head of its body)."""
    key, seq = properties.get(PROPERTY_KEY), properties.get(PROPERTY_SEQ)
    if key is None or seq is None:
        head = body.split(b" ", 1)[0].decode("utf-8", errors="replace")
        key, _, seq = head.rpartition("#")
    try:
        return key, int(seq)
    except ValueError:
        return key or "?", -1


def _commit_log_offset(offset_msg_id: str) -> int | None:
    """The commitlog offset in an offsetMsgId: its last 16 hex digits."""
    try:
        return int(offset_msg_id[-16:], 16)
    except ValueError:
        return None
