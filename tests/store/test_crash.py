"""Crash tests of the store (SPEC §2.6).

1. A child process (tests/store/crash_writer.py) appends with SYNC_FLUSH and prints one line per
   acknowledged message; it is killed with SIGKILL at a random moment, several rounds on the same
   store. After every kill: `python -m store.inspect` finds no problem, every acknowledged message
   of every round is readable by queue offset, offsetMsgId and key, queue offsets have no holes,
   and after a clean shutdown the inspector reports a clean store without warnings.
2. The tail of a cleanly shut down store is damaged (a flipped byte, or zeros from some byte on)
   on a copy with an `abort` file: loading must cut the commitlog at the first damaged record,
   drop every consume-queue / index entry at or past it, and append right there; one test per
   group of record bytes (see MUST_CUT), so that each failure points at one kind of check.
3. A mapped file whose creation a kill cut short (empty) must not stop the store from loading.

Set CRASH_SEED to replay a run of test 1 (the seed is printed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.codec import decode_offset_msg_id
from store.config import StoreConfig
from store.constants import FlushDiskType, GetMessageStatus
from store.consume_queue import BLANK_SIZE
from store.inspect import inspect_store
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.store.crash_writer import body_for, crash_config, message_for

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 6


@dataclasses.dataclass(frozen=True)
class Ack:
    key: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    round: int

    @property
    def n(self) -> int:
        return int(self.key.rsplit("-", 1)[1])


def run_inspect(store_dir: Path) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "store.inspect", str(store_dir), "--json"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1, 2), p.stderr
    return p.returncode, (json.loads(p.stdout) if p.returncode != 2 else {"error": p.stderr})


def _brief(rep: dict) -> str:
    keys = ("error", "abort", "commitlog", "warnings", "problem_count", "problems")
    return json.dumps({k: rep[k] for k in keys if k in rep})[:3000]


def writer_round(store_dir: Path, kill_after: float, rnd: int, log: Path,
                 *args: str, after_line: str = "") -> list[Ack]:
    """Runs the writer until SIGKILL `kill_after` seconds after its start, or after it wrote
    `after_line` to stderr (the log)."""
    seen = log.read_text().count(after_line) if after_line and log.exists() else 0
    with open(log, "ab") as err:
        proc = subprocess.Popen([sys.executable, str(WRITER), str(store_dir), *args], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=err)
        chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))  # type: ignore[union-attr]
        reader.start()
        deadline = time.monotonic() + 60
        while after_line and log.read_text().count(after_line) == seen and proc.poll() is None:
            assert time.monotonic() < deadline, f"the writer did not say {after_line!r}"
            time.sleep(0.02)
        time.sleep(kill_after)
        died_early = proc.poll()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    assert died_early is None, f"writer exited by itself ({died_early}): {log.read_text()[-3000:]}"
    lines = b"".join(chunks).split(b"\n")[:-1]  # the last piece is an unfinished line
    acks = []
    for line in lines:
        _, key, topic, qid, qoff, msg_id = line.decode().split()
        acks.append(Ack(key, topic, int(qid), int(qoff), msg_id, rnd))
    return acks


def check_acked(store_dir: Path, acks: list[Ack]) -> None:
    """Opens the store in-process, checks every acknowledged message, shuts down cleanly."""
    store = DefaultMessageStore(crash_config(store_dir))
    store.load()
    store.start()
    try:
        by_position: dict[tuple[str, int, int], tuple[str, bytes, int]] = {}
        for (topic, qid), cq in sorted(store.queues.table.items()):
            assert cq.min_offset_in_queue == 0, (topic, qid)
            offsets: list[int] = []
            offset, end = 0, cq.max_offset_in_queue
            while offset < end:
                r = store.get_message("crash-test", topic, qid, offset, 32)
                assert r.status is GetMessageStatus.FOUND, (topic, qid, offset, r.status)
                for qoff, m in zip(r.queue_offsets, r.decoded(), strict=True):
                    assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qoff)
                    by_position[(topic, qid, qoff)] = (m.keys[0], m.body, m.commit_log_offset)
                offsets += r.queue_offsets
                offset = r.next_begin_offset
            assert offsets == list(range(end)), f"{topic}/{qid}: queue offsets with holes"
        for a in acks:
            where = f"acked {a} (round {a.round})"
            got = by_position.get((a.topic, a.queue_id, a.queue_offset))
            assert got is not None, f"{where}: no message at its queue offset"
            key, body, phys = got
            assert key == a.key and body == body_for(a.key, a.n), f"{where}: found {key}"
            assert phys == decode_offset_msg_id(a.msg_id)[1], where
            m = store.look_message_by_msg_id(a.msg_id)
            assert m is not None and m.keys[0] == a.key, f"{where}: not found by offsetMsgId"
            for k in (a.key, "U" + a.key):
                found = store.query_message(a.topic, k, 4)
                assert [x.commit_log_offset for x in found] == [phys], f"{where}: query {k}"
    finally:
        store.shutdown()


def test_sigkill_rounds(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 32)))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    log = tmp_path / "writer.stderr"
    acks: list[Ack] = []
    for rnd in range(ROUNDS):
        kill_after = rng.uniform(0.2, 1.5)
        # Counted from the writer's start, a kill may come before its store opens (a case
        # worth having); on a loaded machine every round could, so a last round without
        # an ack yet counts from the writing.
        after = "WRITING" if rnd == ROUNDS - 1 and not acks else ""
        new = writer_round(store_dir, kill_after, rnd, log, after_line=after)
        acks += new
        context = f"seed {seed}, round {rnd}, killed after {kill_after:.2f} s, {len(new)} acks"
        started = time.monotonic()
        if not (store_dir / "commitlog").is_dir():
            assert not new, context
            continue  # killed before the store had files
        code, rep = run_inspect(store_dir)
        assert code == 0 and rep["problem_count"] == 0, f"{context}: {_brief(rep)}"
        try:
            check_acked(store_dir, acks)
        except Exception as e:
            raise AssertionError(f"{context}: {type(e).__name__}: {e}") from e
        code, rep = run_inspect(store_dir)
        assert code == 0 and not rep["warnings"] and not rep["abort"], f"{context}: {_brief(rep)}"
        print(f"{context}; checked {len(acks)} acks in {time.monotonic() - started:.1f} s")
    assert acks, f"seed {seed}: no message was acknowledged in {ROUNDS} rounds"


# -- damaged tail ---------------------------------------------------------------------------

# Byte groups of a record with IPv4 hosts (SPEC §2.2), relative to its start. Damage in
# "header", "body" and "topic-properties" breaks a check (magic, TOTALSIZE, BODYCRC, the position,
# the lengths adding up to TOTALSIZE, UTF-8: a flipped ASCII byte never is; properties end with
# \x02), so recovery must cut there. No check covers "queue-fields" and "unchecked": the store
# may keep such a record, but must stay consistent (and must not hang on a wild queue offset).
HEADER = [*range(12), *range(28, 36), *range(84, 88)]  # TOTALSIZE MAGIC BODYCRC PHYSOFFSET BODYLEN
QUEUE_FIELDS = [12, 14, 15, 20, 21, 27]  # bytes of QUEUEID (12-15) and QUEUEOFFSET (20-27)
UNCHECKED = [*range(16, 20, 3), *range(36, 84, 7)]  # FLAG, SYSFLAG .. PREPARED TX OFFSET
MUST_CUT = ("header", "body", "topic-properties", "zero-rest")


@dataclasses.dataclass(frozen=True)
class Rec:
    offset: int
    size: int
    key: str
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes


def tail_config(store_dir: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(store_dir),
                       flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                       mapped_file_size_commit_log=32 * 1024,
                       mapped_file_size_consume_queue=300 * 20,
                       max_hash_slot_num=31, max_index_num=200)


def build_base(store_dir: Path) -> list[Rec]:
    """A few hundred records; the last one is the second of its file (the one before it is
    the first, the one before that ends the previous file, before an end-of-file blank)."""
    store = DefaultMessageStore(tail_config(store_dir))
    store.load()
    store.start()
    recs: list[Rec] = []
    file_size = store.config.mapped_file_size_commit_log
    n = 0
    while n < 250 or recs[-2].offset % file_size != 0:
        key = f"base-{n}"
        msg, topic, qid = message_for(key, n)
        r = store.put_message(msg)
        assert r.ok and r.append is not None
        recs.append(Rec(r.append.commit_log_offsets[0], r.append.wrote_bytes, key, topic, qid,
                        r.append.queue_offsets[0], msg.body))
        n += 1
    store.shutdown()
    for a, b in zip(recs, recs[1:], strict=False):
        assert a.offset + a.size == b.offset or b.offset % file_size == 0
    return recs


def damage(store_dir: Path, offset: int, file_size: int, zero_rest: bool) -> None:
    """Flips the byte at commitlog `offset`, or zeroes everything from it on."""
    start = offset - offset % file_size
    for f in sorted((store_dir / "commitlog").iterdir()):
        begin = int(f.name)
        if begin < start:
            continue
        with open(f, "r+b") as fh:
            pos = offset - begin if begin == start else 0
            fh.seek(pos)
            if zero_rest:
                fh.write(bytes(file_size - pos))
            else:
                b = fh.read(1)
                fh.seek(pos)
                fh.write(bytes([b[0] ^ 0xFF]))
                break
    (store_dir / "abort").touch()


def load_in_child(store_dir: Path, timeout: float) -> str:
    """Loads a copy in a child process: recovery must not hang on trusted header fields."""
    code = ("import sys; from tests.store.test_crash import tail_config; "
            "from store.message_store import DefaultMessageStore; from pathlib import Path; "
            "s = DefaultMessageStore(tail_config(Path(sys.argv[1]))); s.load(); "
            "print(s.commitlog.max_offset)")
    probe = store_dir.with_name(store_dir.name + "-probe")
    shutil.copytree(store_dir, probe)
    try:
        p = subprocess.run([sys.executable, "-c", code, str(probe)], cwd=REPO, timeout=timeout,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return f"load did not finish in {timeout} s"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return "" if p.returncode == 0 else f"load failed: {p.stderr.strip().splitlines()[-1:]}"


def check_damaged(store_dir: Path, recs: list[Rec], j: int, must_cut: bool) -> list[str]:
    """Loads the damaged copy; returns what is wrong (empty when all is well)."""
    cut, end = recs[j].offset, recs[-1].offset + recs[-1].size
    errors: list[str] = []
    store = DefaultMessageStore(tail_config(store_dir))
    try:
        store.load()
    except Exception as e:  # noqa: BLE001 - reported with the position
        return [f"load raised {type(e).__name__}: {e}"]
    store.start()
    try:
        max_offset = store.commitlog.max_offset
        allowed = (cut,) if must_cut else (cut, end)
        if max_offset not in allowed:
            errors.append(f"commitlog ends at {max_offset}, expected one of {allowed}")
        limit = max_offset
        for cq in store.queues.table.values():
            for i in range(cq.min_offset_in_queue, cq.max_offset_in_queue):
                entry = cq.get_entry(i)
                if entry is not None and entry[1] != BLANK_SIZE and entry[0] + entry[1] > limit:
                    errors.append(f"{cq.topic}/{cq.queue_id} entry {i} -> {entry[0]} past {limit}")
        for f in store.index.files():
            for _, phy, _, _ in f.entries():
                if phy >= limit:
                    errors.append(f"index entry -> {phy} past {limit}")
                    break
        for r in recs[j:] if max_offset == cut else []:
            if any(store.query_message(r.topic, k, 4) for k in (r.key, "U" + r.key)):
                errors.append(f"query {r.key} returns a cut record")
        kept = [r for r in recs if r.offset < max_offset]
        for r in kept[:j]:
            m = store.look_message_by_offset(r.offset)
            if m is None or m.body != r.body or m.keys[0] != r.key:
                errors.append(f"record at {r.offset} ({r.key}) damaged or missing")
                continue
            got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
            if not got.messages or got.decoded()[0].commit_log_offset != r.offset:
                errors.append(f"{r.key} not at queue offset {r.queue_offset}")
        msg, topic, qid = message_for("after-crash", 0)
        res = store.put_message(msg)
        if not res.ok or res.append is None:
            errors.append(f"append after recovery: {res.status}")
        else:
            phys = res.append.commit_log_offsets[0]
            queue_next = sum(1 for r in kept if (r.topic, r.queue_id) == (topic, qid))
            if max_offset == cut and phys != cut:
                errors.append(f"new record at {phys}, expected {cut}")
            if res.append.queue_offsets[0] != queue_next:
                errors.append(f"new record got queue offset {res.append.queue_offsets[0]}, "
                              f"expected {queue_next}")
    finally:
        store.shutdown()
    rep = inspect_store(store_dir)
    if rep.problem_count or rep.warnings:
        errors.append(f"inspect after recovery: {rep.problems[:2]} {rep.warnings[:2]}")
    return errors


def positions(rec: Rec, group: str) -> list[int]:
    body_end = 88 + len(rec.body)
    if group == "header":
        return HEADER
    if group == "body":
        return [88, *range(91, body_end, 7), body_end - 1]
    if group == "topic-properties":
        return sorted({body_end + 3, *range(body_end, rec.size, 7), rec.size - 2, rec.size - 1})
    if group == "queue-fields":
        return QUEUE_FIELDS
    if group == "unchecked":
        return UNCHECKED
    return sorted({*range(0, rec.size, 7), *range(0, 12, 4), rec.size - 1})  # zero-rest


@pytest.mark.timeout(80)
@pytest.mark.parametrize("group", [*MUST_CUT, "queue-fields", "unchecked"])
def test_damaged_tail(tmp_path: Path, group: str) -> None:
    """Damage at many positions of the last 3 records (the last of a file, the first and the
    second of the next one): a flipped byte, or ("zero-rest") zeros from there to the end."""
    base = tmp_path / "base"
    recs = build_base(base)
    file_size = tail_config(base).mapped_file_size_commit_log
    zero_rest = group == "zero-rest"
    must_cut = group in MUST_CUT
    failures: list[str] = []
    cases = 0
    for j in range(len(recs) - 3, len(recs)):
        rec = recs[j]
        for rel in positions(rec, group):
            cases += 1
            where = f"record {j} at {rec.offset} (+{rel}, abs {rec.offset + rel})"
            copy = tmp_path / f"case-{cases}"
            shutil.copytree(base, copy)
            damage(copy, rec.offset + rel, file_size, zero_rest)
            if must_cut:
                rep = inspect_store(copy)  # a damaged last record may pass for a torn write
                torn = j == len(recs) - 1 and any(w.startswith("torn tail") for w in rep.warnings)
                if rep.max_offset != rec.offset or not (rep.problem_count or torn):
                    failures.append(f"{where}: inspect says data ends at {rep.max_offset}, "
                                    f"{rep.problem_count} problem(s), {rep.warnings}")
                    shutil.rmtree(copy)
                    continue
            if group == "queue-fields":
                problem = load_in_child(copy, timeout=3)
                if problem:
                    failures.append(f"{where}: {problem}")
                    shutil.rmtree(copy)
                    continue
            errors = check_damaged(copy, recs, j, must_cut)
            if errors:
                failures.append(f"{where}: {'; '.join(errors[:3])}"[:400])
            shutil.rmtree(copy)
    summary = "\n".join(failures[:30])
    assert not failures, f"{len(failures)} of {cases} damaged positions failed:\n{summary}"


@pytest.mark.parametrize("where", ["consumequeue", "commitlog"])
def test_file_creation_cut_short(tmp_path: Path, where: str) -> None:
    """A kill between creating a mapped file (open O_CREAT) and sizing it (ftruncate) leaves
    an empty file; the sigkill rounds above hit this now and then. Loading must still work."""
    base = tmp_path / "store"
    recs = build_base(base)
    file_size = tail_config(base).mapped_file_size_commit_log
    end = recs[-1].offset + recs[-1].size
    if where == "commitlog":
        empty = base / "commitlog" / f"{end - end % file_size + file_size:020d}"
    else:
        queue = base / "consumequeue" / recs[-1].topic / str(recs[-1].queue_id)
        empty = queue / f"{int(sorted(queue.iterdir())[-1].name) + 300 * 20:020d}"
    empty.touch()
    (base / "abort").touch()
    store = DefaultMessageStore(tail_config(base))
    try:
        store.load()
    except Exception as e:  # noqa: BLE001 - the failure this test is about
        pytest.fail(f"an empty {empty.relative_to(base)} stops the store from loading: {e!r}")
    store.start()
    try:
        assert store.commitlog.max_offset == end
        for r in recs[-20:]:
            got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
            assert got.messages and got.decoded()[0].commit_log_offset == r.offset
        msg, _, _ = message_for("after-restart", 0)
        res = store.put_message(msg)
        assert res.ok and res.append is not None and res.append.commit_log_offsets[0] == end
    finally:
        store.shutdown()
    rep = inspect_store(base)
    assert rep.problem_count == 0 and not rep.warnings, rep.problems[:3]


def test_empty_file_after_a_full_consume_queue_file(tmp_path: Path) -> None:
    """The same cut short, after a queue file that is exactly full (recovery then reads the
    empty one): the sigkill rounds once lost every record after it, as the queue failed to
    load and its records no longer matched it."""
    base = tmp_path / "store"
    store = DefaultMessageStore(tail_config(base))
    store.load()
    store.start()
    per_file = store.config.mapped_file_size_consume_queue // 20
    offsets = []
    for n in range(per_file):
        msg = Message("Full", f"m{n}".encode() * 10, {"KEYS": f"k{n}"}, queue_id=0)
        r = store.put_message(msg)
        assert r.ok and r.append is not None
        offsets.append(r.append.commit_log_offsets[0])
    other, _, _ = message_for("after", 1)
    r = store.put_message(other)
    assert r.ok and r.append is not None
    end = r.append.commit_log_offsets[0] + r.append.wrote_bytes
    store.shutdown()
    queue = base / "consumequeue" / "Full" / "0"
    [full] = sorted(queue.iterdir())
    assert full.stat().st_size == per_file * 20
    (queue / f"{per_file * 20:020d}").touch()
    (base / "abort").touch()
    store = DefaultMessageStore(tail_config(base))
    store.load()
    store.start()
    try:
        assert store.commitlog.max_offset == end
        assert store.get_max_offset_in_queue("Full", 0) == per_file
        got = store.get_message("g", "Full", 0, per_file - 1, 1)
        assert got.decoded()[0].commit_log_offset == offsets[-1]
        msg = Message("Full", b"next", {"KEYS": "next"}, queue_id=0)
        r = store.put_message(msg)
        assert r.ok and r.append is not None and r.append.queue_offsets[0] == per_file
    finally:
        store.shutdown()


def test_crash_store_keeps_its_files_on_a_full_disk(tmp_path: Path) -> None:
    """The host's disk must not decide what the sigkill rounds can read: over 85 % full, a
    store with the default ratios deletes its oldest commitlog files at its first clean step
    (at start), and round 0's first entries read MESSAGE_WAS_REMOVING."""
    store = DefaultMessageStore(crash_config(tmp_path / "store"), disk_usage=lambda _: 0.88)
    store.load()
    store.start()
    try:
        n = 0
        while len(store.commitlog.queue.files) < 3:
            msg, _, _ = message_for(f"full-disk-{n}", n)
            assert store.put_message(msg).ok
            n += 1
        assert store.clean_expired_files() == 0 and store.commitlog.min_offset == 0
        got = store.get_message("g", "CrashA", 0, 0, 1)
        assert got.status is GetMessageStatus.FOUND, got
    finally:
        store.shutdown()
