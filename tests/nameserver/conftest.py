"""Fixtures of the name server tests: `processes` (real name server and broker processes,
stopped after the test) is the broker tests' own."""

from tests.broker.conftest import processes  # noqa: F401
