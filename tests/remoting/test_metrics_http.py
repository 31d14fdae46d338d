"""remoting.metrics_http without a server: request heads, the exposition text (the same
samples as prometheus_client's generate_latest) and the latency histogram."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from remoting.metrics_http import (
    ExpositionRenderer,
    HttpError,
    HttpLimits,
    MetricsHttpServer,
    exposition_text,
    histogram_family,
    parse_request_head,
)
from store.histogram import LatencyHistogram


def families() -> list[Metric]:
    g = GaugeMetricFamily("t_gauge", "a doc with \\ and\na newline", labels=["topic", "group"])
    g.add_metric(['quo"te', "back\\slash\nnewline"], 1.5)
    g.add_metric(["t", "g"], float("inf"))
    c = CounterMetricFamily("t_things", "counted", labels=["x"])
    c.add_metric(["1"], 3)
    h = histogram_family("t_seconds", "a histogram", {"cluster": "c", "broker": "b"},
                         [(0.1, 1), (1.0, 2), (float("inf"), 3)], 2.5)
    return [g, c, h, GaugeMetricFamily("t_plain", "no labels", value=7)]


def samples(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                  for f in text_string_to_metric_families(text) for s in f.samples)


def test_exposition_text_has_generate_latest_samples() -> None:
    class Fixed:
        def collect(self) -> Iterator[Metric]:
            return iter(families())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    want = generate_latest(registry).decode()
    got = exposition_text(families(), yield_every=1)
    assert samples(got) == samples(want)
    assert [line for line in got.splitlines() if line.startswith("#")] == \
        [line for line in want.splitlines() if line.startswith("#")]


def test_renderer_adds_process_metrics() -> None:
    text = ExpositionRenderer().render(families()).decode()
    names = {s[0] for s in samples(text)}
    assert {"t_gauge", "t_things_total", "t_seconds_count", "python_info"} <= names


def test_latency_histogram_buckets() -> None:
    h = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 5.0, -1.0):
        h.observe(seconds)
    snap = h.snapshot()
    assert snap.cumulative() == [(0.001, 3), (0.01, 4), (float("inf"), 5)]
    assert snap.count == 5 and snap.sum == pytest.approx(5.0035)
    assert (snap.count_le(0.001), snap.count_le(0.01), snap.count_le(float("inf"))) == (3, 4, 5)
    with pytest.raises(ValueError):
        LatencyHistogram((0.1, 0.1))


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /metrics", 400),
    (b"GET metrics HTTP/1.1", 400),
    (b"G3T /metrics HTTP/1.1", 400),
    (b"GET /metrics HTTP/3", 505),
    (b"GET /metrics HTTP/1.1\r\nbad", 400),
    (b"GET /metrics HTTP/1.1\r\n Folded: x", 400),
    (b"GET /metrics HTTP/1.1" + b"\r\nA: b" * 101, 431),
])
def test_bad_heads(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as e:
        parse_request_head(head, HttpLimits())
    assert e.value.status == status


def test_good_head() -> None:
    r = parse_request_head(b"GET /metrics?name[]=x HTTP/1.0\r\nAccept-Encoding: gzip, br\r\n"
                           b"Host: h", HttpLimits())
    assert (r.method, r.path, r.accepts_gzip, r.headers["host"]) == ("GET", "/metrics", True, "h")


def test_server_limits_connections_and_stops_cleanly() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        server = MetricsHttpServer(lambda: (lambda: b"up 1.0\n"), name="test",
                                   limits=HttpLimits(max_connections=1, head_timeout_s=2.0))
        port = await server.start("127.0.0.1", 0)

        async def ask(request: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return answer

        # A silent client holds the only slot: the next one is refused at once.
        _, silent = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)
        refused = await ask(b"GET /metrics HTTP/1.1\r\n\r\n")
        silent.close()
        await asyncio.sleep(0.1)
        served = await ask(b"GET /metrics HTTP/1.1\r\n\r\n")
        _, pending = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)
        await asyncio.wait_for(server.stop(), 5)  # drops the pending client, no hang
        pending.close()
        assert server.scrapes == 1 and server.rejected == 1
        return refused, served

    refused, served = asyncio.run(scenario())
    assert refused.startswith(b"HTTP/1.1 503 ") and b"scrapes at once" in refused
    assert served.startswith(b"HTTP/1.1 200 OK") and served.endswith(b"up 1.0\n")
