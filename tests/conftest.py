"""Settings for every test process and the processes they start, and markers by what a test
starts (pyproject.toml registers them): `docker` (containers), `spark` (a JVM), `slow` (a
chaos run or a long soak). `make test-fast` runs the rest.

A test is marked by the fixtures it uses (the compose and Spark fixtures) or by its module's
`pytestmark`, so a new compose or Spark test is marked without anyone thinking of it.
"""

from __future__ import annotations

import os

import pytest

from mqclient.cli.local_cluster import NAMESRV_PORT_ENV

# Clusters started by tests (`mqcluster up`, the demo, mqchaos, benchmarks) take any free port
# for their name server: 9876, which `mqcluster up` prefers for a person, stays free for the
# person, and tests running side by side do not contend for it. The test of that preference
# unsets it for its own processes.
os.environ[NAMESRV_PORT_ENV] = "0"

# start_broker, processes, nodes, etcd, etcd3: for every folder.
pytest_plugins = ["tests.support.fixtures", "tests.support.etcd"]

DOCKER_FIXTURES = frozenset({"docker_client", "compose_tool", "compose_image"})
SPARK_FIXTURES = frozenset({"spark", "outputs"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & DOCKER_FIXTURES:
            item.add_marker(pytest.mark.docker)
        if fixtures & SPARK_FIXTURES:
            item.add_marker(pytest.mark.spark)
