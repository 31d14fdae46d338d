"""The commitlog's max offset never runs ahead of readable data (issue 16, item 1)."""

from __future__ import annotations

from pathlib import Path

from store.mapped_file import MappedFileQueue

FILE = 4096


def test_a_roll_in_write_buffer_mode_is_readable_only_once_committed(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, FILE, write_buffer=True)
    first = queue.last_file_for_append()
    first.append(b"a" * 1000)
    first.write_committed(*first.take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == 1000
    # The roll: the full file's tail and blank stay buffered, the next file gets data.
    first.append(b"b" * 1000)
    first.append_blank(b"\0" * 8)
    second = queue.last_file_for_append()
    assert second.file_from_offset == FILE
    second.append(b"c" * 100)
    assert queue.max_offset == 1000  # not the boundary: [1000, FILE) cannot be read yet
    assert len(b"".join(mf.read(0, FILE) for mf in queue)) == queue.max_offset
    first.write_committed(*first.take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == FILE
    second.write_committed(*second.take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == FILE + 100
    queue.close()


def test_a_batch_filling_several_files_ends_where_the_commit_got_to(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, FILE, write_buffer=True)
    files = []
    for n in range(3):
        mf = queue.last_file_for_append()
        mf.append(bytes([n + 1]) * 2000)
        if n < 2:
            mf.append_blank(b"\0" * 8)
        files.append(mf)
    assert queue.max_offset == 0
    files[0].write_committed(*files[0].take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == FILE
    files[1].write_committed(*files[1].take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == 2 * FILE
    files[2].write_committed(*files[2].take_uncommitted())  # type: ignore[misc]
    assert queue.max_offset == 2 * FILE + 2000
    queue.close()
