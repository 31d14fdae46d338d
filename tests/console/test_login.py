"""A cluster with access control on (`mqcluster up --acl`) and `mqconsole --login`: every
page asks for an account first, a wrong secret is refused, the account's rights are the
console's, and the secret shows in no page and no log line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import ConsoleProcess
from tests.support.processes import LocalCluster


class Setup:
    def __init__(self, console: ConsoleProcess, keys: dict[str, str]) -> None:
        self.console, self.url = console, console.url
        self.access_key, self.secret_key = keys["MQ_ACCESS_KEY"], keys["MQ_SECRET_KEY"]


def read_credentials(directory: Path) -> dict[str, str]:
    text = (directory / "security" / "credentials.env").read_text()
    return dict(line.split("=", 1) for line in text.split())


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console-login")
    with LocalCluster(root / "cluster", "--groups", "1", "--acl") as local:
        console = ConsoleProcess(local.namesrv_addr, root, "--login")
        try:
            yield Setup(console, read_credentials(root / "cluster"))
        finally:
            console.stop()


def sign_in(page: Any, access_key: str, secret_key: str) -> None:
    page.fill("input[name=access_key]", access_key)
    page.fill("input[name=secret_key]", secret_key)
    page.click("form button")


def test_pages_and_the_api_ask_for_an_account_first(page: Any, setup: Setup) -> None:
    page.goto(f"{setup.url}/groups")
    assert page.url.startswith(f"{setup.url}/login")
    response = page.request.get(f"{setup.url}/api/cluster")
    assert response.status == 401


def test_a_wrong_secret_is_refused_and_the_right_one_acts_with_its_rights(
        page: Any, setup: Setup) -> None:
    page.goto(f"{setup.url}/cluster")
    sign_in(page, setup.access_key, "not-the-secret")
    assert "do not know this access key" in page.locator("#login-problem").inner_text()
    sign_in(page, setup.access_key, setup.secret_key)
    page.wait_for_url(f"{setup.url}/cluster")
    assert "ASYNC_MASTER" in page.locator("#brokers").inner_text()
    assert setup.access_key in page.locator("header").inner_text()
    page.goto(f"{setup.url}/topics")
    assert "TBW102" in page.locator("#topics").inner_text()
    for path in ("/cluster", "/topics", "/groups", "/messages"):
        page.goto(f"{setup.url}{path}")
        assert setup.secret_key not in page.content()
    assert setup.secret_key not in setup.console.log_path.read_text()
    page.click("header form button")  # sign out
    page.goto(f"{setup.url}/cluster")
    assert page.url.startswith(f"{setup.url}/login")
