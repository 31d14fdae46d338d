"""`mqadmin COMMAND -n HOST:PORT[;HOST:PORT] [--json] [options]`: RocketMQ's admin tool.

Tables for people, `--json` for scripts. A failure prints one line on stderr and exits 1;
bad arguments exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from common.constants import PERM_READ, PERM_WRITE
from mqclient.admin import (
    NAMESRV_ADDR_ENV,
    RESET_EARLIEST,
    RESET_LATEST,
    AdminError,
    MQAdmin,
    parse_addresses,
)
from mqclient.admin_queries import BROKER_QUERIES, BrokerQuery
from mqclient.admin_types import BrokerUnreachable, HAStatus, StoredMessage, TraceView
from mqclient.cli import controller_admin
from mqclient.cli.arguments import (
    INT32_MAX,
    INT64_MAX,
    host_port,
    host_port_list,
    int_range,
    offset_msg_id,
    seconds,
)
from mqclient.cli.errors import stdout_closed, unexpected
from mqclient.cli.output import (
    TABLE_BODY_CHARS,
    body_text,
    dumps,
    human_time,
    jsonable,
    key_values,
    perm_name,
    table,
)
from mqclient.trace import RMQ_SYS_TRACE_TOPIC
from remoting.tls import ClientTls, TlsError

T = TypeVar("T")

PROG = "mqadmin"
EXIT_FAILURE = 1
EXIT_USAGE = 2  # as argparse
EXIT_INTERRUPTED = 130
DEFAULT_QUEUE_NUMS = 8  # updateTopic -r / -w (RocketMQ's UpdateTopicSubCommand)
DEFAULT_CONSUME_COUNT = 128  # consumeMessage -c
Handler = Callable[[MQAdmin, argparse.Namespace], None]
QUEUE_NUMS = int_range(1, INT32_MAX)  # the broker refuses more than its maxTopicQueueNums
QUEUE_ID = int_range(0, INT32_MAX - 1)
OFFSET = int_range(0, INT64_MAX)
MESSAGE_COUNT = int_range(1, INT32_MAX)
SLAVE_ID = int_range(1, INT64_MAX)  # brokerId of a slave (0 is the master)
MAX_TIMEOUT_S = 3600.0


def _out(text: str) -> None:
    print(text, flush=True)


def _warn_unreachable(results: list[object]) -> None:
    """One stderr line per broker that did not answer, for output that has no row of it
    (the others are printed)."""
    for r in results:
        if isinstance(r, BrokerUnreachable):
            which = (f"{r.broker_name} id {r.broker_id} ({r.broker_addr})" if r.broker_name
                     else r.broker_addr)  # asked by address (-b): name and id unknown
            print(f"{PROG}: broker {which} did not answer: {r.error}", file=sys.stderr,
                  flush=True)


def _fail_if_none_answered(results: list[object]) -> None:
    """AdminError (exit 1) when every broker asked failed (after what was printed), so a
    script sees a cluster where all refused or are down as a failure."""
    if results and all(isinstance(r, BrokerUnreachable) for r in results):
        raise AdminError(f"no broker answered ({len(results)} asked)")


def _offset_text(offset: int) -> str:
    return "never" if offset < 0 else str(offset)  # -1: never committed, not "committed 0"


# -- commands --------------------------------------------------------------------------------
def cluster_list(admin: MQAdmin, args: argparse.Namespace) -> None:
    info = admin.cluster_info()
    listed = [(cluster, name, broker_id, addr) for cluster, names in info.clusters.items()
              for name in names if (group := info.groups.get(name)) is not None
              for broker_id, addr in sorted(group.addrs.items())]
    # Every broker asked at once: each one not answering costs one timeout in all.
    runtimes = admin.each_broker([(name, addr, broker_id) for _, name, broker_id, addr in listed],
                                 admin.broker_runtime)
    rows = []
    for (cluster, name, broker_id, addr), rt in zip(listed, runtimes, strict=True):
        row: dict[str, object] = {"cluster": cluster, "broker_name": name,
                                  "broker_id": broker_id, "addr": addr}
        if isinstance(rt, BrokerUnreachable):  # listed by the name server, not answering
            row.update(role=None, put_tps=None, get_total_tps=None, commit_log_max_offset=None,
                       dispatch_behind_bytes=None, error=rt.error)
        else:
            row.update(role=rt.broker_role, put_tps=rt.put_tps, get_total_tps=rt.get_total_tps,
                       commit_log_max_offset=rt.commit_log_max_offset,
                       dispatch_behind_bytes=rt.dispatch_behind_bytes, error=None)
        rows.append(row)
    if args.json:
        _out(dumps(rows))
    else:
        def cell(value: object, fmt: str = "{}") -> str:
            return "-" if value is None else fmt.format(value)

        _out(table(["Cluster Name", "Broker Name", "BID", "Addr", "Role", "InTPS", "OutTPS",
                    "CommitLog Max", "Dispatch Behind"],
                   [[r["cluster"], r["broker_name"], r["broker_id"], r["addr"],
                     cell(r["role"]) if r["error"] is None else "UNREACHABLE",
                     cell(r["put_tps"], "{:.2f}"), cell(r["get_total_tps"], "{:.2f}"),
                     cell(r["commit_log_max_offset"]), cell(r["dispatch_behind_bytes"])]
                    for r in rows]))
    _report_failures([str(r["error"]) for r in rows if r["error"] is not None], len(rows))


def _report_failures(errors: list[str], total: int) -> None:
    """Why brokers did not answer, each distinct reason once on stderr (the broker's
    address left out: a refusal by access control reads the same from every broker);
    AdminError when none answered."""
    reasons: dict[str, int] = {}
    for e in errors:
        reason = e.split(": ", 1)[1] if e.startswith("broker ") and ": " in e else e
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in reasons.items():
        print(f"{PROG}: {n} of {total} broker(s) did not answer: {reason}", file=sys.stderr,
              flush=True)
    if errors and len(errors) == total:
        raise AdminError(f"no broker answered ({total} listed)")


def topic_list(admin: MQAdmin, args: argparse.Namespace) -> None:
    topics = admin.topic_list()
    _out(dumps(topics) if args.json else "\n".join(topics))


def topic_route(admin: MQAdmin, args: argparse.Namespace) -> None:
    route = admin.topic_route(args.topic)
    if args.json:
        _out(dumps(route))
        return
    _out(table(["Broker Name", "Read Queues", "Write Queues", "Perm"],
               [[q.broker_name, q.read_queue_nums, q.write_queue_nums, perm_name(q.perm)]
                for q in route.queue_datas]))
    _out("")
    _out(table(["Broker Name", "Cluster", "BID", "Addr"],
               [[g.broker_name, g.cluster, broker_id, addr]
                for g in route.broker_groups for broker_id, addr in g.addrs.items()]))


def topic_status(admin: MQAdmin, args: argparse.Namespace) -> None:
    queues = admin.topic_status(args.topic)
    if args.json:
        _out(dumps(queues))
        return
    _out(table(["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"],
               [[q.broker_name, q.queue_id, q.min_offset, q.max_offset,
                 human_time(q.last_updated_ms)] for q in queues]))


def topic_names(args: argparse.Namespace) -> list[str]:
    """updateTopic's topics: `-t A` or `-t A,B,C`, or `--topicFile PATH` (one name a line;
    blank lines and lines starting with # skipped; `-` reads stdin)."""
    if args.topic_file is None:
        return [t.strip() for t in args.topic.split(",") if t.strip()]
    try:
        if args.topic_file == "-":
            text = sys.stdin.read()
        else:
            with open(args.topic_file, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise AdminError(f"cannot read the topic file {args.topic_file}: {e}") from None
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def update_topic(admin: MQAdmin, args: argparse.Namespace) -> None:
    topics = topic_names(args)
    if not topics:
        raise AdminError("no topic given (the list or file is empty)")
    if len(topics) > 1 or args.topic_file is not None:
        update_topics(admin, args, topics)
        return
    args.topic = topics[0]
    addrs = admin.create_topic(args.topic, cluster=args.cluster, broker_addr=args.broker_addr,
                               read_queue_nums=args.read_queue_nums,
                               write_queue_nums=args.write_queue_nums, perm=args.perm,
                               order=args.order)
    config = {"topic_name": args.topic, "read_queue_nums": args.read_queue_nums,
              "write_queue_nums": args.write_queue_nums, "perm": args.perm,
              "order": args.order}
    if args.json:
        _out(dumps({"brokers": addrs, "topic_config": config}))
        return
    for addr in addrs:
        _out(f"create topic to {addr} success.")
    _out(f"TopicConfig [topicName={args.topic}, readQueueNums={args.read_queue_nums}, "
         f"writeQueueNums={args.write_queue_nums}, perm={perm_name(args.perm)}, "
         f"order={str(args.order).lower()}]")


def update_topics(admin: MQAdmin, args: argparse.Namespace, topics: list[str]) -> None:
    """Many topics of one config: one call per broker (CreateOrUpdateTopics)."""
    addrs = admin.create_topics(topics, cluster=args.cluster, broker_addr=args.broker_addr,
                                read_queue_nums=args.read_queue_nums,
                                write_queue_nums=args.write_queue_nums, perm=args.perm,
                                order=args.order)
    config = {"read_queue_nums": args.read_queue_nums, "write_queue_nums": args.write_queue_nums,
              "perm": args.perm, "order": args.order}
    if args.json:
        _out(dumps({"brokers": addrs, "topics": len(topics), "topic_config": config}))
        return
    for addr in addrs:
        _out(f"create {len(topics)} topics to {addr} success.")
    _out(f"TopicConfig [topics={len(topics)} ({topics[0]} .. {topics[-1]}), "
         f"readQueueNums={args.read_queue_nums}, writeQueueNums={args.write_queue_nums}, "
         f"perm={perm_name(args.perm)}, order={str(args.order).lower()}]")


def delete_topic(admin: MQAdmin, args: argparse.Namespace) -> None:
    addrs = admin.delete_topic(args.topic, cluster=args.cluster)
    if args.json:
        _out(dumps({"topic": args.topic, "brokers": addrs}))
        return
    for addr in addrs:
        _out(f"delete topic [{args.topic}] from {addr} success.")


def consumer_progress(admin: MQAdmin, args: argparse.Namespace) -> None:
    if args.group is None:
        groups = admin.consumer_groups()
        if args.json:
            _out(dumps(groups))
            return
        _out(table(["Group", "Count", "TPS", "Diff Total"],
                   [[g.group, g.consumer_count, f"{g.consume_tps:.2f}", g.diff_total]
                    for g in groups]))
        return
    progress = admin.consumer_progress(args.group, args.topic)
    if args.json:
        _out(dumps({**jsonable(progress), "diff_total": progress.diff_total}))
        return
    _out(table(["Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff",
                "Lag Seconds", "LastTime"],
               [[q.topic, q.broker_name, q.queue_id, q.broker_offset,
                 _offset_text(q.consumer_offset), q.diff, f"{q.lag_seconds:.1f}",
                 human_time(q.last_timestamp_ms)] for q in progress.queues]))
    _out("")
    _out(f"Consume TPS: {progress.consume_tps:.2f}")
    _out(f"Consume Diff Total: {progress.diff_total}")
    _out(f"Lag Seconds Max: {max((q.lag_seconds for q in progress.queues), default=0.0):.1f}")
    _out(f"Online Consumers: {progress.online_consumers}")


def _each_address(admin: MQAdmin, addresses: str, ask: Callable[[str], T]
                  ) -> list[T | BrokerUnreachable]:
    """`-b ADDR`: ask's answer or its error; `-b 'ADDR;ADDR'`: every broker asked at once,
    one that does not answer a BrokerUnreachable in its place (as with -c)."""
    addrs = parse_addresses(addresses)
    if len(addrs) == 1:
        return [ask(addrs[0])]
    return admin.each_broker([("", a, -1) for a in addrs], ask)


def broker_status(admin: MQAdmin, args: argparse.Namespace) -> None:
    if args.broker_addr is not None:
        runtimes: list = _each_address(admin, args.broker_addr, admin.broker_runtime)
    else:
        runtimes = admin.broker_runtimes_of_cluster(args.cluster)
    # A broker that did not answer is listed once, in the output (UNREACHABLE and why).
    if args.json:
        _out(dumps({rt.broker_addr if isinstance(rt, BrokerUnreachable) else rt.addr: rt
                    for rt in runtimes}))
    else:
        for i, rt in enumerate(runtimes):
            if isinstance(rt, BrokerUnreachable):
                _out(("\n" if i else "") + f"{rt.broker_name} {rt.broker_addr}")
                _out(key_values([("UNREACHABLE", rt.error)]))
                continue
            if len(runtimes) > 1:
                _out(("\n" if i else "") + f"{rt.broker_name} {rt.addr}")
            _out(key_values(rt.table.items()))
    _fail_if_none_answered(runtimes)


def _message_block(m: StoredMessage) -> str:
    return key_values([
        ("OffsetID", m.offset_msg_id), ("MsgId (UNIQ_KEY)", m.msg_id), ("Topic", m.topic),
        ("Tags", f"[{m.tags}]"), ("Keys", f"[{' '.join(m.keys)}]"),
        ("Broker Name", m.broker_name), ("Queue ID", m.queue_id),
        ("Queue Offset", m.queue_offset), ("CommitLog Offset", m.commit_log_offset),
        ("Reconsume Times", m.reconsume_times),
        ("Born Timestamp", human_time(m.born_timestamp)),
        ("Store Timestamp", human_time(m.store_timestamp)), ("Born Host", m.born_host),
        ("Store Host", m.store_host), ("System Flag", m.sys_flag),
        ("Properties", m.properties), ("Body Size", len(m.body)),
        ("Message Body", _body(m))], width=20)


def _body(m: StoredMessage, limit: int | None = None) -> str:
    """The body as text, or why its compressed bytes could not be read."""
    if m.body_error:
        return f"<not readable: {m.body_error}>"
    return body_text(m.body, limit)


def query_msg_by_id(admin: MQAdmin, args: argparse.Namespace) -> None:
    m = admin.query_msg_by_id(args.msg_id)
    _out(dumps(m) if args.json else _message_block(m))


def query_msg_by_key(admin: MQAdmin, args: argparse.Namespace) -> None:
    found = admin.query_msg_by_key(args.topic, args.key)
    if not found:
        raise AdminError(f"no message of topic {args.topic} with key {args.key}")
    if args.json:
        _out(dumps(found))
        return
    _out(table(["Message ID", "Offset Msg ID", "Broker Name", "QID", "Offset", "Store Time"],
               [[m.msg_id, m.offset_msg_id, m.broker_name, m.queue_id, m.queue_offset,
                 human_time(m.store_timestamp)] for m in found]))


def query_msg_trace_by_id(admin: MQAdmin, args: argparse.Namespace) -> None:
    """QueryMsgTraceByIdSubCommand: the Pub records, then the consumer groups' SubAfter
    records (and ends of transactions), as RocketMQ's mqadmin prints them."""
    views = admin.query_msg_trace_by_id(args.msg_id, trace_topic=args.trace_topic,
                                        max_num=args.max_num)
    if args.json:
        _out(dumps(views))
        return
    if not views:
        raise AdminError(f"no trace of message {args.msg_id} in {args.trace_topic}")
    lines = []
    row = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"
    for v in views:
        if v.trace_type == "Pub":
            lines += [row.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                 "#CostTimes", "#Status"),
                      row.format("Pub", v.group, v.client_host, _trace_time(v.timestamp),
                                 f"{v.cost_time}ms", v.status), ""]
    ends = [v for v in views if v.trace_type == "EndTransaction"]
    if ends:
        lines.append(row.format("#Type", "#ProducerGroup", "#ClientHost", "#EndTime",
                                "#State", "#FromCheck"))
        lines += [row.format("EndTrans", v.group, v.client_host, _trace_time(v.timestamp),
                             v.transaction_state, str(v.from_transaction_check).lower())
                  for v in ends]
        lines.append("")
    groups: dict[str, list[TraceView]] = {}
    for v in views:
        if v.trace_type == "SubAfter":
            groups.setdefault(v.group, []).append(v)
    for group_views in groups.values():
        lines.append(row.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime",
                                "#CostTimes", "#Status"))
        lines += [row.format("Sub", v.group, v.client_host, _trace_time(v.timestamp),
                             f"{v.cost_time}ms", v.status) for v in group_views]
        lines.append("")
    _out("\n".join(lines).rstrip("\n"))


