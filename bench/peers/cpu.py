"""CPU time spent by the servers (every descendant process of this one) and by this client
process, from /proc: on a shared machine the CPU each system spends per message holds where
its msgs/s do not."""

from __future__ import annotations

import os
from pathlib import Path

TICKS_S = os.sysconf("SC_CLK_TCK")


def _children_and_cpu() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds) of every process that can be read."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS_S)
    return out


def servers_cpu_s() -> float:
    """CPU seconds of the live descendants of this process (the servers it started)."""
    procs = _children_and_cpu()
    family = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _) in procs.items():
            if parent in family and pid not in family:
                family.add(pid)
                grew = True
    family.discard(os.getpid())
    return sum(procs[pid][1] for pid in family)


def client_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class CpuMeter:
    """`start()` then `per_message(n)`: µs of server and client CPU per message since."""

    def start(self) -> None:
        self._server, self._client = servers_cpu_s(), client_cpu_s()

    def per_message(self, n: int) -> dict[str, float]:
        server, client = servers_cpu_s() - self._server, client_cpu_s() - self._client
        return {"server_us": round(server / n * 1e6, 1), "client_us": round(client / n * 1e6, 1)}
