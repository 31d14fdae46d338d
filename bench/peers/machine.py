"""What the figures were measured on: CPU, cores, memory, the disk under the work directory."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _disk(path: Path) -> dict[str, Any]:
    """The filesystem and block device that hold `path`."""
    try:
        out = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE,TARGET", "-T", str(path)],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        source, fstype, target = out.split()[:3]
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"path": str(path)}
    disk: dict[str, Any] = {"path": str(path), "device": source, "fstype": fstype,
                            "mount": target}
    block = Path("/sys/class/block") / Path(source).name
    for key, rel in (("rotational", "queue/rotational"), ("model", "device/model")):
        for base in (block, block.resolve().parent):
            try:
                value = (base / rel).read_text().strip()
            except OSError:
                continue
            disk[key] = (value == "1") if key == "rotational" else value
            break
    return disk


def describe(work: Path) -> dict[str, Any]:
    return {"cpu_model": _cpu_model(), "cores": os.cpu_count() or 0,
            "memory_gib": _memory_gib(), "disk": _disk(work),
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg": list(os.getloadavg())}
