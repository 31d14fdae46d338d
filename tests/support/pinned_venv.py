"""A pinned release of a third-party client in a virtualenv of its own, made once and reused
between runs (a lock serializes two sessions): the official SDKs the tests drive unmodified
run only as subprocesses of that virtualenv's python."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

INSTALL_TIMEOUT_S = 600


def pinned_python(venv: Path, package: str, version: str, *, upgrade_pip: bool = False,
                  check: str = "") -> Path:
    """The venv's python with `package==version` installed (installing it when the venv
    lacks it) and, when given, the `check` statement running in it; RuntimeError saying why
    it cannot (no network, a library that does not load, ...)."""
    python = venv / "bin" / "python"
    stamp = venv / f".installed-{package}-{version}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.with_name(f"{venv.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and python.exists():
            return python
        steps = [[sys.executable, "-m", "venv", "--clear", str(venv)]]
        if upgrade_pip:
            steps.append([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        steps.append([str(python), "-m", "pip", "install", "-q", f"{package}=={version}"])
        if check:
            steps.append([str(python), "-c", check])
        for step in steps:
            try:
                result = subprocess.run(step, capture_output=True, text=True,
                                        timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{' '.join(step)} timed out") from None
            if result.returncode != 0:
                tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
                raise RuntimeError(f"{' '.join(step[-2:])} failed: {' / '.join(tail)}")
        stamp.touch()
        return python
