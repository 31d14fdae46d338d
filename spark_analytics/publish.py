"""Publishing an output table so that a reader never sees it half written: the job writes
each table into a temporary directory beside it, then swaps it into place.

The swap is one atomic `renameat2(RENAME_EXCHANGE)` on Linux file systems that have it, so
a reader sees the old table or the new one; elsewhere two renames, between which the table
is briefly absent (never partial). The replaced version is kept as trash until the next
publish of the same table, so a reader still listing it can finish."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import uuid
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_TMP_PREFIX = "staging-"  # no leading dot or underscore: Spark skips such paths
_TRASH_PREFIX = ".trash-"


def _libc_renameat2():  # the function or None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    return function


_renameat2 = _libc_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two existing paths; False when the system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(code, f"renameat2({a}, {b}): {os.strerror(code)}")


def staging_dir(out: Path, table: str) -> Path:
    """A fresh temporary directory path (not created) beside `out/table`."""
    return out / f"{_TMP_PREFIX}{table}-{uuid.uuid4().hex[:12]}"


def publish(staged: Path, out: Path, table: str) -> Path:
    """Puts the fully written `staged` directory in place as `out/table`."""
    final = out / table
    for old in out.glob(f"{_TRASH_PREFIX}{table}-*"):
        shutil.rmtree(old, ignore_errors=True)
    if not final.exists():
        os.rename(staged, final)
        return final
    trash = out / f"{_TRASH_PREFIX}{table}-{uuid.uuid4().hex[:12]}"
    if exchange(staged, final):
        os.rename(staged, trash)
    else:
        os.rename(final, trash)
        os.rename(staged, final)
    return final


def remove_stale_staging(out: Path) -> None:
    """Removes temporary directories a killed run left behind."""
    for stale in out.glob(f"{_TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
