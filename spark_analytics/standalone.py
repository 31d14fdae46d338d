"""`mqspark start|status|stop`: a standalone Spark cluster (a master and its workers) from the
installed pyspark package, which ships `bin/spark-class` but not Spark's `sbin/start-master.sh`
or `start-worker.sh`.

    mqspark start  [--dir DIR] [--host 127.0.0.1] [--port 7077] [--webui-port 8080]
                   [--workers 1] [--cores N] [--memory 2g] [--timeout 180]
    mqspark status [--dir DIR] [--json]
    mqspark stop   [--dir DIR] [--timeout 30]

`start` runs `spark-class org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker`
detached (their own sessions; logs in DIR/logs, worker scratch in DIR/work), waits until the
master lists every worker alive and prints the master URL for `mqlag --master` /
`spark-submit --master`. `stop` ends exactly the processes `start` recorded (DIR/mqspark.state.json,
each checked to still be the JVM started), executors included. Exit codes: 0 done, 1 failure,
2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqclient.cli.arguments import at_least, port_number, seconds
from mqclient.cli.errors import stdout_closed
from mqclient.cli.local_cluster import port_is_free, read_json, write_json
from spark_analytics.session import java_problem

PROG = "mqspark"
DEFAULT_DIR = "mqspark-local"
STATE_FILE = "mqspark.state.json"
LOG_DIR = "logs"
WORK_DIR = "work"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7077  # Spark's
DEFAULT_WEBUI_PORT = 8080  # Spark's; workers' UIs take any free port
START_TIMEOUT_S = 180.0  # two JVMs on a loaded 2-core machine
STOP_TIMEOUT_S = 30.0
POLL_S = 0.5
EXIT_FAILURE = 1


class SparkClusterError(Exception):
    """The cluster cannot be started or stopped as asked; one line for a person."""


@dataclasses.dataclass(frozen=True)
class JvmRecord:
    name: str  # master, worker-1, ...
    pid: int  # also its process group: the JVM and the executors it forks
    start_time: int  # clock ticks since boot (/proc/PID/stat field 22): tells PID reuse apart
    spark_class: str
    log: str  # relative to DIR


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError:
        raise SparkClusterError("pyspark is not installed: pip install "
                                "'pyrocketmq-cluster[spark]'") from None
    return Path(pyspark.__file__).resolve().parent


def _start_time(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] in "ZX" else int(fields[19])


def is_alive(record: JvmRecord) -> bool:
    """The PID is still the process started (same start time; spark-class, or the JVM it
    exec'd, running the recorded class)."""
    try:
        os.waitpid(record.pid, os.WNOHANG)  # reaps it when `start` ran in this process
    except ChildProcessError:
        pass
    if _start_time(record.pid) != record.start_time:
        return False
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return record.spark_class.encode() in cmdline or cmdline == [b""]


def _spawn(name: str, spark_class: str, args: list[str], directory: Path,
           env: dict[str, str]) -> JvmRecord:
    log = f"{LOG_DIR}/{name}.log"
    with (directory / log).open("ab") as out:
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), spark_class, *args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=directory,
            env=env, start_new_session=True)
    process.returncode = 0  # detached on purpose: no "still running" warning when dropped
    return JvmRecord(name, process.pid, _start_time(process.pid) or -1, spark_class, log)


