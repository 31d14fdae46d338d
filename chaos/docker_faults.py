"""Faults on containers through the Docker API (the docker SDK): kill, stop, start, pause,
unpause, network disconnect / connect. A node name maps to a container (by name or id), or
to a compose service of a compose project (found by the labels docker-compose puts on its
containers)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from chaos.constants import POLL_S, RESTART_TIMEOUT_S
from chaos.faults import Detail, FaultError, FaultInjector

STOP_TIMEOUT_S = 30
STATE_WAIT_S = 15.0
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
COMPOSE_NETWORK_LABEL = "com.docker.compose.network"


def compose_containers(client: Any, project: str, service: str) -> list[Any]:
    """The containers of one service of a compose project (found by compose's labels)."""
    return list(client.containers.list(all=True, filters={"label": [
        f"{COMPOSE_PROJECT_LABEL}={project}", f"{COMPOSE_SERVICE_LABEL}={service}"]}))


def docker_client() -> Any:
    """A client of the local Docker engine (DOCKER_HOST etc. as the docker CLI reads
    them); FaultError when the SDK is missing or no engine answers."""
    try:
        import docker  # the `docker` / `chaos` extra
    except ImportError:
        raise FaultError("the docker SDK is not installed: pip install "
                         "'pyrocketmq-cluster[chaos]'") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001 - docker raises several kinds here
        raise FaultError(f"no Docker engine answers: {e}") from None
    return client


@contextlib.contextmanager
def _api(node: str, what: str) -> Iterator[None]:
    """Docker API errors as FaultError, one line naming the node."""
    import docker.errors
    try:
        yield
    except docker.errors.NotFound as e:
        raise FaultError(f"{what} {node}: gone ({e.explanation})") from None
    except docker.errors.APIError as e:
        raise FaultError(f"{what} {node}: {e.explanation or e}") from None


class DockerInjector(FaultInjector):
    target = "compose"

    def __init__(self, containers: Mapping[str, str], client: Any | None = None,
                 cut_networks: Sequence[str] | None = None) -> None:
        """`containers`: node name -> container name or id. `cut_networks`: the networks
        disconnect cuts a node off (None: every network it is on)."""
        self.client = client if client is not None else docker_client()
        self.containers = dict(containers)
        self.cut_networks = list(cut_networks) if cut_networks is not None else None
        # node -> the networks it was cut from, with its aliases there (for reconnect)
        self._cut: dict[str, list[tuple[str, list[str]]]] = {}

    @classmethod
    def from_compose(cls, project: str, services: Mapping[str, str],
                     client: Any | None = None, cut_network: str | None = None
                     ) -> DockerInjector:
        """`services`: node name -> compose service; each service must have exactly one
        container in the project (scale 1). `cut_network`: the compose network (its name
        in the compose file) disconnect cuts; None: every network."""
        client = client if client is not None else docker_client()
        containers = {}
        for node, service in services.items():
            found = compose_containers(client, project, service)
            if len(found) != 1:
                raise FaultError(f"compose project {project}: service {service} (node {node}) "
                                 f"has {len(found)} containers, expected 1")
            containers[node] = found[0].id
        cut = None
        if cut_network is not None:
            networks = client.networks.list(filters={"label": [
                f"{COMPOSE_PROJECT_LABEL}={project}", f"{COMPOSE_NETWORK_LABEL}={cut_network}"]})
            if len(networks) != 1:
                raise FaultError(f"compose project {project} has no network {cut_network}")
            cut = [networks[0].name]
        return cls(containers, client, cut)

    def nodes(self) -> list[str]:
        return list(self.containers)

    def _container(self, node: str) -> Any:
        self.check_node(node)
        import docker.errors
        try:
            return self.client.containers.get(self.containers[node])
        except docker.errors.NotFound:
            raise FaultError(f"container {self.containers[node]} of {node} is gone") from None
        except docker.errors.APIError as e:
            raise FaultError(f"container {self.containers[node]} of {node}: {e}") from None

    def _wait_state(self, container: Any, node: str, done: Callable[[dict[str, Any]], bool],
                    what: str, timeout: float = STATE_WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            container.reload()
            if done(container.attrs["State"]):
                return
            if time.monotonic() > deadline:
                raise FaultError(f"{node} ({container.name}) not {what} after {timeout:.0f} s: "
                                 f"state {container.attrs['State'].get('Status')}")
            time.sleep(POLL_S / 4)

    def _detail(self, container: Any, started: float, **extra: Any) -> Detail:
        return {"container": container.name, "id": container.short_id,
                "took_s": round(time.monotonic() - started, 3), **extra}

    def kill(self, node: str) -> Detail:
        c, started = self._container(node), time.monotonic()
        with _api(node, "kill"):
            c.kill(signal="SIGKILL")
        self._wait_state(c, node, lambda s: not s["Running"], "dead")
        return self._detail(c, started, signal="SIGKILL")

    def stop(self, node: str) -> Detail:
        c, started = self._container(node), time.monotonic()
        with _api(node, "stop"):
            c.stop(timeout=STOP_TIMEOUT_S)
        self._wait_state(c, node, lambda s: not s["Running"], "stopped")
        return self._detail(c, started, exit_code=c.attrs["State"].get("ExitCode"))

    def start(self, node: str) -> Detail:
        """Starts the container and waits until it runs and, when it has a health check,
        until it is healthy (a broker: registered with every name server)."""
        c, started = self._container(node), time.monotonic()
        if c.attrs["State"]["Running"]:
            raise FaultError(f"{node} ({c.name}) is still running")
        with _api(node, "start"):
            c.start()

        def up(state: dict[str, Any]) -> bool:
            if not state["Running"]:
                return False
            health = state.get("Health")
            return health is None or health.get("Status") == "healthy"

        self._wait_state(c, node, up, "running and healthy", RESTART_TIMEOUT_S)
        return self._detail(c, started)

    def pause(self, node: str) -> Detail:
        c, started = self._container(node), time.monotonic()
        with _api(node, "pause"):
            c.pause()
        self._wait_state(c, node, lambda s: s["Paused"], "paused")
        return self._detail(c, started)

    def resume(self, node: str) -> Detail:
        c, started = self._container(node), time.monotonic()
        with _api(node, "unpause"):
            c.unpause()
        self._wait_state(c, node, lambda s: not s["Paused"], "unpaused")
        return self._detail(c, started)

    def disconnect(self, node: str) -> Detail:
        """Cuts the container off every network it is on, or off those of `cut_networks`
        (keeping each one's aliases, so that reconnect restores the names other
        containers dial)."""
        c, started = self._container(node), time.monotonic()
        networks = c.attrs["NetworkSettings"]["Networks"] or {}
        if self.cut_networks is not None:
            networks = {n: e for n, e in networks.items() if n in self.cut_networks}
        if not networks:
            raise FaultError(f"{node} ({c.name}) is on no network to cut"
                             + (f" (of {', '.join(self.cut_networks)})"
                                if self.cut_networks is not None else ""))
        cut = []
        for name, endpoint in networks.items():
            aliases = [a for a in (endpoint.get("Aliases") or []) if a != c.id[:12]]
            with _api(node, "disconnect"):
                self.client.networks.get(name).disconnect(c)
            cut.append((name, aliases))
        self._cut[node] = cut
        c.reload()
        left = set(c.attrs["NetworkSettings"]["Networks"] or {}) & {n for n, _ in cut}
        if left:
            raise FaultError(f"{node} ({c.name}) is still on {', '.join(sorted(left))}")
        return self._detail(c, started, networks=[n for n, _ in cut])

    def reconnect(self, node: str) -> Detail:
        c, started = self._container(node), time.monotonic()
        cut = self._cut.pop(node, None)
        if cut is None:
            raise FaultError(f"{node} was not disconnected by this injector")
        for name, aliases in cut:
            with _api(node, "connect"):
                self.client.networks.get(name).connect(c, aliases=aliases or None)
        return self._detail(c, started, networks=[n for n, _ in cut])

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
