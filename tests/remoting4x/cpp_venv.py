"""The unmodified Apache RocketMQ C++ client (PyPI `rocketmq` 0.4.4: librocketmq.so, a
rocketmq-client-cpp 1.2.x build, with a ctypes wrapper) in its own virtualenv, made once
and reused between runs: `$MQ_CPP_VENV`, else `.venv-cpp/` in the repository (git-ignored).
It runs only as subprocesses (cpp_client.py), each with a HOME of its own: the library
logs under $HOME/logs/rocketmq-cpp/."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.pinned_venv import pinned_python

REPO_ROOT = Path(__file__).resolve().parents[2]
CPP_PACKAGE = "rocketmq"
CPP_VERSION = "0.4.4"  # pinned: the tests run this exact, unmodified release
CPP_SCRIPT = Path(__file__).with_name("cpp_client.py")


def cpp_venv_dir() -> Path:
    return Path(os.environ.get("MQ_CPP_VENV") or REPO_ROOT / ".venv-cpp")


def cpp_python(venv: Path | None = None) -> Path:
    """The client's python, installing the package when the venv lacks it and checking that
    its library loads; RuntimeError saying why it cannot."""
    return pinned_python(venv or cpp_venv_dir(), CPP_PACKAGE, CPP_VERSION,
                         check="import rocketmq.client")  # librocketmq.so loads


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
