"""Topic configs of one broker (RocketMQ's TopicConfigManager) and topic validation.

The table persists in `config/topics.json` in RocketMQ's layout
(`{"topicConfigTable": {...}, "dataVersion": {...}}`); its data version changes with every
change of the table, so the name servers rebuild their routes only when needed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.constants import NOT_ALLOWED_SEND_TOPICS
from broker.persistence import ConfigManager, encode_json
from common.constants import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DELAY_LEVELS_MS,
    PERM_INHERIT,
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    SCHEDULE_TOPIC,
)
from remoting.serving import run_steps, run_steps_on_loop
from store.message import is_system_topic, topic_problem

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # milliseconds


@dataclasses.dataclass(frozen=True)
class DataVersion:
    timestamp: int = 0
    counter: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1)

    def to_json(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_json(cls, data: Any) -> DataVersion:
        if data is None:
            return cls()
        return cls(int(data["timestamp"]), int(data["counter"]))


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def readable(self) -> bool:
        return self.perm & PERM_READ == PERM_READ

    @property
    def writeable(self) -> bool:
        return self.perm & PERM_WRITE == PERM_WRITE

    @property
    def queue_nums(self) -> int:
        """Queue ids valid on this broker: 0 .. max(read, write) - 1."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        config = cls(
            topic_name=str(data["topicName"]),
            read_queue_nums=int(data["readQueueNums"]),
            write_queue_nums=int(data["writeQueueNums"]),
            perm=int(data.get("perm", PERM_READ_WRITE)),
            topic_sys_flag=int(data.get("topicSysFlag", 0)),
            order=bool(data.get("order", False)),
        )
        problem = config_problem(config)
        if problem is not None:
            raise ValueError(problem)
        return config


def config_problem(config: TopicConfig, max_queue_nums: int | None = None) -> str | None:
    """Why a topic config cannot be used (name, queue counts, perm), or None; queue counts
    above `max_queue_nums` (maxTopicQueueNums) too when it is given."""
    problem = topic_problem(config.topic_name)
    if problem is not None:
        return problem
    if config.read_queue_nums < 0 or config.write_queue_nums < 0 or config.queue_nums == 0:
        return (f"topic {config.topic_name}: queue counts must be >= 0 and not both 0 "
                f"(read {config.read_queue_nums}, write {config.write_queue_nums})")
    if max_queue_nums is not None and config.queue_nums > max_queue_nums:
        return (f"topic {config.topic_name}: {config.queue_nums} queues, over this broker's "
                f"maxTopicQueueNums {max_queue_nums} (read {config.read_queue_nums}, write "
                f"{config.write_queue_nums})")
    if not 0 <= config.perm <= 0xF:
        return f"topic {config.topic_name}: perm {config.perm} is not a permission"
    return None


@functools.lru_cache(maxsize=4096)  # asked at every send; a broker sees few topics
def send_topic_problem(topic: str) -> str | None:
    """Why a client may not send to `topic` (SPEC §2.2), or None."""
    problem = topic_problem(topic)
    if problem is not None:
        return problem
    if is_system_topic(topic):
        return f"topic {topic} is a reserved system topic; clients cannot send to it"
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"topic {topic} is not allowed to send to"
    return None


Table = tuple[dict[str, TopicConfig], DataVersion]


# Changes arriving this close together share one write of topics.json (a burst of creates).
TOPIC_PERSIST_DEBOUNCE_S = 0.01
ENCODE_SLICE = 1000  # topics per loop turn when the table is encoded


def topics_file(version_json: bytes, topic_parts: list[bytes]) -> bytes:
    """topics.json from the data version's JSON and the topics' `"name":{...}` parts."""
    return b"".join((b'{"dataVersion":', version_json, b',"topicConfigTable":{',
                     b",".join(topic_parts), b"}}"))


