"""What HA needs of a store: DefaultMessageStore satisfies it, tests use in-memory stores."""

from __future__ import annotations

from typing import Protocol


class HAStore(Protocol):
    @property
    def max_phy_offset(self) -> int:
        """End of the committed commitlog data."""
        ...

    @property
    def min_phy_offset(self) -> int:
        """Start of the oldest retained commitlog file."""
        ...

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        """Committed bytes from `offset`, at most `max_bytes`, never crossing a file."""
        ...

    def append_commitlog(self, offset: int, data: bytes | memoryview) -> None:
        """Slave side: puts `data` at exactly the max offset; ValueError on a mismatch.
        `data` may be a view into the HA receive buffer: copy it, do not keep it."""
        ...
