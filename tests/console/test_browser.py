"""The console's views in a real browser (headless chromium) against one real cluster
(`mqcluster up --groups 2 --slaves 1`) and one real `mqconsole` process for the module:
each view with the figures the cluster has, offset resets and resends end to end, messages
found by id, key and time, CSRF refusals, lag statuses and failover runs from their files."""

from __future__ import annotations

import base64
import datetime
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqclient import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from mqclient.admin import MQAdmin
from tests.console.conftest import ConsoleProcess
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

WAIT_S = 30.0
LAG = 100


class Setup:
    def __init__(self, local: LocalCluster, console: ConsoleProcess, admin: MQAdmin) -> None:
        self.local, self.console, self.admin = local, console, admin
        self.url = console.url
        self.nodes = {p["name"]: p for p in local.processes}


def write_analytics(root: Path) -> None:
    """A hand-made group_status and group_lag, as spark_analytics.lag writes them."""
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    status = pa.table({
        "cluster": ["DefaultCluster"], "group": ["ConsoleLagGroup"], "topic_kind": ["normal"],
        "status": ["STALL"], "snapshot_time": [t0], "queues": [4],
        "message_lag_sum": [LAG], "time_lag_max_s": [42.0], "worst_topic": ["ConsoleLagTopic"],
        "worst_broker_name": ["broker-a"], "worst_queue_id": [0]})
    (root / "group_status").mkdir(parents=True)
    pq.write_table(status, root / "group_status" / "part-0.parquet")
    history = pa.table({
        "snapshot_time": [t0 + datetime.timedelta(seconds=10 * i) for i in range(6)],
        "cluster": ["DefaultCluster"] * 6, "group": ["ConsoleLagGroup"] * 6,
        "topic_kind": ["normal"] * 6, "message_lag_sum": [0, 20, 40, 60, 80, 100],
        "time_lag_max_s": [0.0, 10.0, 20.0, 30.0, 40.0, 42.0]})
    (root / "group_lag").mkdir()
    pq.write_table(history, root / "group_lag" / "part-0.parquet")


def write_chaos_run(root: Path) -> None:
    run = root / "scenario1-local"
    run.mkdir(parents=True)
    result = {"run": {"scenario": "1", "target": "local"},
              "scenario": {"passed": True, "description": "kill -9 of a master"},
              "queue": {"lost_count": 0, "duplicate_count": 3},
              "order": {"violation_count": 0},
              "recovery": {"windows": [{"fault": "kill", "node": "broker-a-0", "start": 5.0,
                                        "duration_s": 10.0, "healed": True,
                                        "consume": {"next_consume_s": 2.5}}]}}
    (run / "result.json").write_text(json.dumps(result))
    (run / "summary.txt").write_text("mqchaos: 1 on local - PASSED\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console")
    write_analytics(root / "analytics")
    write_chaos_run(root / "chaos")
    with LocalCluster(root / "cluster", "--groups", "2", "--slaves", "1",
                      "--set", "mappedFileSizeCommitLog=4194304") as local:
        console = ConsoleProcess(local.namesrv_addr, root, "--analytics",
                                 str(root / "analytics"), "--chaos", str(root / "chaos"))
        try:
            with MQAdmin(local.namesrv_addr) as admin:
                yield Setup(local, console, admin)
        finally:
            console.stop()


def create_topic(admin: MQAdmin, topic: str, queues: int = 2) -> None:
    admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    wait_until(lambda: _route_size(admin, topic) == 2, timeout=WAIT_S, message=f"{topic} route")


def _route_size(admin: MQAdmin, topic: str) -> int:
    try:
        return len(admin.topic_route(topic).queue_datas)
    except Exception:
        return 0


def commit_all(admin: MQAdmin, group: str, topic: str, stored: int) -> None:
    """The group committed every queue of the topic up to its max offset (nothing to do),
    once the `stored` messages sent to it are in its queues (dispatch is asynchronous)."""
    wait_until(lambda: sum(q.max_offset for q in admin.topic_status(topic)) == stored,
               timeout=WAIT_S, message=f"{stored} messages in the queues of {topic}")
    for q in admin.topic_status(topic):
        master = admin.topic_route(topic).group(q.broker_name).master_addr
        assert master is not None
        admin.update_consumer_offset(master, group, topic, q.queue_id, q.max_offset)


