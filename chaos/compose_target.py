"""The compose target: what mqchaos learns from a running compose project of compose/ through
the Docker API (the name servers' published addresses, the brokers' roles) before it breaks
the project's containers (docker_faults.DockerInjector)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chaos.docker_faults import compose_containers
from chaos.faults import FaultError
from chaos.scenarios import Scenario

# Node (as mqcluster names it) -> service of compose/docker-compose.yml.
COMPOSE_SERVICES = {"namesrv-0": "namesrv1", "namesrv-1": "namesrv2",
                    "broker-a-0": "broker-a-0", "broker-a-1": "broker-a-1",
                    "broker-b-0": "broker-b-0", "broker-b-1": "broker-b-1"}
DEFAULT_PROJECT = "pyrocketmq"  # compose/compose.sh's default project name
# The network brokers register with the name servers over (docker-compose.yml): a node's
# `disconnect` cuts it off this one only.
REGISTRATION_NETWORK = "registration"
NAMESRV_PORT = "9876/tcp"


def compose_project_name(name: str) -> str:
    """The project name as compose labels the containers: `-p trialA` runs project `triala`
    (docker-compose 1.x and compose v2 keep only a-z, 0-9, `_` and `-` of the lower-cased
    name)."""
    return re.sub(r"[^-_a-z0-9]", "", name.lower())


def _container(client: Any, project: str, service: str) -> Any:
    found = compose_containers(client, project, service)
    if len(found) != 1:
        raise FaultError(f"compose project {project}: service {service} has {len(found)} "
                         "containers, expected 1 (is the project up? compose/compose.sh -p "
                         f"{project} up -d)")
    return found[0]


def published_namesrv_addr(client: Any, project: str, services: Mapping[str, str]) -> str:
    """`HOST:PORT;HOST:PORT` of the name servers' published ports, as the host reaches
    them."""
    addrs = []
    for node in sorted(n for n in services if n.startswith("namesrv-")):
        c = _container(client, project, services[node])
        bindings = (c.attrs["NetworkSettings"].get("Ports") or {}).get(NAMESRV_PORT) or []
        if not bindings:
            bindings = (c.attrs["HostConfig"].get("PortBindings") or {}).get(NAMESRV_PORT) or []
        if not bindings:
            raise FaultError(f"{c.name} publishes no port for {NAMESRV_PORT}")
        host = bindings[0].get("HostIp") or "127.0.0.1"
        addrs.append(f"{'127.0.0.1' if host == '0.0.0.0' else host}:{bindings[0]['HostPort']}")
    if not addrs:
        raise FaultError("no name server among the nodes (--service namesrv-0=SERVICE)")
    return ";".join(addrs)


def _env(container: Any) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in container.attrs["Config"]["Env"] or [])


def shape_problem(client: Any, project: str, services: Mapping[str, str],
                  scenario: Scenario) -> str | None:
    """Why the project cannot run the scenario (the masters' role and flush, read from the
    containers' environment), or None."""
    want = scenario.shape
    for node, service in sorted(services.items()):
        if not (node.startswith("broker-") and node.endswith("-0")):
            continue
        env = _env(_container(client, project, service))
        role, flush = env.get("BROKER_ROLE"), env.get("FLUSH_DISK_TYPE")
        if (role, flush) != (want.role, want.flush):
            hint = " (compose/compose.sh --async)" if want.role == "ASYNC_MASTER" else ""
            return (f"{node} of compose project {project} runs {role} + {flush}; scenario "
                    f"{scenario.name} needs {want.role} + {want.flush}{hint}")
    return None