def _trace_time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def send_message(admin: MQAdmin, args: argparse.Namespace) -> None:
    keys = args.keys.split() if args.keys else []
    r = admin.send_message(args.topic, args.body.encode("utf-8"), keys=keys, tag=args.tags,
                           broker_name=args.broker_name, queue_id=args.queue_id)
    if args.json:
        _out(dumps(r))
        return
    _out(table(["Broker Name", "QID", "Queue Offset", "Send Result", "MsgId", "OffsetMsgId"],
               [[r.broker_name, r.queue_id, r.queue_offset, r.status, r.msg_id,
                 r.offset_msg_id]]))


def consume_message(admin: MQAdmin, args: argparse.Namespace) -> None:
    found = admin.consume_messages(args.topic, broker_name=args.broker_name,
                                   queue_id=args.queue_id, offset=args.offset,
                                   count=args.count)
    if args.json:
        _out(dumps(found))
        return
    _out(table(["Broker Name", "QID", "Offset", "MsgId", "Tags", "Keys", "Store Time", "Body"],
               [[m.broker_name, m.queue_id, m.queue_offset, m.msg_id, m.tags or "-",
                 " ".join(m.keys) or "-", human_time(m.store_timestamp),
                 _body(m, TABLE_BODY_CHARS)] for m in found]))
    _out(f"\n{len(found)} message(s)")


