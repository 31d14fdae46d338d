"""Faults on a local `mqcluster`: signals to the PIDs of its state file
(DIR/mqcluster.state.json), each checked to still be the process mqcluster started; a node
is started again the way `mqcluster up` starts it (local_cluster.spawn), and its new PID goes
into the state file so that `mqcluster down` stops it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from chaos.constants import ADMIN_TIMEOUT_S, POLL_S, RESTART_TIMEOUT_S
from chaos.faults import Detail, FaultError, FaultInjector
from common.constants import BROKER_BOOT_SUCCESS_PREFIX, NAMESRV_BOOT_SUCCESS_MESSAGE
from mqclient.admin import AdminError, MQAdmin
from mqclient.cli.local_cluster import (
    BROKER,
    Layout,
    LocalClusterError,
    Node,
    ProcessRecord,
    is_alive,
    spawn,
)
from mqclient.cli.mqcluster import load_state, save_state

STOP_TIMEOUT_S = 30.0
SIGNAL_WAIT_S = 10.0


class LocalInjector(FaultInjector):
    target = "local"

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self._state()  # fails now, with a clear message, when no cluster runs there

    def _state(self) -> tuple[Layout, list[ProcessRecord]]:
        try:
            state = load_state(self.directory)
        except LocalClusterError as e:
            raise FaultError(str(e)) from None
        if state is None:
            raise FaultError(f"no mqcluster runs in {self.directory} (no state file)")
        return state

    def nodes(self) -> list[str]:
        return [n.name for n in self._state()[0].nodes]

    @property
    def namesrv_addr(self) -> str:
        return self._state()[0].namesrv_addr

    def _record(self, node: str) -> ProcessRecord:
        self.check_node(node)
        for r in self._state()[1]:
            if r.name == node:
                return r
        raise FaultError(f"{node} is not in {self.directory}'s state file")

    def _alive_record(self, node: str) -> ProcessRecord:
        r = self._record(node)
        if not is_alive(r):
            raise FaultError(f"{node} (pid {r.pid}) is not running")
        return r

    # -- signals -------------------------------------------------------------------------------
    def _signal(self, node: str, signum: signal.Signals, done: Callable[[ProcessRecord], bool],
                timeout: float) -> Detail:
        r = self._alive_record(node)
        started = time.monotonic()
        os.kill(r.pid, signum)
        _wait(lambda: done(r), timeout, f"{node} (pid {r.pid}) after {signum.name}")
        return {"pid": r.pid, "signal": signum.name,
                "took_s": round(time.monotonic() - started, 3)}

    def kill(self, node: str) -> Detail:
        return self._signal(node, signal.SIGKILL, lambda r: not is_alive(r), SIGNAL_WAIT_S)

    def stop(self, node: str) -> Detail:
        return self._signal(node, signal.SIGTERM, lambda r: not is_alive(r), STOP_TIMEOUT_S)

    def pause(self, node: str) -> Detail:
        return self._signal(node, signal.SIGSTOP, lambda r: _state_letter(r.pid) == "T",
                            SIGNAL_WAIT_S)

    def resume(self, node: str) -> Detail:
        return self._signal(node, signal.SIGCONT, lambda r: _state_letter(r.pid) != "T",
                            SIGNAL_WAIT_S)

    # -- start ---------------------------------------------------------------------------------
    def start(self, node: str) -> Detail:
        layout, records = self._state()
        old = self._record(node)
        if is_alive(old):
            raise FaultError(f"{node} (pid {old.pid}) is still running")
        spec = next(n for n in layout.nodes if n.name == node)
        started = time.monotonic()
        record, log_offset = spawn(spec, self.directory)
        save_state(self.directory, layout,
                   [record if r.name == node else r for r in records])
        deadline = started + RESTART_TIMEOUT_S
        self._wait_booted(record, log_offset, spec, deadline)
        if spec.kind == BROKER:
            self._wait_registered(layout, spec, deadline)
        return {"pid": record.pid, "took_s": round(time.monotonic() - started, 3)}

    def _wait_booted(self, record: ProcessRecord, offset: int, spec: Node,
                     deadline: float) -> None:
        boot_line = (BROKER_BOOT_SUCCESS_PREFIX if spec.kind == BROKER
                     else NAMESRV_BOOT_SUCCESS_MESSAGE)
        log_path = self.directory / record.log

        def booted() -> bool:
            with log_path.open("rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", errors="replace")
            if any(line.startswith(boot_line) for line in text.splitlines()):
                return True
            if not is_alive(record):
                raise FaultError(f"{spec.name} exited while starting again; see {log_path}")
            return False

        _wait(booted, deadline - time.monotonic(), f"{spec.name} to boot (log {log_path})")

    @staticmethod
    def _wait_registered(layout: Layout, spec: Node, deadline: float) -> None:
        """Until every name server lists the broker at its address."""
        want = (spec.broker_name, spec.broker_id, spec.address)
        for addr in layout.namesrv_addr.split(";"):
            with MQAdmin(addr, timeout=ADMIN_TIMEOUT_S) as admin:
                def listed(admin: MQAdmin = admin) -> bool:
                    try:
                        info = admin.cluster_info()
                    except AdminError:
                        return False
                    return want in {(g.broker_name, i, a) for g in info.groups.values()
                                    for i, a in g.addrs.items()}
                _wait(listed, deadline - time.monotonic(),
                      f"{spec.name} to register with name server {addr}")


def _state_letter(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return text[text.rindex(")") + 2:].split()[0]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + max(0.0, timeout)
    while not condition():
        if time.monotonic() > deadline:
            raise FaultError(f"timed out waiting for {what}")
        time.sleep(POLL_S / 4)
