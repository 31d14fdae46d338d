"""Fault injection: what a target must offer to break its nodes, and the faults in terms of
it. A node is named as `mqcluster` names it: `namesrv-0`, `broker-a-0` (group broker-a,
brokerId 0 = its master), `broker-a-1` (its first slave); each injector maps these names to
what it acts on (a PID of mqcluster's state file, a Docker container).

A fault has a start and a heal:

    kill        SIGKILL / docker kill          heal: start it again (restart)
    stop        SIGTERM / docker stop          heal: start it again
    pause       SIGSTOP / docker pause         heal: SIGCONT / docker unpause
    disconnect  docker network disconnect      heal: docker network connect (compose only)
"""

from __future__ import annotations

import abc
from typing import Any

Detail = dict[str, Any]


class FaultError(Exception):
    """A fault could not be started or healed; the message is one line for a person."""


class FaultNotSupported(FaultError):
    """This target cannot inject that fault (e.g. a network cut on local processes)."""


class FaultInjector(abc.ABC):
    """Breaks and mends nodes of one cluster. Every method waits until the change took
    effect (the process is gone, stopped, running again...) within a bounded time and returns
    what it did (PIDs, container ids) for the history."""

    target: str = "?"

    @abc.abstractmethod
    def nodes(self) -> list[str]:
        """The node names this injector knows."""

    @abc.abstractmethod
    def kill(self, node: str) -> Detail:
        """Ends the node at once (no shutdown work: SIGKILL)."""

    @abc.abstractmethod
    def stop(self, node: str) -> Detail:
        """Ends the node cleanly (SIGTERM, waiting for it to exit)."""

    @abc.abstractmethod
    def start(self, node: str) -> Detail:
        """Starts a killed or stopped node again, as the target starts it, and waits until
        it booted."""

    @abc.abstractmethod
    def pause(self, node: str) -> Detail:
        """Freezes the node (it keeps its sockets, answers nothing)."""

    @abc.abstractmethod
    def resume(self, node: str) -> Detail:
        """Unfreezes a paused node."""

    def disconnect(self, node: str) -> Detail:
        """Cuts the node off the cluster's network."""
        raise FaultNotSupported(f"{self.target} targets cannot cut a node off the network")

    def reconnect(self, node: str) -> Detail:
        raise FaultNotSupported(f"{self.target} targets cannot cut a node off the network")

    def close(self) -> None:  # noqa: B027 - most injectors hold nothing
        """Releases what the injector holds (API clients); nodes are left as they are."""

    def check_node(self, node: str) -> None:
        if node not in self.nodes():
            raise FaultError(f"{self.target} target has no node {node!r} (nodes: "
                             f"{', '.join(self.nodes()) or 'none'})")


# fault -> (the injector method starting it, the one healing it)
FAULTS: dict[str, tuple[str, str]] = {
    "kill": ("kill", "start"),
    "stop": ("stop", "start"),
    "pause": ("pause", "resume"),
    "disconnect": ("disconnect", "reconnect"),
}
# Faults that leave a node unable to do anything until healed: always healed at the end of
# a run, so that no frozen or cut-off node outlives it.
ALWAYS_HEALED = frozenset({"pause", "disconnect"})


def start_fault(injector: FaultInjector, fault: str, node: str) -> Detail:
    if fault not in FAULTS:
        raise FaultError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    injector.check_node(node)
    return getattr(injector, FAULTS[fault][0])(node)


def heal_fault(injector: FaultInjector, fault: str, node: str) -> Detail:
    if fault not in FAULTS:
        raise FaultError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    return getattr(injector, FAULTS[fault][1])(node)
