"""The Docker fault injector against a real throwaway container: kill, stop, start, pause,
unpause, network disconnect / connect, and finding containers by compose labels.

No image can be pulled here, so the tests build their own: a static binary (tiny_server.c,
answering "ok" on TCP port 7000) in a FROM-scratch image. Skipped, with the reason, when
there is no Docker engine or no C compiler able to link statically."""

from __future__ import annotations

import io
import secrets
import shutil
import socket
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.docker_faults import (
    COMPOSE_PROJECT_LABEL,
    COMPOSE_SERVICE_LABEL,
    DockerInjector,
    docker_client,
)
from chaos.faults import FaultError, heal_fault, start_fault

pytestmark = pytest.mark.docker  # containers of its own

IMAGE = "mqchaos-test-tiny:latest"
PORT = 7000
NODE = "broker-a-0"
SERVICE = "broker-a-master"


@pytest.fixture(scope="session")
def docker() -> Iterator[Any]:
    try:
        client = docker_client()
    except FaultError as e:
        pytest.skip(f"no Docker: {e}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def tiny_image(docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Built once per session; removed at the end."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the test container's binary")
    work = tmp_path_factory.mktemp("tiny")
    source = Path(__file__).with_name("tiny_server.c")
    built = subprocess.run([cc, "-static", "-O2", "-o", str(work / "tiny"), str(source)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"cannot link a static binary: {built.stderr.strip()[:200]}")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        tar.add(work / "tiny", arcname="tiny")
        dockerfile = b'FROM scratch\nCOPY tiny /tiny\nENTRYPOINT ["/tiny"]\n'
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    image, _ = docker.images.build(fileobj=context, custom_context=True, tag=IMAGE, rm=True)
    yield IMAGE
    docker.images.remove(image.id, force=True)


@pytest.fixture
def container(docker: Any, tiny_image: str) -> Iterator[Any]:
    """A container of the tiny image on its own network, labelled as a compose service."""
    suffix = secrets.token_hex(3)
    network = docker.networks.create(f"mqchaos-test-{suffix}", driver="bridge")
    project = f"mqchaostest{suffix}"
    c = None
    try:
        c = docker.containers.create(
            tiny_image, name=f"mqchaos-test-{suffix}", detach=True, network=network.name,
            labels={COMPOSE_PROJECT_LABEL: project, COMPOSE_SERVICE_LABEL: SERVICE})
        network.disconnect(c)  # on this network only, with an alias as compose gives one
        network.connect(c, aliases=["tiny-node"])
        c.start()
        c.project = project  # for the tests
        c.network_name = network.name
        assert wait_answers(c), "the test container does not answer"
        yield c
    finally:
        if c is not None:
            c.remove(force=True)
        network.remove()


def ip_of(c: Any) -> str:
    c.reload()
    networks = c.attrs["NetworkSettings"]["Networks"]
    return next(iter(networks.values()))["IPAddress"] if networks else ""


def answers(ip: str, timeout: float = 1.0) -> bool:
    """The tiny server answered "ok" within the timeout."""
    if not ip:
        return False
    try:
        with socket.create_connection((ip, PORT), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(3) == b"ok\n"
    except OSError:
        return False


def wait_answers(c: Any, tries: int = 50) -> bool:
    return any(answers(ip_of(c), 0.2) for _ in range(tries))


def test_kill_and_start(docker: Any, container: Any) -> None:
    injector = DockerInjector({NODE: container.name}, docker)
    detail = start_fault(injector, "kill", NODE)
    assert detail["signal"] == "SIGKILL" and detail["container"] == container.name
    container.reload()
    assert not container.attrs["State"]["Running"]
    assert container.attrs["State"]["ExitCode"] == 137
    with pytest.raises(FaultError, match="kill broker-a-0: .*not running"):
        injector.kill(NODE)  # docker refuses to kill a stopped container
    heal_fault(injector, "kill", NODE)
    container.reload()
    assert container.attrs["State"]["Running"] and wait_answers(container)
    with pytest.raises(FaultError, match="still running"):
        injector.start(NODE)


def test_stop_is_clean_and_start_brings_it_back(docker: Any, container: Any) -> None:
    injector = DockerInjector({NODE: container.id}, docker)
    detail = injector.stop(NODE)
    assert detail["exit_code"] == 0  # SIGTERM, handled
    injector.start(NODE)
    assert wait_answers(container)


def test_pause_freezes_and_resume_thaws(docker: Any, container: Any) -> None:
    injector = DockerInjector({NODE: container.name}, docker)
    start_fault(injector, "pause", NODE)
    container.reload()
    assert container.attrs["State"]["Paused"]
    assert not answers(ip_of(container), 0.5)  # the kernel accepts, the process is frozen
    heal_fault(injector, "pause", NODE)
    assert wait_answers(container)


def test_disconnect_cuts_it_off_and_reconnect_restores_its_alias(
        docker: Any, container: Any) -> None:
    injector = DockerInjector({NODE: container.name}, docker)
    old_ip = ip_of(container)
    detail = start_fault(injector, "disconnect", NODE)
    assert detail["networks"] == [container.network_name]
    assert ip_of(container) == "" and not answers(old_ip, 0.5)
    container.reload()
    assert container.attrs["State"]["Running"]
    heal_fault(injector, "disconnect", NODE)
    assert wait_answers(container)
    aliases = container.attrs["NetworkSettings"]["Networks"][container.network_name]["Aliases"]
    assert "tiny-node" in aliases
    with pytest.raises(FaultError, match="was not disconnected"):
        injector.reconnect(NODE)


def test_disconnect_from_one_compose_network_keeps_the_others(
        docker: Any, container: Any) -> None:
    """As compose/docker-compose.yml's registration network: the node is cut off that
    network only and still answers on its first one."""
    from chaos.docker_faults import COMPOSE_NETWORK_LABEL
    second = docker.networks.create(
        f"{container.project}_registration", driver="bridge", internal=True,
        labels={COMPOSE_PROJECT_LABEL: container.project,
                COMPOSE_NETWORK_LABEL: "registration"})
    try:
        second.connect(container, aliases=["tiny-reg"])
        injector = DockerInjector.from_compose(container.project, {NODE: SERVICE}, docker,
                                               cut_network="registration")
        assert injector.cut_networks == [second.name]
        detail = start_fault(injector, "disconnect", NODE)
        assert detail["networks"] == [second.name]
        container.reload()
        assert set(container.attrs["NetworkSettings"]["Networks"]) == {container.network_name}
        assert answers(ip_of(container))
        heal_fault(injector, "disconnect", NODE)
        container.reload()
        networks = container.attrs["NetworkSettings"]["Networks"]
        assert set(networks) == {container.network_name, second.name}
        assert "tiny-reg" in networks[second.name]["Aliases"]
        with pytest.raises(FaultError, match="has no network nothing"):
            DockerInjector.from_compose(container.project, {NODE: SERVICE}, docker,
                                        cut_network="nothing")
        second.disconnect(container)
        with pytest.raises(FaultError, match="no network to cut"):
            injector.disconnect(NODE)
    finally:
        second.remove()


def test_containers_found_by_compose_labels(docker: Any, container: Any) -> None:
    injector = DockerInjector.from_compose(container.project, {NODE: SERVICE}, docker)
    assert injector.nodes() == [NODE] and injector.containers[NODE] == container.id
    with pytest.raises(FaultError, match="has 0 containers"):
        DockerInjector.from_compose(container.project, {"broker-b-0": "nothing"}, docker)


def test_unknown_node_and_fault_are_refused(docker: Any) -> None:
    injector = DockerInjector({NODE: "mqchaos-test-none"}, docker)
    with pytest.raises(FaultError, match="no node 'broker-z-0'"):
        injector.kill("broker-z-0")
    with pytest.raises(FaultError, match="unknown fault"):
        start_fault(injector, "explode", NODE)
    with pytest.raises(FaultError, match="is gone"):
        injector.pause(NODE)
