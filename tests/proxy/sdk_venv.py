"""The official RocketMQ 5 Python SDK in its own virtualenv, made once and reused between
runs (tests/proxy and bench/proxy.py): `$MQ_SDK_VENV`, else `.venv-sdk/` in the repository
(git-ignored). Its generated `apache.rocketmq.v2` modules clash with ours in one process:
it only ever runs as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.pinned_venv import pinned_python

REPO_ROOT = Path(__file__).resolve().parents[2]
SDK_PACKAGE = "rocketmq-python-client"
SDK_VERSION = "5.1.2"  # pinned: the tests run this exact, unmodified release
SDK_SCRIPT = Path(__file__).with_name("sdk_client.py")


def sdk_venv_dir() -> Path:
    return Path(os.environ.get("MQ_SDK_VENV") or REPO_ROOT / ".venv-sdk")


def sdk_python(venv: Path | None = None) -> Path:
    """The SDK's python, installing the SDK when the venv lacks it; RuntimeError saying why
    it cannot (no network, ...)."""
    return pinned_python(venv or sdk_venv_dir(), SDK_PACKAGE, SDK_VERSION, upgrade_pip=True)


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
