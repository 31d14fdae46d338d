"""The rooms of the code: which package may import which (read from the sources, as text).

- Only the broker's startup code uses the controller; processors and services get a
  BrokerContext (broker/context.py).
- The clients build on `common/` and `remoting/`, never on the store, the name server or the
  broker.
- `common/` builds on nothing of the cluster; the store knows nothing of the network.
- The web console (`console/`) uses the admin API (`mqclient`), `common` and its web stack.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CONTROLLER_USERS = {"broker/controller.py", "broker/startup.py"}
# RocketMQ 4.x clients' face of the broker: wired in by the startup code only.
REMOTING4X_USERS = {"broker/controller.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (also inside functions and TYPE_CHECKING)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def sources(package: str) -> list[Path]:
    """The modules of a package (or the one module a .py path names)."""
    path = REPO_ROOT / package
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def importers(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file: module` for each import of a forbidden package (or module) under `package`."""
    found = []
    for path in sources(package):
        rel = path.relative_to(REPO_ROOT).as_posix()
        for name in sorted(imported_modules(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{rel}: {name}")
    return found


def test_only_the_startup_code_imports_the_broker_controller() -> None:
    offenders = [line for package in ("broker", "proxy")
                 for line in importers(package, ("broker.controller",))
                 if line.split(":")[0] not in CONTROLLER_USERS]
    assert offenders == []


@pytest.mark.parametrize(("package", "forbidden"), [
    ("mqclient", ("store", "nameserver", "broker", "ha", "proxy")),
    ("common", ("store", "nameserver", "broker", "ha", "proxy", "mqclient", "remoting", "acl")),
    ("remoting", ("store", "nameserver", "broker", "ha", "proxy", "mqclient")),
    ("store", ("grpc", "broker", "nameserver", "proxy", "mqclient", "remoting", "mqproto")),
    ("ha", ("broker", "nameserver", "proxy", "mqclient")),
    # The console asks the cluster through the admin API only (mqclient.admin), and reads
    # the analytics' and chaos runs' files, never their code.
    ("console", ("store", "nameserver", "broker", "ha", "proxy", "remoting", "mqproto",
                 "grpc", "acl", "spark_analytics", "chaos", "filter", "pyspark")),
    # The controller knows brokers only by what they tell it over the network.
    ("controller", ("store", "broker", "ha", "nameserver", "proxy", "mqclient")),
])
def test_packages_keep_to_their_rooms(package: str, forbidden: tuple[str, ...]) -> None:
    assert importers(package, forbidden) == []


def test_only_the_startup_code_imports_the_4x_face_of_the_broker() -> None:
    offenders = [line for package in ("broker", "proxy", "nameserver", "acl", "ha", "store")
                 for line in importers(package, ("broker.remoting4x",))
                 if line.split(":")[0] not in REMOTING4X_USERS
                 and not line.startswith("broker/remoting4x/")]
    assert offenders == []


def test_the_4x_faces_build_on_the_processors_not_the_controller_or_grpc() -> None:
    assert importers("broker/remoting4x", ("broker.controller", "grpc", "proxy",
                                           "nameserver")) == []
    assert importers("nameserver/remoting.py", ("broker", "grpc", "store")) == []


def test_the_state_machine_is_pure() -> None:
    """controller/state.py: no clock, network, etcd or other package of the cluster."""
    allowed = {"__future__", "dataclasses", "json", "collections.abc", "typing"}
    imported = {name.split(".")[0] if not name.startswith("collections") else name
                for name in imported_modules(REPO_ROOT / "controller" / "state.py")}
    assert {n for n in imported if n not in allowed and not n.startswith(
        ("__future__.", "dataclasses.", "json.", "collections.abc.", "typing."))} == set()


def test_the_rule_sees_an_import_hidden_in_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from broker.controller import BrokerController\n")
    assert "broker.controller" in imported_modules(module)


STORE_PARTS = ("store/reading.py", "store/reput.py", "store/recovery.py", "store/cleaning.py")


def private_store_uses(path: Path) -> list[str]:
    """`store._x` / `self.store._x` in `path`: a private member of DefaultMessageStore."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "store") or (
                isinstance(owner, ast.Attribute) and owner.attr == "store"):
            found.append(f"{path.name}:{node.lineno} {node.attr}")
    return found


def test_the_store_s_parts_use_its_public_members_and_the_queue_table() -> None:
    assert [use for part in STORE_PARTS
            for use in private_store_uses(REPO_ROOT / part)] == []
