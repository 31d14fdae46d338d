"""Markers by what a test starts (pyproject.toml registers them): `docker` (containers),
`spark` (a JVM), `slow` (a chaos run or a long soak). `make test-fast` runs the rest.

A test is marked by the fixtures it uses (the compose and Spark fixtures) or by its
module's `pytestmark`, so a new compose or Spark test is marked without anyone thinking of it.
"""

from __future__ import annotations

import pytest

DOCKER_FIXTURES = frozenset({"docker_client", "compose_tool", "compose_image"})
SPARK_FIXTURES = frozenset({"spark", "outputs"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & DOCKER_FIXTURES:
            item.add_marker(pytest.mark.docker)
        if fixtures & SPARK_FIXTURES:
            item.add_marker(pytest.mark.spark)
