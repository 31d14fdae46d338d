"""What a slave proves at link start (issue 16): its commitlog max offset and the CRC32 of
the bytes just before it. The master checks them against its own commitlog before the
slave's acks count, so a link cannot claim data it never received."""

from __future__ import annotations

import zlib

from ha.codec import SlaveHello
from ha.constants import HA_PROOF_TAIL_SIZE
from ha.interface import HAStore


def read_range(store: HAStore, start: int, end: int) -> bytes | None:
    """The commitlog bytes [start, end), across files; None when some cannot be read."""
    parts: list[bytes] = []
    offset = start
    while offset < end:
        data = store.read_commitlog(offset, end - offset)
        if not data:
            return None
        parts.append(data)
        offset += len(data)
    return b"".join(parts)


def tail_crc(store: HAStore, end: int, size: int) -> int | None:
    """CRC32 of the `size` bytes before `end`; None when the store lacks some of them."""
    if end - size < store.min_phy_offset:
        return None
    data = read_range(store, end - size, end)
    return None if data is None else zlib.crc32(data)


def with_proof(hello: SlaveHello, store: HAStore) -> SlaveHello:
    """`hello` carrying the proof of what `store` holds now (none for an empty store)."""
    end = store.max_phy_offset
    size = min(HA_PROOF_TAIL_SIZE, end - store.min_phy_offset)
    crc = tail_crc(store, end, size) if end > 0 and size > 0 else None
    if crc is None:
        return hello._replace(max_offset=-1, tail_size=0, tail_crc=0)
    return hello._replace(max_offset=end, tail_size=size, tail_crc=crc)