def ha_status(admin: MQAdmin, args: argparse.Namespace) -> None:
    if args.broker_addr is not None:
        statuses: list = _each_address(admin, args.broker_addr, admin.ha_status)
    else:
        statuses = admin.ha_status_of_cluster(args.cluster)
    # A broker that did not answer is listed once, in the output (UNREACHABLE and why).
    if args.json:
        _out(dumps(statuses))
    else:
        _out("\n\n".join(_ha_tables(statuses)))
    _fail_if_none_answered(statuses)


def _ha_tables(statuses: list[HAStatus | BrokerUnreachable]) -> list[str]:
    masters = [s for s in statuses if isinstance(s, HAStatus) and s.master]
    slaves = [s for s in statuses if isinstance(s, HAStatus) and not s.master]
    unreachable = [s for s in statuses if isinstance(s, BrokerUnreachable)]
    out = []
    if masters:
        rows: list[list[object]] = []
        for s in masters:
            head = [s.broker_name, s.broker_addr, s.master_commit_log_max_offset]
            rows.extend([*head, f"{link.broker_id}@{link.addr}" if link.broker_id >= 0
                         else f"? {link.addr}", link.ack_offset, link.fall_behind_bytes,
                         f"{link.fall_behind_seconds:.1f}", link.in_sync,
                         link.transfer_bytes_per_s, link.state] for link in s.slaves)
            if not s.slaves:
                rows.append([*head, "(no slave)", "-", "-", "-", "-", "-", "-"])
        out.append(table(["Broker Name", "Master Addr", "Master Max Offset", "Slave (id@addr)",
                          "Ack Offset", "Behind Bytes", "Behind Seconds", "In Sync",
                          "Transfer B/s", "State"], rows))
    if slaves:
        rows = []
        for s in slaves:
            link = s.master_link
            rows.append([s.broker_name, s.broker_addr] + (
                [link.master_addr, link.connected, link.max_offset, link.transfer_bytes_per_s,
                 human_time(link.last_read_timestamp_ms), link.state]
                if link else ["-", False, "-", "-", "-", "no HA client"]))
        out.append(table(["Broker Name", "Slave Addr", "Master HA Addr", "Connected",
                          "Max Offset", "Transfer B/s", "Last Read", "State"], rows))
    if unreachable:
        out.append(table(["Broker Name", "BID", "Addr", "State"],
                         [[u.broker_name or "-", u.broker_id if u.broker_name else "-",
                           u.broker_addr, f"UNREACHABLE: {u.error}"] for u in unreachable]))
    return out


