"""The compose cluster of compose/ under test: images built once by compose/build-images.sh,
a project with its own name and free ports brought up with whichever compose tool is
installed, health watched and everything of the project removed through the docker SDK.

Step times go to TIMINGS; conftest.py prints them at the end of the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from tests.support.ports import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO_ROOT / "compose"
BASE_FILE = COMPOSE_DIR / "docker-compose.yml"
ASYNC_FILE = COMPOSE_DIR / "docker-compose.async.yml"
IN_NETWORK_FILE = COMPOSE_DIR / "docker-compose.in-network.yml"
BUILD_TIMEOUT_S = 900.0  # a fresh machine: debootstrap, wheels, image
COMPOSE_TIMEOUT_S = 180.0
HEALTHY_TIMEOUT_S = 150.0
HEALTHCHECK_INTERVAL = "2s"  # the file's default is 10 s; tests want health sooner
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"

BROKERS = ("broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1")
SERVICES = ("namesrv1", "namesrv2", *BROKERS)

TIMINGS: list[tuple[str, float]] = []


@contextlib.contextmanager
def timed(step: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        TIMINGS.append((step, time.monotonic() - started))


def compose_command() -> list[str] | None:
    """`docker compose` when the plugin is there, else `docker-compose`, else None."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run([*command, "version"], capture_output=True, timeout=60)
        if done.returncode == 0:
            return command
    return None


@functools.cache
def build_images(python: str) -> str:
    """compose/build-images.sh; returns the project image's tag (its last line). Once per
    test session: the compose and chaos tests share the image."""
    done = subprocess.run([str(COMPOSE_DIR / "build-images.sh"), "--quiet"],
                          env={**os.environ, "PYTHON": python}, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"build-images.sh failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


PORT_VARIABLES = ("MQ_NAMESRV1_PORT", "MQ_NAMESRV2_PORT",
                  *(f"MQ_BROKER_{b[7].upper()}{b[9]}{kind}_PORT"
                    for b in BROKERS for kind in ("", "_SEND")))


@dataclasses.dataclass
class ComposeCluster:
    """One compose project: `up`, `wait_healthy`, `down` (removes all of it)."""

    command: list[str]
    image: str
    client: docker.DockerClient
    project: str = dataclasses.field(
        default_factory=lambda: f"mqtest{os.getpid()}{uuid.uuid4().hex[:6]}")
    ports: dict[str, int] = dataclasses.field(default_factory=dict)
    files: list[Path] = dataclasses.field(default_factory=lambda: [BASE_FILE])
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = dict(zip(PORT_VARIABLES, free_ports(len(PORT_VARIABLES)),
                                  strict=True))

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "MQ_IMAGE": self.image,
                "MQ_HEALTHCHECK_INTERVAL": HEALTHCHECK_INTERVAL,
                **{k: str(v) for k, v in self.ports.items()}, **self.extra_env}

    @property
    def namesrv_addr(self) -> str:
        return (f"127.0.0.1:{self.ports['MQ_NAMESRV1_PORT']};"
                f"127.0.0.1:{self.ports['MQ_NAMESRV2_PORT']}")

    def port(self, broker: str, send: bool = False) -> int:
        """The published (and listen) port of `broker` (broker-a-0, ...)."""
        group, broker_id = broker[7].upper(), broker[9]
        return self.ports[f"MQ_BROKER_{group}{broker_id}{'_SEND' if send else ''}_PORT"]

    def compose(self, *args: str, files: Sequence[Path] | None = None,
                timeout: float = COMPOSE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        file_args = [a for f in (files or self.files) for a in ("-f", str(f))]
        done = subprocess.run([*self.command, *file_args, "-p", self.project, *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def containers(self) -> list[Container]:
        return self.client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})

    def container(self, service: str) -> Container:
        found = self.client.containers.list(all=True, filters={"label": [
            f"{PROJECT_LABEL}={self.project}", f"{SERVICE_LABEL}={service}"]})
        assert len(found) == 1, f"{service}: {len(found)} containers"
        return found[0]

    def wait_healthy(self, services: Sequence[str] = SERVICES,
                     timeout: float = HEALTHY_TIMEOUT_S) -> None:
        """Until every service's container is healthy; AssertionError with the logs of
        those that are not (or that exited) otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            states = {}
            for service in services:
                c = self.container(service)
                c.reload()
                state: dict[str, Any] = c.attrs["State"]
                states[service] = (state.get("Health") or {}).get("Status") or state["Status"]
            bad = {s: st for s, st in states.items() if st in ("exited", "dead", "unhealthy")}
            if not bad and all(st == "healthy" for st in states.values()):
                return
            if bad or time.monotonic() > deadline:
                waiting = list(bad) or [s for s, st in states.items() if st != "healthy"]
                raise AssertionError(f"not healthy: {states}\n{self.logs(waiting)}")
            time.sleep(0.5)

    def logs(self, services: Sequence[str], lines: int = 30) -> str:
        parts = []
        for service in services:
            with contextlib.suppress(docker.errors.DockerException, AssertionError):
                c = self.container(service)
                health = (c.attrs["State"].get("Health") or {}).get("Log") or []
                parts.append(f"--- {service} ({c.status}); last health check: "
                             f"{health[-1]['Output'].strip() if health else '-'}\n"
                             f"{c.logs(tail=lines).decode(errors='replace')}")
        return "\n".join(parts)

    def exec_python(self, service: str, code: str) -> str:
        result = self.container(service).exec_run(["python", "-c", code])
        output: bytes = result.output
        assert result.exit_code == 0, output.decode(errors="replace")
        return output.decode().strip()

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def down(self) -> None:
        """`down -v`, then whatever of the project is left (containers, networks, volumes)
        removed by its label: nothing of another project is touched."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.compose("--profile", "analytics", "down", "-v", "--remove-orphans",
                         "--timeout", "20")
        label = {"label": f"{PROJECT_LABEL}={self.project}"}
        for c in self.containers():
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True, v=True)
        for n in self.client.networks.list(filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                n.remove()
        for v in self.client.volumes.list(filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                v.remove(force=True)

    def leftovers(self) -> list[str]:
        label = {"label": f"{PROJECT_LABEL}={self.project}"}
        return ([f"container {c.name}" for c in self.containers()]
                + [f"network {n.name}" for n in self.client.networks.list(filters=label)]
                + [f"volume {v.name}" for v in self.client.volumes.list(filters=label)])
