"""One run: prepare the cluster, run the workload while the nemesis breaks the cluster, heal,
drain, check the history, write the result, the summary and the chart.

    RUN_DIR/history.jsonl   every operation and fault (kept: `mqchaos check` reads it again)
    RUN_DIR/result.json     the checkers' result and the scenario's verdict
    RUN_DIR/summary.txt     the one-screen summary (also printed)
    RUN_DIR/chart.png       send throughput and latency over time, fault windows shaded
    RUN_DIR/cluster/        the local cluster mqchaos started (when it started one)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from chaos import report
from chaos.checker import check
from chaos.cluster import ClusterError, ClusterObserver
from chaos.constants import (
    BALANCE_TIMEOUT_S,
    CHART_FILE,
    CLIENT_LOG_FILE,
    CLUSTER_DIR,
    DRAIN_CHECK_S,
    DRAIN_MAX_S,
    DRAIN_QUIET_S,
    HISTORY_FILE,
    OFFSETS_PROBE_S,
    PREPARE_TIMEOUT_S,
    PRODUCER_JOIN_TIMEOUT_S,
    RESULT_FILE,
    SUMMARY_FILE,
)
from chaos.faults import FaultError, FaultInjector
from chaos.history import (
    CONSUMER_OFFSETS,
    END,
    FINAL_READ,
    INFO,
    OK,
    PROBE,
    READ,
    RUN,
    RUNNER,
    START,
    HistoryWriter,
    message_id,
    read_history,
)
from chaos.nemesis import Nemesis
from chaos.progress import Progress
from chaos.scenarios import Scenario
from chaos.workload import Workload, WorkloadConfig, identity
from mqclient.admin import AdminError
from mqclient.cli.local_cluster import LocalClusterError, is_alive
from mqclient.cli.mqcluster import load_state

log = logging.getLogger(__name__)
MQCLUSTER_TIMEOUT_S = 180.0


class RunError(Exception):
    """The run could not be set up or carried out; one line for a person."""


@dataclasses.dataclass
class RunOptions:
    scenario: Scenario
    out_dir: Path
    target: str = "local"  # or "compose"
    duration_s: float | None = None  # None: the scenario's
    cluster_dir: Path | None = None  # local: a running mqcluster, else one is started there
    keep_cluster: bool = False  # local: leave a cluster mqchaos started running
    # Leave the run's topics and consumer groups in the cluster (else deleted at the end, so
    # that later lag reports do not show them).
    keep_topics: bool = False
    namesrv_addr: str | None = None  # compose: the published name server addresses
    compose_project: str | None = None
    compose_services: Mapping[str, str] | None = None  # node name -> compose service
    producers: int = 4
    ordered_producers: int | None = None  # None: the scenario's
    consumers: int = 2
    rate: float | None = None  # None: the scenario's; 0: as fast as possible
    consume_ratio: float | None = None  # None: the scenario's; 0: consumers unthrottled
    max_messages: int = 100_000
    body_size: int = 256
    drain_quiet_s: float = DRAIN_QUIET_S
    drain_max_s: float = DRAIN_MAX_S
    progress: TextIO | None = None


# -- targets -----------------------------------------------------------------------------------
def _mqcluster(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mqclient.cli.mqcluster", *args, "--dir",
                           str(directory)], capture_output=True, text=True,
                          timeout=MQCLUSTER_TIMEOUT_S, stdin=subprocess.DEVNULL)


def _local_cluster_running(directory: Path) -> bool:
    try:
        state = load_state(directory)
    except LocalClusterError:
        return False
    return state is not None and all(is_alive(r) for r in state[1])


def start_local_cluster(directory: Path, scenario: Scenario) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    # Any free port for its name server: 9876 stays with the person's own cluster.
    r = _mqcluster(directory, "up", "--namesrv-port", "0", *scenario.shape.mqcluster_args())
    if r.returncode != 0:
        raise RunError(f"mqcluster up failed: {(r.stderr or r.stdout).strip()}")


def stop_local_cluster(directory: Path) -> None:
    r = _mqcluster(directory, "down")
    if r.returncode != 0:
        log.error("mqcluster down failed: %s", (r.stderr or r.stdout).strip())


def check_local_shape(directory: Path, scenario: Scenario) -> None:
    """A cluster the user started must have what the scenario breaks."""
    state = load_state(directory)
    assert state is not None
    layout = state[0]
    want = scenario.shape
    if layout.role != want.role or layout.flush != want.flush:
        raise RunError(f"the cluster in {directory} runs {layout.role} + {layout.flush}; "
                       f"scenario {scenario.name} needs {want.role} + {want.flush}")
    nodes = {n.name for n in layout.nodes}
    missing = sorted({s.node for s in scenario.steps} - nodes)
    if missing:
        raise RunError(f"the cluster in {directory} has no {', '.join(missing)} "
                       f"(scenario {scenario.name} needs: mqcluster up "
                       f"{' '.join(want.mqcluster_args())})")


def _injector(options: RunOptions, cluster_dir: Path | None) -> tuple[FaultInjector, str]:
    if options.target == "local":
        from chaos.local_faults import LocalInjector
        assert cluster_dir is not None
        injector = LocalInjector(cluster_dir)
        return injector, injector.namesrv_addr
    if options.target == "compose":
        return _compose_injector(options)
    raise RunError(f"unknown target {options.target!r} (local or compose)")


def _compose_injector(options: RunOptions) -> tuple[FaultInjector, str]:
    """The project's containers (a disconnect cuts a node off the registration network when
    the project has one, as compose/docker-compose.yml does) and the name servers' published
    addresses; RunError when the project cannot run the scenario."""
    from chaos.compose_target import (
        COMPOSE_SERVICES,
        DEFAULT_PROJECT,
        REGISTRATION_NETWORK,
        compose_project_name,
        published_namesrv_addr,
        shape_problem,
    )
    from chaos.docker_faults import (
        COMPOSE_NETWORK_LABEL,
        COMPOSE_PROJECT_LABEL,
        DockerInjector,
        docker_client,
    )
    project = compose_project_name(options.compose_project or DEFAULT_PROJECT)
    if not project:
        raise RunError(f"--compose-project {options.compose_project!r}: compose keeps only "
                       "a-z, 0-9, _ and - of a project name, and none is left")
    services = {**COMPOSE_SERVICES, **(options.compose_services or {})}
    client = docker_client()
    try:
        problem = shape_problem(client, project, services, options.scenario)
        if problem is not None:
            raise RunError(problem)
        has_registration = bool(client.networks.list(filters={"label": [
            f"{COMPOSE_PROJECT_LABEL}={project}",
            f"{COMPOSE_NETWORK_LABEL}={REGISTRATION_NETWORK}"]}))
        injector = DockerInjector.from_compose(
            project, services, client,
            cut_network=REGISTRATION_NETWORK if has_registration else None)
        namesrv = options.namesrv_addr or published_namesrv_addr(client, project, services)
    except BaseException:
        client.close()
        raise
    return injector, namesrv


def _sample_offsets(observer: ClusterObserver, history: HistoryWriter, groups: list[str],
                    stop: threading.Event) -> None:
    """Every OFFSETS_PROBE_S until `stop`: the groups' committed offsets as each reachable
    master reports them (checker.check_consumer_offsets)."""
    try:
        while not stop.wait(OFFSETS_PROBE_S):
            for record in observer.committed_offsets(groups):
                history.append(RUNNER, INFO, PROBE, {"kind": CONSUMER_OFFSETS, **record})
    finally:
        observer.close()


# -- the run -----------------------------------------------------------------------------------
def run(options: RunOptions) -> dict[str, Any]:
    scenario = options.scenario
    out = options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    cluster_dir = None
    started_cluster = False
    if options.target == "local" and any(s.fault == "disconnect" for s in scenario.steps):
        raise RunError(f"scenario {scenario.name} cuts a node off the network: only the "
                       "compose target can (--target compose)")
    if options.target == "local":
        cluster_dir = (options.cluster_dir or out / CLUSTER_DIR).resolve()
        if _local_cluster_running(cluster_dir):
            check_local_shape(cluster_dir, scenario)
        else:
            start_local_cluster(cluster_dir, scenario)
            started_cluster = True
    client_log = logging.FileHandler(out / CLIENT_LOG_FILE)
    client_log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(client_log)
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    try:
        _run(options, cluster_dir)
    finally:
        root.removeHandler(client_log)
        root.setLevel(level)
        client_log.close()
        if started_cluster and not options.keep_cluster:
            assert cluster_dir is not None
            stop_local_cluster(cluster_dir)
    return finish(out, scenario)


def _run(options: RunOptions, cluster_dir: Path | None) -> None:
    scenario = options.scenario
    duration = options.duration_s or scenario.duration_s
    run_id = time.strftime("%H%M%S") + secrets.token_hex(2)
    config = WorkloadConfig(
        run_id=run_id, producers=options.producers,
        ordered_producers=(scenario.ordered_producers if options.ordered_producers is None
                           else options.ordered_producers),
        rate=scenario.rate if options.rate is None else options.rate,
        consume_ratio=(scenario.consume_ratio if options.consume_ratio is None
                       else options.consume_ratio),
        consumers=options.consumers, max_messages=options.max_messages,
        body_size=options.body_size, send_timeout_s=scenario.send_timeout_s)
    if config.threads == 0:
        raise RunError("no producer thread: give --producers or --ordered-producers")
    try:
        injector, namesrv_addr = _injector(options, cluster_dir)
    except FaultError as e:
        raise RunError(str(e)) from None
    observer = ClusterObserver(namesrv_addr)
    try:
        masters = sum(1 for g in observer.groups() if g.master_addr is not None)
    except AdminError as e:
        observer.close()
        injector.close()
        raise RunError(f"asking the name servers {namesrv_addr}: {e}") from None
    history = HistoryWriter(options.out_dir / HISTORY_FILE)
    stop_sending = threading.Event()
    workload = Workload(config, namesrv_addr, history, stop_sending, masters)
    nemesis = Nemesis(injector, observer, history)
    progress = Progress(options.progress, scenario.name, duration, workload.counters, nemesis)

    def note(process: str, what: str, value: dict[str, Any]) -> None:
        history.append(process, INFO, RUN, {"phase": what, **value})
        if what.endswith("hang"):
            progress.say(f"{process}: {what} ({value})")

    history.append(RUNNER, INFO, RUN, {
        "phase": START, "scenario": scenario.name, "target": options.target,
        "wall_time": time.time(), "duration_s": duration, "namesrv_addr": namesrv_addr,
        "heal_at_end": scenario.heal_at_end, "workload": dataclasses.asdict(config),
        "steps": [dataclasses.asdict(s) for s in scenario.steps]})
    nemesis_thread: threading.Thread | None = None
    stop_sampling = threading.Event()
    sampler: threading.Thread | None = None
    try:
        try:
            observer.prepare_topics(config.topics, config.queues, PREPARE_TIMEOUT_S)
        except (ClusterError, AdminError) as e:
            raise RunError(f"preparing the cluster: {e}") from None
        workload.start_consumers()
        started = time.monotonic()
        balanced = workload.wait_balanced(BALANCE_TIMEOUT_S)
        note(RUNNER, "consumers balanced" if balanced else "consumers not balanced",
             {"took_s": round(time.monotonic() - started, 3), "timeout_s": BALANCE_TIMEOUT_S})
        if scenario.probe_offsets:
            sampler = threading.Thread(
                target=_sample_offsets, name="offsets-probe", daemon=True,
                args=(ClusterObserver(namesrv_addr), history,
                      [config.group(s) for s in ("plain", "ordered")], stop_sampling))
            sampler.start()
        workload.start_producers()
        phase_start = history.now()
        note(RUNNER, "send-phase", {"duration_s": duration})
        nemesis_thread = threading.Thread(
            target=nemesis.run_steps, name="nemesis",
            args=(scenario.steps, phase_start, duration, stop_sending), daemon=True)
        nemesis_thread.start()
        # The send phase lasts its duration, and until the nemesis ran its last step (an
        # await or a restart may take longer) and the scenario's tail after it.
        nemesis_done: float | None = None
        while workload.producing():
            now = history.now()
            if nemesis_done is None and not nemesis_thread.is_alive():
                nemesis_done = now
            if (nemesis_done is not None and now - phase_start >= duration
                    and now - nemesis_done >= scenario.tail_s):
                break
            progress.tick(now - phase_start)
            time.sleep(0.2)
        stop_sending.set()
        nemesis_thread.join()
        if not workload.wait_producers(PRODUCER_JOIN_TIMEOUT_S):
            note(RUNNER, "producer hang", {"waited_s": PRODUCER_JOIN_TIMEOUT_S})
        nemesis.heal_all(everything=scenario.heal_at_end)
        workload.consume_freely()
        note(RUNNER, "drain", {"missing": workload.counters.missing()})
        why = _drain(workload, observer, options,
                     lambda: progress.tick(history.now() - phase_start, draining=True))
        note(RUNNER, "drained", {"missing": workload.counters.missing(), "why": why})
        _final_read(workload, observer, history)
    finally:
        stop_sending.set()
        stop_sampling.set()
        if sampler is not None:
            sampler.join()
        if nemesis_thread is not None:
            nemesis_thread.join()
        nemesis.heal_all(everything=False)  # nothing stays frozen or cut off
        workload.shutdown(note)
        if not options.keep_topics:
            _delete_run_topics(config, observer, note)
        history.append(RUNNER, INFO, RUN, {"phase": END, "nemesis_errors": nemesis.errors})
        history.close()
        progress.done()
        observer.close()
        injector.close()


def _delete_run_topics(config: WorkloadConfig, observer: ClusterObserver,
                       note: Callable[[str, str, dict[str, Any]], None]) -> None:
    """The run's topics, retry and dead-letter topics deleted from the masters, with the
    consumer groups' offsets on them: nothing of the run is left for lag reports."""
    deleted, problems = observer.delete_topics(config.cluster_topics)
    note(RUNNER, "cleanup", {"deleted": deleted, "problems": problems})
    for problem in problems:
        log.warning("the run's topics (%s) are left where %s; delete them with mqadmin "
                    "deleteTopic -t TOPIC -c CLUSTER", ", ".join(config.cluster_topics),
                    problem)