def reset_offset_by_time(admin: MQAdmin, args: argparse.Namespace) -> None:
    resets = admin.reset_offset_by_time(args.group, args.topic, args.timestamp,
                                        force=args.force)
    if args.json:
        _out(dumps(resets))
        return
    _out(table(["Broker Name", "QID", "Old Offset", "New Offset"],
               [[r.broker_name, r.queue_id, _offset_text(r.old_offset), r.new_offset]
                for r in resets]))


def broker_query(query: BrokerQuery, admin: MQAdmin, args: argparse.Namespace) -> None:
    """A declared broker query (mqclient/admin_queries.py): its rows per broker, as a table
    or JSON; a line per broker that did not answer."""
    results = admin.query_brokers(query, vars(args), cluster=args.cluster,
                                  addrs=parse_addresses(args.broker_addr)
                                  if args.broker_addr is not None else ())
    _warn_unreachable(results)
    # None answering (all refused, e.g. an account without admin rights, or all down) is
    # a failure, not an empty listing ("0 half message(s)" said nothing was pending).
    _fail_if_none_answered(results)
    rows = [row for r in results if not isinstance(r, BrokerUnreachable) for row in r]
    if args.json:
        _out(dumps(rows))
        return
    _out(table(["Broker Name", "Broker Addr", *(c.header for c in query.columns)],
               [[row["broker_name"] or "-", row["broker_addr"],
                 *(c.cell(row) if c.cell else row[c.key] for c in query.columns)]
                for row in rows]))
    if query.summary is not None:
        _out(f"\n{query.summary(rows)}")