def seconds_shown(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


# -- cluster ---------------------------------------------------------------------------------
def test_cluster_view_shows_every_broker_with_its_role_and_ha_links(page: Any,
                                                                   setup: Setup) -> None:
    page.goto(f"{setup.url}/cluster")
    rows = page.locator("#brokers > tbody > tr[data-addr]")
    assert rows.count() == 4
    text = {rows.nth(i).get_attribute("data-addr"): rows.nth(i).inner_text()
            for i in range(4)}
    for name in ("broker-a-0", "broker-b-0"):
        row = text[setup.nodes[name]["address"]]
        assert "ASYNC_MASTER" in row and "0.1.0" in row and "connected" in row
    for name in ("broker-a-1", "broker-b-1"):
        assert "SLAVE" in text[setup.nodes[name]["address"]]
    assert "up" in page.locator("#namesrvs").inner_text()
    assert page.locator("#unreachable").count() == 0
    assert page.locator("#controller").is_visible()
    assert page.locator("#no-pending").is_visible()  # no transaction waits for its outcome


# -- topics ----------------------------------------------------------------------------------
def test_topics_are_paged_and_filtered(page: Any, setup: Setup) -> None:
    names = [f"ConsolePaged-{i:03d}" for i in range(250)]
    setup.admin.create_topics(names, read_queue_nums=1, write_queue_nums=1)
    wait_until(lambda: set(names) <= set(setup.admin.topic_list()), timeout=WAIT_S,
               message="250 topics listed")
    # The console's list is cached a few seconds: it shows them within that.
    wait_until(lambda: page.goto(f"{setup.url}/topics?q=consolepaged") and "250 topic(s)"
               in page.locator("#topic-count").inner_text(), timeout=WAIT_S,
               message="the console lists the 250 topics")
    assert "page 1 of 3" in page.locator("#topic-count").inner_text()
    assert page.locator("#topics a").first.inner_text() == "ConsolePaged-000"
    page.click("#next-page")
    assert page.locator("#topics a").first.inner_text() == "ConsolePaged-100"
    page.goto(f"{setup.url}/topics?q=no-such-topic-anywhere")
    assert "No topic matches." in page.content()


def test_create_a_topic_send_a_test_message_and_see_its_queues(page: Any,
                                                               setup: Setup) -> None:
    page.goto(f"{setup.url}/topics")
    form = page.locator("#create-topic")
    form.locator("input[name=topic]").fill("ConsoleCreated")
    form.locator("input[name=read_queues]").fill("3")
    form.locator("input[name=write_queues]").fill("3")
    form.locator("button").click()
    page.wait_for_url("**/topics/ConsoleCreated")
    assert page.locator("#route tr").count() == 3  # header + broker-a + broker-b
    page.locator("#send-test textarea").fill('{"hello": "console"}')
    page.locator("#send-test input[name=keys]").fill("console-key-1")
    page.locator("#send-test button").click()
    page.wait_for_url("**/topics/ConsoleCreated?sent=*")
    queues = page.locator("#queues").inner_text()
    assert sum(int(r.split("\t")[4]) for r in queues.splitlines()[1:]) == 1
    page.locator("#sent a").click()
    assert page.locator("#body-text").inner_text() == '{"hello": "console"}'
    page.click("text=JSON")
    assert '"hello": "console"' in page.locator("#body-json").inner_text()
    assert "console-key-1" in page.locator("#message-fields").inner_text()


# -- groups ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lagging(setup: Setup) -> tuple[float, float]:
    """ConsoleLagGroup committed everything, then LAG more messages were sent: the window in
    which the first of them was stored (epoch seconds)."""
    create_topic(setup.admin, "ConsoleLagTopic")
    setup.admin.send_message("ConsoleLagTopic", b"consumed")
    commit_all(setup.admin, "ConsoleLagGroup", "ConsoleLagTopic", 1)
    before = time.time()
    for i in range(LAG):
        setup.admin.send_message("ConsoleLagTopic", f"lag {i}".encode())
        if i == 0:
            after = time.time()
    return before, after


def test_a_group_with_a_lag_of_100_shows_100_and_its_time_lag(page: Any, setup: Setup,
                                                               lagging: tuple[float, float]
                                                               ) -> None:
    time.sleep(1.0)  # a time lag of a second or more
    wait_until(lambda: page.goto(f"{setup.url}/groups?sort=lag&order=desc") and page.locator(
        "tr[data-group=ConsoleLagGroup] .lag").count() == 1 and page.locator(
        "tr[data-group=ConsoleLagGroup] .lag").inner_text() == str(LAG), timeout=WAIT_S,
        message="the group list shows the lag")
    asked_at = time.time()
    page.click("text=ConsoleLagGroup")
    assert page.locator("#message-lag").inner_text() == str(LAG)
    shown_at = time.time()
    # The age of the first of the LAG messages when the page was made (shown to 0.1 s).
    lag = seconds_shown(page.locator("#time-lag").inner_text())
    before, after = lagging
    assert asked_at - after - 0.1 <= lag <= shown_at - before + 0.1
    queues = page.locator("#queues").inner_text().splitlines()[1:]
    assert sum(int(r.split("\t")[5]) for r in queues) == LAG
    # The lag analytics' status and history of the group are on its page too.
    assert "STALL" in page.locator("#status").inner_text()
    assert page.locator("#lag-history svg").count() == 1


def test_reset_offsets_skipping_the_backlog_after_a_confirmation(page: Any, setup: Setup
                                                                 ) -> None:
    create_topic(setup.admin, "ConsoleResetTopic")
    setup.admin.send_message("ConsoleResetTopic", b"first")
    commit_all(setup.admin, "ConsoleResetGroup", "ConsoleResetTopic", 1)
    for i in range(30):
        setup.admin.send_message("ConsoleResetTopic", f"backlog {i}".encode())
    wait_until(lambda: setup.admin.consumer_progress("ConsoleResetGroup").diff_total == 30,
               timeout=WAIT_S, message="30 behind")
    page.goto(f"{setup.url}/groups/ConsoleResetGroup")
    assert page.locator("#message-lag").inner_text() == "30"
    page.check("#mode-skip")
    page.locator("#reset-form button").click()
    assert "skip the backlog" in page.locator("#reset-question").inner_text()
    assert setup.admin.consumer_progress("ConsoleResetGroup").diff_total == 30  # not yet
    page.click("#confirm-reset")
    assert "Reset 4 queue(s)" in page.locator("#reset-done").inner_text()
    assert setup.admin.consumer_progress("ConsoleResetGroup").diff_total == 0
    page.goto(f"{setup.url}/groups/ConsoleResetGroup")
    assert page.locator("#message-lag").inner_text() == "0"


# -- messages --------------------------------------------------------------------------------
def test_a_message_is_found_by_id_by_key_and_by_time(page: Any, setup: Setup) -> None:
    create_topic(setup.admin, "ConsoleFindTopic")
    begin = datetime.datetime.now().replace(microsecond=0) - datetime.timedelta(seconds=1)
    for i in range(5):
        setup.admin.send_message("ConsoleFindTopic", f"noise {i}".encode())
    sent = setup.admin.send_message("ConsoleFindTopic", b"the one", keys=["find-me"])
    end = datetime.datetime.now() + datetime.timedelta(seconds=2)
    wait_until(lambda: sum(q.max_offset for q in setup.admin.topic_status("ConsoleFindTopic"))
               == 6, timeout=WAIT_S, message="6 messages in the queues")

    page.goto(f"{setup.url}/messages?mode=id&msg_id={sent.offset_msg_id}")
    assert "1 message(s) found" in page.locator("#found-count").inner_text()
    page.goto(f"{setup.url}/messages?mode=id&msg_id={sent.msg_id}&topic=ConsoleFindTopic")
    assert "1 message(s) found" in page.locator("#found-count").inner_text()
    page.goto(f"{setup.url}/messages?mode=key")
    page.fill("input[name=topic]", "ConsoleFindTopic")
    page.fill("input[name=key]", "find-me")
    page.click("#query-form button")
    assert "1 message(s) found" in page.locator("#found-count").inner_text()
    assert "the one" in page.locator("#messages").inner_text()
    page.goto(f"{setup.url}/messages?mode=key&topic=ConsoleFindTopic&key=not-there")
    assert page.locator("#nothing-found").inner_text() == "Nothing found."

    page.goto(f"{setup.url}/messages?mode=time")
    page.fill("input[name=topic]", "ConsoleFindTopic")
    page.fill("input[name=begin]", begin.isoformat())
    page.fill("input[name=end]", end.isoformat())
    page.click("#query-form button")
    assert "6 message(s) found in 6 read" in page.locator("#found-count").inner_text()
    bodies = [r.split("\t")[-1] for r in
              page.locator("#messages").inner_text().splitlines()[1:]]
    assert sorted(bodies) == sorted([f"noise {i}" for i in range(5)] + ["the one"])
    # Bounded: a scan limit of 2 reads 2 messages and says it stopped there.
    page.goto(f"{setup.url}/messages?mode=time&topic=ConsoleFindTopic&scan_limit=2")
    assert page.locator("#limit-reached").count() == 1
    # An empty range says so plainly.
    page.goto(f"{setup.url}/messages?mode=time&topic=ConsoleFindTopic&begin=1000&end=2000")
    assert "Nothing found" in page.locator("#nothing-found").inner_text()


def test_resend_a_message_to_a_group_reaches_its_consumer(page: Any, setup: Setup) -> None:
    create_topic(setup.admin, "ConsoleResendTopic")
    got: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> None:
        with lock:
            got.extend((m.topic, m.body) for m in msgs)

    consumer = PushConsumer("ConsoleResendGroup", setup.local.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe("ConsoleResendTopic", "*")
    consumer.register_listener_concurrently(listener)
    consumer.start()
    try:
        wait_until(lambda: consumer_online(setup.admin), timeout=WAIT_S,
                   message="consumer online")
        sent = setup.admin.send_message("ConsoleResendTopic", b"resend me")
        wait_until(lambda: got.count(("ConsoleResendTopic", b"resend me")) == 1,
                   timeout=WAIT_S, message="first delivery")
        page.goto(f"{setup.url}/groups/ConsoleResendGroup")
        members = page.locator("#members").inner_text()
        assert "mqclient" in members and consumer.client_id in members
        page.goto(f"{setup.url}/messages/view?id={sent.offset_msg_id}")
        page.fill("#resend-form input[name=group]", "ConsoleResendGroup")
        page.click("#resend-form button")
        assert "Resent" in page.locator("#resent").inner_text()
        wait_until(lambda: got.count(("ConsoleResendTopic", b"resend me")) == 2,
                   timeout=WAIT_S, message="the resent message delivered again")
    finally:
        consumer.shutdown()


def consumer_online(admin: MQAdmin) -> bool:
    try:
        return admin.consumer_progress("ConsoleResendGroup").online_consumers > 0
    except Exception:
        return False


# -- access ----------------------------------------------------------------------------------
def test_a_post_without_the_csrf_token_is_refused(page: Any, setup: Setup) -> None:
    page.goto(f"{setup.url}/topics")
    response = page.request.post(f"{setup.url}/topics", form={"topic": "ConsoleForged"})
    assert response.status == 403 and "CSRF" in response.text()
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    response = page.request.post(f"{setup.url}/topics/ConsoleForged/delete",
                                 form={"confirm": "ConsoleForged", "csrf_token": "wrong"})
    assert response.status == 403
    assert token and all(token != c["value"] for c in page.context.cookies())


def test_an_unknown_group_or_topic_is_a_page_that_says_so(page: Any, setup: Setup) -> None:
    response = page.goto(f"{setup.url}/groups/NoSuchConsoleGroup")
    assert response.status == 502
    assert "NoSuchConsoleGroup not exist" in page.locator("#error-message").inner_text()
    response = page.goto(f"{setup.url}/topics/NoSuchConsoleTopic")
    assert "NoSuchConsoleTopic not exist" in page.locator("#error-message").inner_text()
    assert "Traceback" not in page.content()


# -- analytics and failover runs -------------------------------------------------------------
def test_lag_statuses_and_failover_runs_from_their_directories(page: Any, setup: Setup
                                                               ) -> None:
    page.goto(f"{setup.url}/lag")
    row = page.locator("#lag-statuses tr", has_text="ConsoleLagGroup").inner_text()
    assert "STALL" in row and "100" in row and "42.0 s" in row
    page.goto(f"{setup.url}/failover")
    row = page.locator("#runs tr", has_text="scenario1-local").inner_text()
    assert "PASSED" in row and re.search(r"\b3\b", row) and "kill broker-a-0 (2.5 s)" in row
    page.click("text=scenario1-local")
    assert "mqchaos: 1 on local - PASSED" in page.locator("#summary").inner_text()


def test_the_json_api_has_the_same_figures(page: Any, setup: Setup,
                                           lagging: tuple[float, float]) -> None:
    group = page.request.get(f"{setup.url}/api/groups/ConsoleLagGroup").json()
    assert group["message_lag"] == LAG
    assert sum(q["diff"] for q in group["queues"]) == LAG
    cluster = page.request.get(f"{setup.url}/api/cluster").json()
    assert len(cluster["brokers"]) == 4 and cluster["unreachable"] == []
    schema = page.request.get(f"{setup.url}/api/openapi.json").json()
    assert "/api/groups/{group}" in schema["paths"]


def test_dead_letters_are_listed_exported_and_resent_to_their_group(page: Any, setup: Setup
                                                                     ) -> None:
    create_topic(setup.admin, "ConsoleDlqTopic")
    sent = [setup.admin.send_message("ConsoleDlqTopic", f"dead {i}".encode()) for i in range(3)]
    for s in sent:  # straight to %DLQ%ConsoleDlqGroup, as a message out of retries goes
        setup.admin.send_back(s.offset_msg_id, "ConsoleDlqGroup", delay_level=-1)
    commit_all(setup.admin, "ConsoleDlqGroup", "ConsoleDlqTopic", 3)  # the originals: consumed
    page.goto(f"{setup.url}/groups/ConsoleDlqGroup/dlq")
    assert page.locator("#dlq-total").inner_text().startswith("3 dead letter(s)")
    page.click("#make-readable")  # brokers create DLQ topics write-only
    rows = page.locator("#dlq-messages tr").all_inner_texts()[1:]
    assert sorted(r.split("\t")[-1] for r in rows) == ["dead 0", "dead 1", "dead 2"]
    exported = page.request.get(f"{setup.url}/groups/ConsoleDlqGroup/dlq/export")
    assert "attachment" in exported.headers["content-disposition"]
    assert sorted(base64.b64decode(r["body_base64"]) for r in exported.json()) == [
        b"dead 0", b"dead 1", b"dead 2"]

    got: list[tuple[str, bytes]] = []
    consumer = PushConsumer("ConsoleDlqGroup", setup.local.namesrv_addr)
    consumer.subscribe("ConsoleDlqTopic", "*")
    consumer.register_listener_concurrently(lambda msgs: got.extend((m.topic, m.body)
                                                                    for m in msgs))
    consumer.start()
    try:
        page.on("dialog", lambda dialog: dialog.accept())  # "Resend the chosen ...?"
        page.check("#dlq-messages input[data-all]")
        page.click("#dlq-resend button")
        assert "Resent 3 dead letter(s)" in page.locator("#dlq-resent").inner_text()
        wait_until(lambda: sorted(got) == [("ConsoleDlqTopic", f"dead {i}".encode())
                                           for i in range(3)], timeout=WAIT_S,
                   message="the dead letters consumed again under their topic")
    finally:
        consumer.shutdown()


class Undecided:
    """A transaction listener that never knows: its halves stay pending (checked later)."""

    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def test_a_pending_transaction_shows_on_the_cluster_page(page: Any, setup: Setup) -> None:
    create_topic(setup.admin, "ConsoleTxnTopic")
    producer = TransactionProducer("ConsoleTxnProducer", setup.local.namesrv_addr,
                                   Undecided()).start()
    try:
        producer.send(Message("ConsoleTxnTopic", b"half"), None)

        def shown() -> bool:
            page.goto(f"{setup.url}/cluster")
            pending = page.locator("#pending tr", has_text="ConsoleTxnProducer")
            return pending.count() == 1 and pending.inner_text().split("\t")[2] == "1"
        wait_until(shown, timeout=WAIT_S, interval=0.5, message="the half listed as pending")
    finally:
        producer.shutdown()


def test_a_delayed_message_is_found_by_its_id_before_it_is_delivered(page: Any, setup: Setup
                                                                     ) -> None:
    create_topic(setup.admin, "ConsoleDelayTopic")
    producer = Producer("ConsoleDelayProducer", setup.local.namesrv_addr).start()
    try:
        sent = producer.send(Message("ConsoleDelayTopic", b"later", keys="delayed-1",
                                     delay_level=5))  # 1 min
    finally:
        producer.shutdown()
    page.goto(f"{setup.url}/messages?mode=id&msg_id={sent.offset_msg_id}")
    assert "1 message(s) found" in page.locator("#found-count").inner_text()
    row = page.locator("#messages tr").nth(1).inner_text()
    assert "later" in row and "delayed-1" in row
    # Not yet in its topic's queues: a time-range query of the topic finds nothing.
    page.goto(f"{setup.url}/messages?mode=time&topic=ConsoleDelayTopic")
    assert page.locator("#nothing-found").count() == 1