def _drain(workload: Workload, observer: ClusterObserver, options: RunOptions,
           tick: Callable[[], None]) -> str:
    """Waits for the consumers to take what is still to consume; returns why it stopped."""
    deadline = time.monotonic() + options.drain_max_s
    last_count, last_change, last_read = -1, time.monotonic(), 0.0
    while time.monotonic() < deadline:
        if not workload.counters.missing():
            return "everything acknowledged was consumed"
        now = time.monotonic()
        count = workload.counters.consumed
        if count != last_count:
            last_count, last_change = count, now
        quiet = now - last_change
        if quiet >= options.drain_quiet_s:
            return f"nothing consumed for {options.drain_quiet_s:.0f} s"
        if quiet >= DRAIN_CHECK_S and now - last_read >= DRAIN_CHECK_S:
            last_read = now
            found, unanswered = observer.final_read(workload.counters.missing_where())
            if not found and not unanswered:
                return "no broker holds the messages still missing"
        tick()
        time.sleep(0.2)
    return f"drain time over ({options.drain_max_s:.0f} s)"


def _final_read(workload: Workload, observer: ClusterObserver, history: HistoryWriter) -> None:
    """Records which acknowledged messages never consumed are still on a broker."""
    wanted = workload.counters.missing_where()
    found, unanswered = observer.final_read(wanted) if wanted else ([], [])
    for m in found:
        key, seq = identity(m["properties"], m["body"])
        history.append(FINAL_READ, OK, READ, {
            "id": message_id(key, seq), "key": key, "seq": seq, "broker": m["broker"],
            "queue_offset": m["queue_offset"], "addr": m["addr"]})
    history.append(RUNNER, INFO, RUN, {
        "phase": FINAL_READ, "looked_for": sum(map(len, wanted.values())),
        "found": len(found), "queues_unanswered": unanswered})


# -- checking ----------------------------------------------------------------------------------
def evaluate(entries: list[dict[str, Any]], scenario: Scenario | None) -> dict[str, Any]:
    """The checkers' result plus the scenario's verdict (when the history names one)."""
    result = check(entries)
    result["nemesis_errors"] = [err for e in entries if e["f"] == RUN
                                and e["value"].get("phase") == END
                                for err in e["value"].get("nemesis_errors", [])]
    if scenario is not None:
        problems = [f"fault injection: {err}" for err in result["nemesis_errors"]]
        problems += scenario.expect(result)
        result["scenario"] = {"name": scenario.name, "description": scenario.description,
                              "problems": problems, "passed": not problems}
    return result


def finish(out: Path, scenario: Scenario | None) -> dict[str, Any]:
    """Checks the run's history and writes result.json, summary.txt and chart.png."""
    entries = read_history(out / HISTORY_FILE)
    result = evaluate(entries, scenario)
    (out / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
    (out / SUMMARY_FILE).write_text(report.summary(result) + "\n")
    report.chart(entries, result, out / CHART_FILE)
    return result