def remove_slave(admin: MQAdmin, args: argparse.Namespace) -> None:
    admin.remove_slave(args.broker_addr, args.broker_id)
    _out(dumps({"master": args.broker_addr, "removed": args.broker_id}) if args.json
         else f"slave {args.broker_id} removed from {args.broker_addr}")


# -- arguments -------------------------------------------------------------------------------
def _reset_time(text: str) -> int | str:
    """-s of resetOffsetByTime: epoch ms, `now`, `earliest`, an ISO-8601 time (local time
    unless it says its zone) or RocketMQ's yyyy-MM-dd#HH:mm:ss:SSS."""
    if text in (RESET_EARLIEST, RESET_LATEST):
        return text
    if text.isdigit():
        if int(text) > INT64_MAX:
            raise argparse.ArgumentTypeError(f"{text}: epoch ms out of range (0..{INT64_MAX})")
        return int(text)
    for parse in (lambda t: datetime.datetime.strptime(t, "%Y-%m-%d#%H:%M:%S:%f"),
                  datetime.datetime.fromisoformat):
        try:
            ms = int(parse(text).timestamp() * 1000)
        except ValueError:
            continue
        except (OverflowError, OSError):  # a year the platform's clock cannot convert
            ms = -1
        if ms < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: before 1970 (epoch ms must be >= 0)")
        return ms
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected epoch ms, 'now', 'earliest', an ISO-8601 time or "
        "yyyy-MM-dd#HH:mm:ss:SSS")


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text}: expected true or false")
    return text.lower() == "true"


