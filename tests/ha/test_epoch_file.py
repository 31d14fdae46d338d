"""The epoch file and the truncation point (RocketMQ's EpochFileCacheTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha.epoch_file import (
    EpochEntry,
    EpochFile,
    EpochFileError,
    decode,
    encode,
    find_consistent_point,
)

E = EpochEntry


def test_append_and_reload(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epoch")
    assert f.load() == [] and f.last_epoch == 0
    f.append(1, 0)
    f.append(2, 1000)
    f.append(2, 1000)  # a retried promotion
    again = EpochFile(tmp_path / "epoch")
    assert again.load() == [E(1, 0), E(2, 1000)]
    with pytest.raises(EpochFileError):
        again.append(2, 2000)  # epoch must grow
    with pytest.raises(EpochFileError):
        again.append(3, 500)  # start must not go back


def test_an_epoch_that_wrote_nothing_is_replaced(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epoch")
    f.load()
    f.append(1, 0)
    f.append(2, 0)
    assert f.entries == [E(2, 0)]


def test_a_corrupt_file_is_read_from_its_backup(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epoch")
    f.load()
    f.append(1, 0)
    f.append(3, 77)
    text = f.path.read_text()
    f.path.write_text(text.replace("3-77", "3-78"))  # CRC no longer matches
    assert EpochFile(tmp_path / "epoch").load() == [E(1, 0), E(3, 77)]
    f.backup.write_text("garbage")
    with pytest.raises(EpochFileError):
        EpochFile(tmp_path / "epoch").load()


def test_decode_checks_count_and_crc() -> None:
    text = encode([E(1, 0), E(2, 10)])
    assert decode(text) == [E(1, 0), E(2, 10)]
    head, crc, *lines = text.splitlines(keepends=True)
    with pytest.raises(EpochFileError):
        decode("3\n" + crc + "".join(lines))
    with pytest.raises(EpochFileError):
        decode("")


def test_truncate_suffix(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epoch")
    f.load()
    for epoch, start in ((1, 0), (2, 100), (3, 200)):
        f.append(epoch, start)
    f.truncate_suffix(150)
    assert EpochFile(tmp_path / "epoch").load() == [E(1, 0), E(2, 100)]


def test_consistent_point_same_history() -> None:
    h = [E(1, 0), E(2, 100)]
    assert find_consistent_point(h, 150, h, 300) == 150  # the slave is behind: no cut
    assert find_consistent_point(h, 300, h, 150) == 150  # the slave is ahead: cut


def test_consistent_point_old_master_rejoins() -> None:
    # The old master wrote epoch 1 to 500; the new master (epoch 2) took over at 420.
    old = [E(1, 0)]
    new = [E(1, 0), E(2, 420)]
    assert find_consistent_point(old, 500, new, 900) == 420


def test_consistent_point_diverged_epochs() -> None:
    # Epoch 3 started at different offsets on the two: the common history ends with epoch 2.
    slave = [E(1, 0), E(2, 100), E(3, 250)]
    master = [E(1, 0), E(2, 100), E(3, 200), E(4, 400)]
    assert find_consistent_point(slave, 300, master, 500) == 200


def test_no_common_epoch_and_empty_slave() -> None:
    assert find_consistent_point([E(5, 0)], 10, [E(1, 0)], 10) == -1
    assert find_consistent_point([], 0, [E(1, 0)], 10) == 0
