"""A small real file system for the disk-full tests: a tmpfs the test mounts (root only; the
test is skipped, saying why, where mounting is impossible) and always unmounts, a ballast file
that takes its free space, and a child process for code that could die of SIGBUS."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

UNMOUNT_TRIES = 50  # 0.1 s apart: a process of the test may still be closing its files


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str = "16m", inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of `size` (and `inodes` inodes) mounted on `path` while the block runs; it is
    unmounted however the block ends (lazily, when something still holds it)."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                           capture_output=True, text=True, timeout=30)
        problem = (r.stderr.strip() or f"exit code {r.returncode}") if r.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        problem = str(e)
    if problem:
        reason = f"cannot mount a tmpfs on {path} (these tests need root): {problem}"
        print(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        unmount(path)


def unmount(path: Path) -> None:
    for _ in range(UNMOUNT_TRIES):
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(path)], check=True, timeout=30)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int = 0, name: str = "ballast") -> Path:
    """A file under `path` taking all its file system's free space but `leave` bytes."""
    ballast = path / name
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size + max(0, free_bytes(path) - leave)
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, size)
        if leave == 0:  # the last pages too
            with contextlib.suppress(OSError):
                while os.write(fd, bytes(4096)):
                    pass
    finally:
        os.close(fd)
    return ballast


def fill_inodes(path: Path) -> list[Path]:
    """Empty files under `path` until its file system has no inode left."""
    made: list[Path] = []
    with contextlib.suppress(OSError):
        while True:
            p = path / f"inode-{len(made)}"
            p.touch()
            made.append(p)
    return made


def run_in_child(fn: Callable[..., None], *args: Any, timeout: float = 120.0) -> None:
    """Runs fn(*args) in a forked child and fails the test with the child's traceback, or
    with the signal that killed it: a SIGBUS (a write through a mapping the file system could
    not back) fails the test instead of killing pytest before it unmounts."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        code = 0
        try:
            fn(*args)
            send.send("")
        except BaseException:  # noqa: BLE001 - reported to the parent
            send.send(traceback.format_exc())
            code = 1
        os._exit(code)

    process = context.Process(target=child, name=f"child-{fn.__name__}")
    process.start()
    send.close()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"{fn.__name__} did not finish within {timeout} s")
    try:
        report = receive.recv() if receive.poll() else ""
    except EOFError:  # it died before it could say anything
        report = ""
    if process.exitcode is not None and process.exitcode < 0:
        pytest.fail(f"{fn.__name__} died of {signal.Signals(-process.exitcode).name}")
    if report or process.exitcode:
        pytest.fail(f"{fn.__name__} failed (exit code {process.exitcode}):\n{report}")


class LogLines(logging.Handler):
    """Records of the loggers under `name` at `level` and above, while installed."""

    def __init__(self, name: str = "store", level: int = logging.INFO) -> None:
        super().__init__(level)
        self.logger = logging.getLogger(name)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> LogLines:
        self.previous = self.logger.level
        self.logger.setLevel(self.level)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.previous)

    def lines(self, level: int = logging.WARNING) -> list[str]:
        return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.records
                if r.levelno >= level]