class TopicConfigManager(ConfigManager[Table]):
    """The topic table; used from the event loop only. Persisted from a snapshot (a copy of
    the table: its configs are immutable) encoded on the loop by slices and written in a
    worker thread."""

    debounce_s = TOPIC_PERSIST_DEBOUNCE_S

    def __init__(self, path: Path, config: BrokerConfig, clock_ms: Clock, *,
                 delay_levels: int = len(DELAY_LEVELS_MS)) -> None:
        super().__init__(path)
        self.config = config
        self.delay_levels = delay_levels  # SCHEDULE_TOPIC_XXXX has a queue per delay level
        self.clock_ms = clock_ms
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        # The last file's topics: name -> config, name -> its JSON part (two dicts, not a
        # tuple per topic: fewer objects for the garbage collector), and the names sorted.
        self._json_parts: tuple[dict[str, TopicConfig], dict[str, bytes], list[str]] = (
            {}, {}, [])

    # -- persistence -----------------------------------------------------------------------
    def snapshot_state(self) -> Table:
        return dict(self.table), self.data_version

    def encode_state(self, state: Table) -> bytes:
        return topics_file(*run_steps(self.encode_steps(state)))

    def encode_steps(self, state: Table) -> Generator[None, None, tuple[bytes, list[bytes]]]:
        """The file's parts for `topics_file`, ENCODE_SLICE topics per step: the data
        version's JSON and each topic's `"name":{...}` in name order (sorted keys, compact:
        the bytes one encoder call would give). The parts are kept with the TopicConfig each
        was made from (configs are immutable, replaced whole on a change): only the topics
        whose config object is new are encoded again. Encoding all 50,000 topics after each
        change took ~100 ms of pure Python in a worker thread, which held the GIL in 5 ms
        turns against the event loop."""
        table, version = state
        old_configs, old_parts, old_names = self._json_parts
        old_config, old_part = old_configs.get, old_parts.get
        kept: dict[str, TopicConfig] = {}
        json_parts: dict[str, bytes] = {}
        added: list[str] = []
        topics = list(table)
        for start in range(0, len(topics), ENCODE_SLICE):
            if start:
                yield
            for name in topics[start:start + ENCODE_SLICE]:
                config = table[name]
                was = old_config(name)
                part = old_part(name) if was is config else None
                if part is None:
                    if was is None:
                        added.append(name)
                    part = encode_json({name: config.to_json()})[1:-1]
                kept[name] = config
                json_parts[name] = part
        removed = len(old_configs) - (len(kept) - len(added))
        names = [n for n in old_names if n in kept] if removed else list(old_names)
        names += added
        names.sort()  # a sorted run and a few names: ~linear
        self._json_parts = kept, json_parts, names
        parts: list[bytes] = []
        for start in range(0, len(names), ENCODE_SLICE):
            yield
            parts += [json_parts[n] for n in names[start:start + ENCODE_SLICE]]
        return encode_json(version.to_json()), parts

    async def persist_async(self) -> None:
        """Snapshots and encodes on the loop (by slices); joins the parts and writes in a
        worker thread (bytes.join lets go of the GIL for a megabyte)."""
        seq, state = self.snapshot()
        try:
            version, parts = await run_steps_on_loop(self.encode_steps(state))
            await asyncio.to_thread(lambda: self.file.write(seq, topics_file(version, parts)))
        except BaseException:
            self.dirty = True  # written by the periodic persistence
            raise

    def parse(self, data: Any) -> Table:
        table = {}
        for name, item in data["topicConfigTable"].items():
            config = TopicConfig.from_json(item)
            if config.topic_name != name:
                raise ValueError(f"topic config {name} names topic {config.topic_name}")
            table[name] = config
        return table, DataVersion.from_json(data.get("dataVersion"))

    def apply(self, parsed: Table) -> None:
        self.table, self.data_version = parsed

    def load_and_init(self) -> None:
        """Loads the file (or its backup) and adds the broker's own topics when missing."""
        self.load()
        limit = self.config.max_topic_queue_nums
        for config in self.table.values():
            if config.queue_nums > limit:
                log.warning("topic %s has %d queues, over maxTopicQueueNums %d: kept as it is; "
                            "admin calls on it work per queue", config.topic_name,
                            config.queue_nums, limit)
        changed = False
        for config in self._system_topics():
            if config.topic_name not in self.table:
                self.table[config.topic_name] = config
                changed = True
        if changed or self.data_version == DataVersion():
            self.data_version = self.data_version.next(self.clock_ms())
            self.persist()

    def _system_topics(self) -> list[TopicConfig]:
        """TopicConfigManager's start-up topics: TBW102 (auto-create), the schedule topic,
        and the cluster and broker name topics used for routing by cluster or broker."""
        c = self.config
        out = [TopicConfig(SCHEDULE_TOPIC, self.delay_levels, self.delay_levels)]
        if c.auto_create_topic_enable:
            out.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, c.default_topic_queue_nums,
                                   c.default_topic_queue_nums, PERM_READ_WRITE | PERM_INHERIT))
        if c.cluster_topic_enable:
            perm = PERM_READ_WRITE if c.broker_permission & PERM_WRITE else PERM_READ
            out.append(TopicConfig(c.broker_cluster_name, 16, 16, perm))
        if c.broker_topic_enable:
            perm = PERM_READ_WRITE if c.broker_permission & PERM_WRITE else PERM_READ
            out.append(TopicConfig(c.broker_name, 1, 1, perm))
        return [t for t in out if topic_problem(t.topic_name) is None]

    # -- table -----------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def _changed(self) -> None:
        self.data_version = self.data_version.next(self.clock_ms())

    def create_in_send(self, topic: str, requested_queue_nums: int) -> TopicConfig | None:
        """Auto-creates `topic` for a send when autoCreateTopicEnable; None when not allowed.

        Queue count: min(requested, defaultTopicQueueNums); the requested count is the
        client's default when it gives none. The caller persists and re-registers.
        """
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        if not self.config.auto_create_topic_enable:
            return None
        return self._create(topic, self.auto_created_queue_nums(requested_queue_nums),
                            PERM_READ_WRITE, "auto-created topic %s with %d queues")

    def auto_created_queue_nums(self, requested_queue_nums: int) -> int:
        """How many queues a topic auto-created by a send asking for that many gets."""
        default = self.config.default_topic_queue_nums
        return min(requested_queue_nums, default) if requested_queue_nums > 0 else default

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """A group's retry or dead-letter topic, created on its first message whether or
        not autoCreateTopicEnable. The caller persists and re-registers."""
        return self._create(topic, queue_nums, perm,
                            "created topic %s with %d queues for sent-back messages")

    def create_system_topic(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """A topic the broker itself writes to (the transaction half and op topics), made
        when first needed. The caller persists and re-registers."""
        return self._create(topic, queue_nums, perm, "created system topic %s with %d queues")

    def _create(self, topic: str, queue_nums: int, perm: int, what: str) -> TopicConfig:
        """`topic`'s config, created with `queue_nums` read and write queues when there is
        none (logged: `what` % (topic, queue_nums))."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        config = self.table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
        self._changed()
        log.info(what, topic, queue_nums)
        return config

    def update(self, config: TopicConfig) -> None:
        """Creates or replaces a topic config (admin); the caller validated it."""
        old = self.table.get(config.topic_name)
        if old == config:
            return
        self.table[config.topic_name] = config
        self._changed()
        log.info("%s topic config %s", "updated" if old else "created", config)

    def update_many(self, configs: list[TopicConfig]) -> tuple[int, int]:
        """Creates or replaces many topic configs (admin) with one data version change;
        the caller validated them. Returns (created, updated)."""
        created = updated = 0
        table = self.table
        for config in configs:
            old = table.get(config.topic_name)
            if old == config:
                continue
            table[config.topic_name] = config
            if old is None:
                created += 1
            else:
                updated += 1
        if created or updated:
            self._changed()
            log.info("topic configs: %d created, %d updated in one batch", created, updated)
        return created, updated

    def copy_from_master(self, configs: list[TopicConfig], version: DataVersion) -> bool:
        """Slave side: the table becomes the master's when its data version differs (as
        RocketMQ's SlaveSynchronize); True when it changed (the caller persists it)."""
        if version == self.data_version:
            return False
        for config in configs:
            problem = config_problem(config)
            if problem is not None:
                raise ValueError(f"the master's topic config is unusable: {problem}")
        self.table = {c.topic_name: c for c in configs}
        self.data_version = version
        log.info("copied %d topic configs from the master (data version %d:%d)",
                 len(configs), version.timestamp, version.counter)
        return True

    def is_broker_topic(self, topic: str) -> bool:
        """A topic the broker owns: system topics (SCHEDULE_TOPIC_XXXX, rmq_sys_*, ...),
        TBW102 and the cluster and broker name topics. Admins may not delete them."""
        return (is_system_topic(topic) or topic in NOT_ALLOWED_SEND_TOPICS
                or topic in {self.config.broker_cluster_name, self.config.broker_name})

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self._changed()
        log.info("deleted topic config %s", topic)
        return True