def _perm(text: str) -> int:
    value = int(text)
    if value not in (PERM_READ, PERM_WRITE, PERM_READ | PERM_WRITE):
        raise argparse.ArgumentTypeError(f"perm {text}: expected 2 (W), 4 (R) or 6 (RW)")
    return value


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("-n", "--namesrvAddr", dest="namesrv", type=host_port_list,
                        default=default(None),
                        help=f"name servers HOST:PORT;HOST:PORT (default ${NAMESRV_ADDR_ENV})")
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print JSON for scripts")
    parser.add_argument("--accessKey", dest="access_key", default=default(None),
                        help="an admin account of brokers with aclEnable (default "
                             "$MQ_ACCESS_KEY)")
    parser.add_argument("--tlsCa", dest="tls_ca", default=default(None),
                        help="the CA of TLS name servers and brokers (default $MQ_TLS_CA)")
    parser.add_argument("--secretKey", dest="secret_key", default=default(None),
                        help="its secret (default $MQ_SECRET_KEY; prefer the variable: "
                             "arguments show in the process list)")
    parser.add_argument("--timeout", type=seconds(MAX_TIMEOUT_S), default=default(5.0),
                        help=f"seconds per RPC, above 0, at most {MAX_TIMEOUT_S:.0f} "
                             "(default 5)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Admin tool of the message cluster "
                                     "(RocketMQ's command names).")
    # The global options go before the command or after it: the main parser has them with
    # their defaults, each command a copy whose defaults are SUPPRESS (not overwriting a
    # value given before the command).
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    command("clusterList", cluster_list, "list clusters, broker groups and their load")
    command("topicList", topic_list, "list all topics")
    p = command("topicRoute", topic_route, "show a topic's route")
    p.add_argument("-t", "--topic", required=True)
    p = command("topicStatus", topic_status, "per queue min/max offset and last update")
    p.add_argument("-t", "--topic", required=True)
    p = command("updateTopic", update_topic,
                "create or update a topic, or many (-t A,B,C or --topicFile) in one call "
                "per broker")
    names = p.add_mutually_exclusive_group(required=True)
    names.add_argument("-t", "--topic", help="a topic, or topics separated by commas")
    names.add_argument("-f", "--topicFile", dest="topic_file", metavar="PATH",
                       help="a file of topic names, one a line (- for stdin)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-c", "--clusterName", dest="cluster",
                       help="on every master of this cluster (default: every master)")
    where.add_argument("-b", "--brokerAddr", dest="broker_addr", type=host_port,
                       help="on this broker only")
    p.add_argument("-r", "--readQueueNums", dest="read_queue_nums", type=QUEUE_NUMS,
                   default=DEFAULT_QUEUE_NUMS)
    p.add_argument("-w", "--writeQueueNums", dest="write_queue_nums", type=QUEUE_NUMS,
                   default=DEFAULT_QUEUE_NUMS)
    p.add_argument("-p", "--perm", type=_perm, default=PERM_READ | PERM_WRITE,
                   help="2 (W), 4 (R) or 6 (RW, default)")
    p.add_argument("-o", "--order", type=_bool, default=False, help="true for an ordered topic")
    p = command("deleteTopic", delete_topic, "delete a topic from the masters of a cluster")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster",
                   help="cluster to delete from (default: every master of the topic's route)")
    p = command("consumerProgress", consumer_progress,
                "a group's per-queue offsets and diff (all groups without -g)")
    p.add_argument("-g", "--groupName", dest="group")
    p.add_argument("-t", "--topic")
    p = command("brokerStatus", broker_status, "a broker's runtime values")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-b", "--brokerAddr", dest="broker_addr", type=host_port_list)
    where.add_argument("-c", "--clusterName", dest="cluster")
    p = command("queryMsgById", query_msg_by_id, "a message by its offsetMsgId")
    p.add_argument("-i", "--msgId", dest="msg_id", type=offset_msg_id, required=True,
                   help="an offsetMsgId: 32 or 56 hex digits")
    p = command("queryMsgByKey", query_msg_by_key, "messages of a topic by key")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)
    p = command("queryMsgTraceById", query_msg_trace_by_id,
                "the trace of a message by its id (producers and consumers with trace on)")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True, help="the message's id")
    p.add_argument("-t", "--traceTopic", dest="trace_topic", default=RMQ_SYS_TRACE_TOPIC)
    p.add_argument("-c", "--maxNum", dest="max_num", type=MESSAGE_COUNT, default=64,
                   help="trace messages to read at most")
    p = command("sendMessage", send_message, "send one message")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True, help="message body (UTF-8 text)")
    p.add_argument("-k", "--keys", default="", help="keys, blank-separated")
    p.add_argument("-c", "--tags", default="", help="tag")
    p.add_argument("-b", "--broker", dest="broker_name", help="broker name")
    p.add_argument("-i", "--qid", dest="queue_id", type=QUEUE_ID, help="queue id")
    p = command("consumeMessage", consume_message,
                "read messages with raw pulls (commits no offset)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", dest="broker_name")
    p.add_argument("-i", "--queueId", dest="queue_id", type=QUEUE_ID)
    p.add_argument("-o", "--offset", type=OFFSET, help="default: each queue's min")
    p.add_argument("-c", "--messageNumber", dest="count", type=MESSAGE_COUNT,
                   default=DEFAULT_CONSUME_COUNT)
    p = command("haStatus", ha_status, "replication state of masters and slaves")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-b", "--brokerAddr", dest="broker_addr", type=host_port_list)
    where.add_argument("-c", "--clusterName", dest="cluster")
    p = command("resetOffsetByTime", reset_offset_by_time,
                "move a group's offsets on a topic to a time (every master of the topic)")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", type=_reset_time, required=True,
                   help="epoch ms, 'now' (skip what accumulated), 'earliest', ISO-8601 or "
                        "yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", type=_bool, nargs="?", const=True, default=False,
                   help="reset although consumers are online (they move to the new offsets)")
    p = command("removeSlave", remove_slave,
                "make a master forget an absent slave that left its group for good")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", type=host_port, required=True,
                   help="the master's address")
    p.add_argument("-i", "--brokerId", dest="broker_id", type=SLAVE_ID, required=True)
    controller_admin.add_commands(
        command, lambda fn: lambda _admin, args: fn(_out, args))
    for query in BROKER_QUERIES:
        p = command(query.command, functools.partial(broker_query, query), query.help)
        kind = "master" if query.masters_only else "broker"
        where = p.add_mutually_exclusive_group()
        where.add_argument("-b", "--brokerAddr", dest="broker_addr", type=host_port_list,
                           help=f"this {kind} only (or several: 'ADDR;ADDR')")
        where.add_argument("-c", "--clusterName", dest="cluster",
                           help=f"every {kind} of this cluster (default: every {kind})")
        for option in query.options:
            p.add_argument(*option.flags, dest=option.field, help=option.help,
                           metavar=option.flags[-1].lstrip("-").upper())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        namesrv = args.namesrv or os.environ.get(NAMESRV_ADDR_ENV, "")
        tls = ClientTls.from_env(args.tls_ca)
        if tls is not None:
            tls.grpc_credentials()  # unreadable files: a usage error now, not a traceback
        with MQAdmin(namesrv, timeout=args.timeout, access_key=args.access_key,
                     secret_key=args.secret_key, tls_ca=args.tls_ca) as admin:
            args.handler(admin, args)
    except TlsError as e:
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AdminError as e:
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `mqadmin ... | head`: the reader had enough
        return stdout_closed()
    except Exception as e:  # a bug or an error no handler expected: one line, not a trace
        return unexpected(f"{PROG} {args.command}", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
