"""Scraping a `/metrics` endpoint in tests: the samples, looked up by name and labels."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SCRAPE_TIMEOUT_S = 10.0


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[Sample] = [s for f in text_string_to_metric_families(text)
                                      for s in f.samples]

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name
                and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        """The one sample of `name` whose labels include `labels`."""
        found = self.find(name, **labels)
        assert len(found) == 1, f"{len(found)} samples of {name} with {labels}: {found}"
        return found[0].value


def scrape(address: str, path: str = "/metrics") -> Scrape:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=SCRAPE_TIMEOUT_S) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return Scrape(r.read().decode())


def raw_http(address: str, request: bytes, timeout: float = SCRAPE_TIMEOUT_S,
             half_close: bool = False) -> bytes:
    """Sends raw bytes to HOST:PORT (then, with `half_close`, ends its side of the
    connection) and reads the answer until the server closes."""
    host, port = address.rsplit(":", 1)
    chunks = []
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(request)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading it all
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    assert line.startswith("HTTP/1.1 "), answer[:200]
    return int(line.split(" ")[1])
