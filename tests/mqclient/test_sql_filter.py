"""SQL92 subscriptions end to end: real name server and broker processes, push consumers
subscribing with MessageSelector.by_sql."""

from __future__ import annotations

import time

import pytest

from filter import FilterError
from mqclient import (
    ConsumeFromWhere,
    Message,
    MessageSelector,
    MQClientError,
    Producer,
    PushConsumer,
)
from mqclient.selector import EXPRESSION_TYPE_SQL92
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_consumer import Collector

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TIMEOUT_S = 30.0


def start(consumers: list[PushConsumer], cluster: Cluster, group: str, topic: str,
          selector: MessageSelector | str, collector: Collector) -> PushConsumer:
    c = PushConsumer(group, cluster.namesrv_addr, consume_from_where=FIRST,
                     rebalance_interval_s=2)
    c.subscribe(topic, selector)
    c.register_listener_concurrently(collector.listener(group))
    consumers.append(c)
    return c.start()


def test_two_groups_with_different_sql_filters_on_one_topic(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", enablePropertyFilter=True)
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4).start()
    try:
        producer.send(Message("TopicSql", b"create", tags="none"))
        cheap, dear = Collector(), Collector()
        start(consumers, cluster, "G-cheap", "TopicSql",
              MessageSelector.by_sql("price < 10 AND TAGS IN ('food', 'drink')"), cheap)
        start(consumers, cluster, "G-dear", "TopicSql",
              MessageSelector.by_sql("price >= 100 OR vip = 'yes'"), dear)
        tags = ["food", "drink", "tool"]
        sent = []
        for i in range(120):
            props = {"price": str([1, 5, 50, 150, 1000][i % 5])}
            if i % 7 == 0:
                props["vip"] = "yes"
            if i % 11 == 0:
                del props["price"]  # no price: neither price comparison holds
            msg = Message("TopicSql", b"m%d" % i, tags=tags[i % 3], properties=props)
            producer.send(msg)
            sent.append(msg)
    finally:
        producer.shutdown()

    def price(m: Message) -> float | None:
        return float(m.properties["price"]) if "price" in m.properties else None

    want_cheap = {m.body for m in sent if (p := price(m)) is not None and p < 10
                  and m.tags in ("food", "drink")}
    want_dear = {m.body for m in sent if ((p := price(m)) is not None and p >= 100)
                 or m.properties.get("vip") == "yes"}
    assert want_cheap and want_dear and want_cheap != want_dear
    cheap.wait_for(len(want_cheap), b"m", timeout=TIMEOUT_S)
    dear.wait_for(len(want_dear), b"m", timeout=TIMEOUT_S)
    time.sleep(1.0)  # anything that should not come would come now
    with cheap.lock, dear.lock:
        assert set(cheap.bodies) == want_cheap and set(cheap.bodies.values()) == {1}
        assert set(dear.bodies) == want_dear and set(dear.bodies.values()) == {1}


def test_a_bad_expression_fails_start_with_the_column(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", enablePropertyFilter=True)
    producer = Producer("PG", cluster.namesrv_addr).start()
    try:
        producer.send(Message("TopicBad", b"create"))
    finally:
        producer.shutdown()
    bad = "a > 5 AND AND b = 1"
    with pytest.raises(FilterError, match="at column 11"):  # the client checks it first
        MessageSelector.by_sql(bad)
    # The broker refuses it too (a client that does not check, or an older one).
    c = PushConsumer("G-bad", cluster.namesrv_addr)
    c.subscribe("TopicBad", MessageSelector(EXPRESSION_TYPE_SQL92, bad))
    c.register_listener_concurrently(lambda msgs: None)
    with pytest.raises(MQClientError) as e:
        c.start()
    assert e.value.code == "SUBSCRIPTION_PARSE_FAILED"
    assert "at column 11" in e.value.message and "^" in e.value.message


def test_sql_without_enable_property_filter_fails_start(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a")
    producer = Producer("PG", cluster.namesrv_addr).start()
    try:
        producer.send(Message("TopicOff", b"create"))
    finally:
        producer.shutdown()
    c = PushConsumer("G-off", cluster.namesrv_addr)
    c.subscribe("TopicOff", MessageSelector.by_sql("a > 5"))
    c.register_listener_concurrently(lambda msgs: None)
    with pytest.raises(MQClientError) as e:
        c.start()
    assert e.value.code == "REQUEST_CODE_NOT_SUPPORTED"
    assert "enablePropertyFilter" in e.value.message
    # Tags subscriptions are unaffected.
    ok = Collector()
    start(consumers, cluster, "G-tags", "TopicOff", MessageSelector.by_tag("*"), ok)
    ok.wait_for(1, b"create", timeout=TIMEOUT_S)
