"""Fixtures of the compose tests: the docker SDK client, the compose tool there is, and the
cluster's image built once per test session (compose/build-images.sh reuses an image whose
sources did not change). Skipped, with the reason, only when Docker or a compose tool is
missing."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from tests.compose.cluster import TIMINGS, build_images, compose_command, timed


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as e:
        pytest.skip(f"no Docker daemon: {e}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def compose_tool(docker_client: docker.DockerClient) -> list[str]:
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    return command


@pytest.fixture(scope="session")
def compose_image(docker_client: docker.DockerClient) -> str:
    with timed("build-images.sh (base image, wheelhouse, project image)"):
        return build_images(sys.executable)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("compose cluster timings")
        for step, seconds in TIMINGS:
            terminalreporter.write_line(f"{seconds:7.1f} s  {step}")
