"""Spark processes the tests start from the pyspark package: a standalone master and worker
on 127.0.0.1 (free ports, small worker) with `mqspark`, and a Spark Connect server in its own
process group, stopped by its own handle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def loopback_env(**extra: str) -> dict[str, str]:
    """The environment for Spark children: loopback only, the repository importable."""
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_home()),
                PYTHONPATH=str(REPO_ROOT), **extra)


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the process group this test started (the JVM and anything it forked),
    SIGKILL if it is still there after STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_for(condition, what: str, timeout: float, logs: list[Path]) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in logs
                      if p.exists())
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


class StandaloneCluster:
    """`mqspark start` (a master and one worker of 1 core and 1 GiB on 127.0.0.1, free
    ports) in `work`; `url` is spark://127.0.0.1:PORT; `stop()` is `mqspark stop`."""

    def __init__(self, work: Path) -> None:
        self.work = work
        port, ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.ui = f"http://127.0.0.1:{ui}"
        self.started = mqspark("start", "--dir", str(work), "--port", str(port),
                               "--webui-port", str(ui), "--cores", "1", "--memory", "1g",
                               "--timeout", str(START_TIMEOUT_S))
        if self.started.returncode != 0:
            self.stop()
            raise AssertionError(f"mqspark start failed:\n{self.started.stdout}"
                                 f"{self.started.stderr}")

    def stop(self) -> subprocess.CompletedProcess[str]:
        return mqspark("stop", "--dir", str(self.work))


def mqspark(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m spark_analytics.standalone ARGS` (the mqspark console script)."""
    return subprocess.run([sys.executable, "-m", "spark_analytics.standalone", *args],
                          cwd=REPO_ROOT, env=env or loopback_env(), capture_output=True,
                          text=True, timeout=START_TIMEOUT_S + STOP_TIMEOUT_S + 60,
                          stdin=subprocess.DEVNULL)


def run_lag(*args: str, timeout: float = 600, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """`python -m spark_analytics.lag ARGS` as a child process."""
    return subprocess.run([sys.executable, "-m", "spark_analytics.lag", *args], cwd=REPO_ROOT,
                          env=env or loopback_env(), capture_output=True, text=True,
                          timeout=timeout)


class ConnectServer:
    """A Spark Connect server (`spark-submit --class ...SparkConnectServer`, local[2]) on
    127.0.0.1; `url` is sc://127.0.0.1:PORT."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"sc://127.0.0.1:{port}"
        self.log = work / "connect.log"
        self.process = start(
            [str(spark_home() / "bin" / "spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false", "spark-internal"], self.log, loopback_env())
        try:
            wait_for(lambda: "Spark Connect server started" in self.log.read_text(
                errors="replace"), "the Spark Connect server", START_TIMEOUT_S, [self.log])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop(self.process)
