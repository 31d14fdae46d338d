"""Admin commands that ask brokers one AdminService RPC each and list rows of the answers,
declared as data: the RPC and its request, which brokers, the rows and their columns.

`mqadmin` makes a command of each (`-b` / `-c` choose the brokers, `--json` prints the rows);
`MQAdmin.query_brokers` gives the same rows to other tools. What an account needs to run one
is its RPC's requirement in acl/resources.py (an admin account unless listed there), so a new
command of this kind is: the RPC in proto/mqcluster/v1/admin.proto, its handler in
broker/admin.py, an entry here, and a test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from mqproto import admin_pb2

Row = dict[str, Any]  # broker_name, broker_addr, then the columns' keys


@dataclasses.dataclass(frozen=True)
class Column:
    """`key` names the value in a row (and in --json); it is read from the row message's
    field `field` (default: the key). `cell` formats it for the table (default: str)."""

    key: str
    header: str
    field: str = ""
    cell: Callable[[Row], object] | None = None


@dataclasses.dataclass(frozen=True)
class Option:
    """A command option that sets a field of the request (absent: the field's default)."""

    flags: tuple[str, ...]
    field: str
    help: str


@dataclasses.dataclass(frozen=True)
class BrokerQuery:
    command: str  # mqadmin's name for it (RocketMQ's where it has one)
    help: str
    rpc: str  # the AdminService method
    request: Callable[..., Any]  # the request message class
    rows: str  # the response's repeated field holding the rows
    columns: tuple[Column, ...]
    options: tuple[Option, ...] = ()
    masters_only: bool = True  # without -b: every master (else every broker) of -c's cluster
    summary: Callable[[Sequence[Row]], str] | None = None  # a line after the table

    def rows_of(self, response: Any, broker_name: str, broker_addr: str) -> list[Row]:
        return [{"broker_name": broker_name, "broker_addr": broker_addr,
                 **{c.key: getattr(item, c.field or c.key) for c in self.columns}}
                for item in getattr(response, self.rows)]

    def request_of(self, params: dict[str, object]) -> Any:
        """The request with the options' fields that were given (None: not given)."""
        return self.request(**{o.field: v for o in self.options
                               if (v := params.get(o.field)) is not None})


def _local_time_or_dash(key: str) -> Callable[[Row], object]:
    from mqclient.cli.output import human_time  # the table's only: keep the import light

    return lambda row: human_time(row[key]) if row["pending"] else "-"


TRANSACTION_STATUS = BrokerQuery(
    command="transactionStatus",
    help="half messages without a commit or rollback, per master and producer group",
    rpc="GetPendingTransactions", request=admin_pb2.GetPendingTransactionsRequest,
    rows="groups",
    columns=(
        Column("producer_group", "Producer Group"),
        Column("pending", "Pending"),
        Column("oldest_born_timestamp_ms", "Oldest Born", field="oldest_born_timestamp",
               cell=_local_time_or_dash("oldest_born_timestamp_ms")),
        Column("max_check_times", "Max Checks"),
        Column("online_producers", "Online Producers"),
    ),
    options=(Option(("-g", "--group"), "producer_group", "this producer group only"),),
    summary=lambda rows: f"{sum(r['pending'] for r in rows)} half message(s) without an "
                         "outcome",
)

BROKER_QUERIES: tuple[BrokerQuery, ...] = (TRANSACTION_STATUS,)
