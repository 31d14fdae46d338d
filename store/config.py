"""Store configuration: RocketMQ's key names, in snake_case, read from broker.conf style keys."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from common.constants import MESSAGE_DELAY_LEVEL, parse_delay_levels
from store.constants import CQ_ENTRIES_PER_FILE, CQ_STORE_UNIT_SIZE, BrokerRole, FlushDiskType

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_case(key: str) -> str:
    """`mappedFileSizeCommitLog` -> `mapped_file_size_commit_log`."""
    return _CAMEL_BOUNDARY.sub(r"_\1", key).lower()


@dataclasses.dataclass
class StoreConfig:
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = CQ_ENTRIES_PER_FILE * CQ_STORE_UNIT_SIZE
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # Flush service of the commitlog (ASYNC_FLUSH) and of consume queues / index.
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    # The consume-queue flush writes the queues' positions this often at most (ms; 0: never),
    # so a start after a crash re-dispatches from there instead of reading every queue.
    consume_queue_snapshot_interval: int = 10_000
    # Consume-queue files kept open at once (an LRU cache; the others hold no fd).
    consume_queue_open_files: int = 1024
    sync_flush_timeout: int = 5000
    # Appends go to a reusable in-process buffer that the flush service writes with pwrite.
    # None = on for SYNC_FLUSH (pwrite + fdatasync measured 3-4x faster than msync here),
    # off for ASYNC_FLUSH (appends straight into the mapping survive a process crash at once).
    transient_store_pool_enable: bool | None = None
    # Zero-fill the next commitlog file in the background before it is used (it is made and
    # its disk space allocated in the background either way).
    warm_mapped_file_enable: bool = True
    max_message_size: int = 4 * 1024 * 1024
    os_page_cache_busy_time_out_mills: int = 1000
    # Expired files and disk space (SPEC §2.7).
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90  # past this the store refuses writes
    disk_space_clean_forcibly_ratio: int = 85
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    # Index.
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    # Reads (SPEC §2.8).
    access_message_in_memory_max_ratio: int = 40
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    # Where this store is served from: STOREHOST of records and offsetMsgId.
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    # Delay of each delay level; a SCHEDULE_TOPIC_XXXX entry's tags code is its delivery time.
    message_delay_level: str = MESSAGE_DELAY_LEVEL
    delay_levels_ms: tuple[int, ...] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.delay_levels_ms = parse_delay_levels(self.message_delay_level)

    @property
    def use_write_buffer(self) -> bool:
        if self.transient_store_pool_enable is None:
            return self.flush_disk_type is FlushDiskType.SYNC_FLUSH
        return self.transient_store_pool_enable

    @classmethod
    def from_properties(cls, props: dict[str, str], **overrides: Any) -> StoreConfig:
        """Builds a config from broker.conf keys; keys of other components are ignored."""
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        values: dict[str, Any] = {}
        for key, raw in props.items():
            name = snake_case(key.strip())
            field = fields.get(name)
            if field is None:
                continue
            values[name] = _convert(name, field.type, raw.strip())
        values.update(overrides)
        return cls(**values)


def _convert(name: str, type_name: Any, raw: str) -> Any:
    t = str(type_name)
    try:
        if t.startswith("bool"):
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if t == "int":
            return int(raw)
        if t == "FlushDiskType":
            return FlushDiskType(raw)
        if t == "BrokerRole":
            return BrokerRole(raw)
        if t.startswith("tuple"):
            host, _, port = raw.rpartition(":")
            return (host, int(port))
    except ValueError as e:
        raise ValueError(f"bad value for {name}: {raw!r}") from e
    return raw
