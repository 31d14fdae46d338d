"""The official RocketMQ 5 Python SDK in its own virtualenv, made once and reused between
runs (tests/proxy and bench/proxy.py): `$MQ_SDK_VENV`, else `.venv-sdk/` in the repository
(git-ignored). Its generated `apache.rocketmq.v2` modules clash with ours in one process:
it only ever runs as a subprocess."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SDK_PACKAGE = "rocketmq-python-client"
SDK_VERSION = "5.1.2"  # pinned: the tests run this exact, unmodified release
SDK_SCRIPT = Path(__file__).with_name("sdk_client.py")
SDK_INSTALL_TIMEOUT_S = 600


def sdk_venv_dir() -> Path:
    return Path(os.environ.get("MQ_SDK_VENV") or REPO_ROOT / ".venv-sdk")


def sdk_python(venv: Path | None = None) -> Path:
    """The SDK's python, installing the SDK when the venv lacks it (a lock serializes two
    sessions); RuntimeError saying why it cannot (no network, ...)."""
    venv = venv or sdk_venv_dir()
    python = venv / "bin" / "python"
    stamp = venv / f".installed-{SDK_PACKAGE}-{SDK_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.with_name(f"{venv.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
            [str(python), "-m", "pip", "install", "-q", f"{SDK_PACKAGE}=={SDK_VERSION}"],
        ]
        for step in steps:
            try:
                result = subprocess.run(step, capture_output=True, text=True,
                                        timeout=SDK_INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{' '.join(step)} timed out") from None
            if result.returncode != 0:
                tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
                raise RuntimeError(f"{' '.join(step[-2:])} failed: {' / '.join(tail)}")
        stamp.touch()
        return python


def run_sdk_client(python: Path, home: Path, args: list[str], timeout: float,
                   env: dict[str, str] | None = None
                   ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Runs sdk_client.py with the SDK's python in `home` (the SDK logs under ~/logs); the
    finished process and its JSON lines. `env`: more environment variables."""
    result = subprocess.run(
        [str(python), str(SDK_SCRIPT), *args], capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL, cwd=home,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), **(env or {})})
    return result, [json.loads(line) for line in result.stdout.splitlines()
                    if line.startswith("{")]