def _alive_workers(ui_url: str) -> int | None:
    """Workers the master lists alive (its web UI's JSON), None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{ui_url}/json/", timeout=2) as answer:
            return int(json.load(answer)["aliveworkers"])
    except (OSError, ValueError, KeyError):
        return None


def _log_tail(directory: Path, record: JvmRecord, lines: int = 5) -> str:
    text = (directory / record.log).read_text(errors="replace").splitlines()
    return " | ".join(line.strip() for line in text[-lines:])


def _wait(directory: Path, records: list[JvmRecord], what: str, ready: Any,
          deadline: float) -> None:
    while not ready():
        for r in records:
            if not is_alive(r):
                raise SparkClusterError(f"{r.name} exited (log {directory / r.log}): "
                                        f"{_log_tail(directory, r)}")
        if time.monotonic() > deadline:
            raise SparkClusterError(f"{what} not ready in time; see {directory / LOG_DIR}")
        time.sleep(POLL_S)


def load_state(directory: Path) -> dict[str, Any] | None:
    data = read_json(directory / STATE_FILE)
    if data is not None:
        data["processes"] = [JvmRecord(**r) for r in data["processes"]]
    return data


def _save_state(directory: Path, master_url: str, ui_url: str, records: list[JvmRecord]
                ) -> None:
    write_json(directory / STATE_FILE, {"master_url": master_url, "ui_url": ui_url,
                                        "processes": [dataclasses.asdict(r) for r in records]})


def start(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory)
    if state is not None and any(is_alive(r) for r in state["processes"]):
        print(f"{PROG}: a cluster runs in {directory} already: {state['master_url']} "
              f"(web UI {state['ui_url']}); `{PROG} stop --dir {args.dir}` first")
        return 0 if all(is_alive(r) for r in state["processes"]) else EXIT_FAILURE
    if problem := java_problem():
        raise SparkClusterError(problem)
    for port, option in ((args.port, "--port"), (args.webui_port, "--webui-port")):
        if not port_is_free(port, args.host):
            raise SparkClusterError(f"port {port} on {args.host} is taken; choose another "
                                    f"{option}")
    master_url = f"spark://{args.host}:{args.port}"
    ui_url = f"http://{args.host}:{args.webui_port}"
    for sub in (LOG_DIR, WORK_DIR):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=args.host,
               SPARK_WORKER_DIR=str(directory / WORK_DIR),
               SPARK_LOG_DIR=str(directory / LOG_DIR))
    deadline = time.monotonic() + args.timeout
    records: list[JvmRecord] = []
    try:
        records.append(_spawn("master", MASTER_CLASS, [
            "--host", args.host, "--port", str(args.port), "--webui-port",
            str(args.webui_port)], directory, env))
        _save_state(directory, master_url, ui_url, records)  # a failed start can be stopped
        _wait(directory, records, "the master", lambda: _alive_workers(ui_url) is not None,
              deadline)
        sizing = ((["--cores", str(args.cores)] if args.cores else [])
                  + (["--memory", args.memory] if args.memory else []))
        for n in range(1, args.workers + 1):
            records.append(_spawn(f"worker-{n}", WORKER_CLASS, [
                "--host", args.host, "--webui-port", "0", *sizing, master_url],
                directory, env))
            _save_state(directory, master_url, ui_url, records)
        _wait(directory, records, f"{args.workers} worker(s)",
              lambda: (_alive_workers(ui_url) or 0) >= args.workers, deadline)
    except BaseException:
        stop_jvms(records, STOP_TIMEOUT_S)
        (directory / STATE_FILE).unlink(missing_ok=True)
        raise
    print(f"Spark master {master_url} with {args.workers} worker(s) (web UI {ui_url}; logs "
          f"in {directory / LOG_DIR})\n"
          f"Try:  mqlag --master {master_url} --in SNAPSHOTS --out LAG\n"
          f"Stop: {PROG} stop --dir {args.dir}")
    return 0


def stop_jvms(records: Sequence[JvmRecord], timeout: float) -> int:
    """SIGTERM to each live record's process group (workers before the master), SIGKILL
    after `timeout`; returns how many were running."""
    targets = [r for r in reversed(records) if is_alive(r)]
    for r in targets:
        _killpg(r.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(is_alive(r) for r in targets) and time.monotonic() < deadline:
        time.sleep(0.1)
    for r in targets:
        if is_alive(r):  # (a worker kills its executors itself when it stops)
            _killpg(r.pid, signal.SIGKILL)
    return len(targets)


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the group is empty


def stop(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory)
    if state is None:
        print(f"no Spark cluster is running in {directory} (no {STATE_FILE})")
        return 0
    stopped = stop_jvms(state["processes"], args.timeout)
    (directory / STATE_FILE).unlink()
    print(f"stopped {stopped} Spark process(es) of {state['master_url']} in {directory}")
    return 0


def status(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory)
    if state is None:
        print(json.dumps([]) if args.json else f"no Spark cluster is running in {directory}")
        return EXIT_FAILURE
    rows = [{"name": r.name, "pid": r.pid, "alive": is_alive(r), "log": str(directory / r.log)}
            for r in state["processes"]]
    workers = _alive_workers(state["ui_url"])
    if args.json:
        print(json.dumps({"master_url": state["master_url"], "ui_url": state["ui_url"],
                          "alive_workers": workers, "processes": rows}, indent=2))
    else:
        print(f"Spark master {state['master_url']} (web UI {state['ui_url']}): "
              f"{'not answering' if workers is None else f'{workers} worker(s) alive'}")
        for r in rows:
            print(f"  {r['name']:10} pid {r['pid']:<8} {'alive' if r['alive'] else 'DEAD':6} "
                  f"{r['log']}")
    return 0 if workers is not None and all(r["alive"] for r in rows) else EXIT_FAILURE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="A standalone Spark cluster (master "
                                     "and workers) from the installed pyspark package.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"directory of logs, worker files and state (default {DEFAULT_DIR})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("start", parents=[common], help="start a master and its workers")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind and advertise (default {DEFAULT_HOST}; a LAN address "
                        "for workers on other machines)")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"the master's port (default {DEFAULT_PORT})")
    p.add_argument("--webui-port", type=port_number, default=DEFAULT_WEBUI_PORT,
                   help=f"the master's web UI port (default {DEFAULT_WEBUI_PORT})")
    p.add_argument("--workers", type=at_least(1), default=1, help="workers (default 1)")
    p.add_argument("--cores", type=at_least(1), help="cores per worker (default: all)")
    p.add_argument("--memory", help="memory per worker, e.g. 2g (default: RAM minus 1 GiB)")
    p.add_argument("--timeout", type=seconds(), default=START_TIMEOUT_S,
                   help=f"seconds to wait for the workers (default {START_TIMEOUT_S:.0f})")
    p.set_defaults(run=start)
    p = sub.add_parser("status", parents=[common], help="the master's URL and its workers")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=status)
    p = sub.add_parser("stop", parents=[common], help="stop the master and workers")
    p.add_argument("--timeout", type=seconds(), default=STOP_TIMEOUT_S,
                   help=f"seconds before SIGKILL (default {STOP_TIMEOUT_S:.0f})")
    p.set_defaults(run=stop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `mqspark status | head`: the reader had enough
        return stdout_closed()
    except (SparkClusterError, OSError) as e:
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
