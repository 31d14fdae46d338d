"""The name server's Prometheus metrics (`/metrics` on --metrics-port).

apache/rocketmq-exporter has no name server metrics, so these are ours, in its style
(`rocketmq_namesrv_*`), with prometheus_client's process metrics:

- rocketmq_namesrv_clusters, rocketmq_namesrv_topics: sizes of the route tables;
- rocketmq_namesrv_broker_groups{cluster}, rocketmq_namesrv_brokers{cluster}: broker
  names and broker addresses registered per cluster;
- rocketmq_namesrv_broker_register_age_seconds{cluster, broker, brokerIP, brokerId}: time
  since each broker's last registration (the scan removes it past 120 s);
- rocketmq_namesrv_requests_total{method}: requests by RPC (a method the service does not
  have counts as `unknown`, so a stranger cannot grow the label set).

A scrape copies the tables on the event loop (O(brokers)) and formats in the metrics
worker thread (remoting.metrics_http).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mqproto import namesrv_pb2
from nameserver.routeinfo import RouteInfoManager
from remoting.metrics_http import MetricsEndpoint, Render

_SERVICE = namesrv_pb2.DESCRIPTOR.services_by_name["NamesrvService"]
KNOWN_METHODS = {f"/{_SERVICE.full_name}/{m.name}": m.name for m in _SERVICE.methods}
UNKNOWN_METHOD = "unknown"


class RequestCounter(grpc.aio.ServerInterceptor):
    """Counts requests by RPC name as they are dispatched (on the event loop)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: Any = handler_call_details.method  # type: ignore[attr-defined]
        self.counts[KNOWN_METHODS.get(method, UNKNOWN_METHOD)] += 1
        return await continuation(handler_call_details)


@dataclasses.dataclass(frozen=True, slots=True)
class LiveBroker:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    age_s: float  # since its last registration


@dataclasses.dataclass(frozen=True, slots=True)
class NamesrvSnapshot:
    clusters: dict[str, tuple[int, int]]  # cluster -> (broker names, broker addresses)
    topics: int
    brokers: list[LiveBroker]
    requests: dict[str, int]


def take_snapshot(routes: RouteInfoManager, requests: RequestCounter,
                  now_ms: int) -> NamesrvSnapshot:
    """On the event loop: O(clusters + brokers)."""
    clusters: dict[str, tuple[int, int]] = {}
    for cluster, names in routes.cluster_addr_table.items():
        addrs = sum(len(bd.broker_addrs) for n in names
                    if (bd := routes.broker_addr_table.get(n)) is not None)
        clusters[cluster] = (len(names), addrs)
    brokers = []
    for bd in routes.broker_addr_table.values():
        for broker_id, addr in bd.broker_addrs.items():
            live = routes.broker_live_table.get(addr)
            age = max(0, now_ms - live.last_update_timestamp) / 1000 if live else 0.0
            brokers.append(LiveBroker(bd.cluster, bd.broker_name, broker_id, addr, age))
    return NamesrvSnapshot(clusters, len(routes.topic_queue_table), brokers,
                           dict(requests.counts))


def namesrv_families(s: NamesrvSnapshot) -> Iterator[Metric]:
    g = GaugeMetricFamily("rocketmq_namesrv_clusters", "Clusters with a registered broker",
                          value=len(s.clusters))
    yield g
    yield GaugeMetricFamily("rocketmq_namesrv_topics", "Topics in the route table",
                            value=s.topics)
    groups = GaugeMetricFamily("rocketmq_namesrv_broker_groups",
                               "Broker names (master-slave groups) registered per cluster",
                               labels=["cluster"])
    addrs = GaugeMetricFamily("rocketmq_namesrv_brokers",
                              "Broker addresses registered per cluster", labels=["cluster"])
    for cluster, (names, count) in sorted(s.clusters.items()):
        groups.add_metric([cluster], names)
        addrs.add_metric([cluster], count)
    yield from (groups, addrs)
    age = GaugeMetricFamily("rocketmq_namesrv_broker_register_age_seconds",
                            "Seconds since the broker's last registration",
                            labels=["cluster", "broker", "brokerIP", "brokerId"])
    for b in sorted(s.brokers, key=lambda b: (b.cluster, b.broker_name, b.broker_id)):
        age.add_metric([b.cluster, b.broker_name, b.address, str(b.broker_id)], b.age_s)
    yield age
    requests = CounterMetricFamily("rocketmq_namesrv_requests",
                                   "Requests served, by RPC", labels=["method"])
    for method, n in sorted(s.requests.items()):
        requests.add_metric([method], n)
    yield requests


class NamesrvMetrics(MetricsEndpoint):
    """The name server's `/metrics` server; `interceptor` goes into its gRPC server."""

    def __init__(self, routes: RouteInfoManager, clock_ms: Callable[[], int]) -> None:
        self.routes = routes
        self.clock_ms = clock_ms
        self.interceptor = RequestCounter()
        super().__init__("namesrv")

    def _snapshot(self) -> Render:
        snapshot = take_snapshot(self.routes, self.interceptor, self.clock_ms())
        return functools.partial(self._renderer.render, namesrv_families(snapshot))


__all__ = ["KNOWN_METHODS", "NamesrvMetrics", "NamesrvSnapshot", "RequestCounter",
           "namesrv_families", "take_snapshot"]
