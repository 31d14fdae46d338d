"""The unmodified Apache RocketMQ C++ client (PyPI `rocketmq` 0.4.4: librocketmq.so, a
rocketmq-client-cpp 1.2.x build, with a ctypes wrapper) in its own virtualenv, made once
and reused between runs: `$MQ_CPP_VENV`, else `.venv-cpp/` in the repository (git-ignored).
It runs only as subprocesses (cpp_client.py), each with a HOME of its own: the library
logs under $HOME/logs/rocketmq-cpp/."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CPP_PACKAGE = "rocketmq"
CPP_VERSION = "0.4.4"  # pinned: the tests run this exact, unmodified release
CPP_SCRIPT = Path(__file__).with_name("cpp_client.py")
INSTALL_TIMEOUT_S = 600


def cpp_venv_dir() -> Path:
    return Path(os.environ.get("MQ_CPP_VENV") or REPO_ROOT / ".venv-cpp")


def cpp_python(venv: Path | None = None) -> Path:
    """The client's python, installing the package when the venv lacks it (a lock
    serializes two sessions) and checking that its library loads; RuntimeError saying why
    it cannot."""
    venv = venv or cpp_venv_dir()
    python = venv / "bin" / "python"
    stamp = venv / f".installed-{CPP_PACKAGE}-{CPP_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.with_name(f"{venv.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "-q", f"{CPP_PACKAGE}=={CPP_VERSION}"],
            [str(python), "-c", "import rocketmq.client"],  # librocketmq.so loads
        ]
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


def start_cpp_client(python: Path, home: Path, args: list[str]) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(python), str(CPP_SCRIPT), *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=home,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)})


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[int, list[dict[str, Any]],
                                                                    str]:
    """Waits for a client; its exit code, JSON lines and stderr tail (killed at timeout)."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        err += f"\n(killed after {timeout} s)"
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return process.returncode, lines, err[-3000:]
