"""Calls to the controllers (brokers, mqadmin): the active one first, following NOT_LEADER
answers, then each address in turn. Every call is bounded by `timeout_s`."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from controller import protocol as p

log = logging.getLogger(__name__)


class ControllerUnavailable(Exception):
    """No controller answered as the active one."""


class ControllerRefused(Exception):
    """The active controller answered with an error code."""

    def __init__(self, code: str, remark: str) -> None:
        super().__init__(f"{code}: {remark}")
        self.code = code
        self.remark = remark


def parse_addresses(text: str) -> list[str]:
    addrs = [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"controller address {a!r} is not HOST:PORT")
    if not addrs:
        raise ValueError("no controller address")
    return addrs


class ControllerClient:
    def __init__(self, addresses: list[str], timeout_s: float = 1.0) -> None:
        self.addresses = list(addresses)
        self.timeout_s = timeout_s
        self.leader = ""
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address)
            self._channels[address] = channel
        return channel

    async def _call_one(self, address: str, method: str, request: dict[str, Any]
                        ) -> dict[str, Any]:
        call = self._channel(address).unary_unary(
            p.method_path(method), request_serializer=p.encode, response_deserializer=p.decode)
        return await call(request, timeout=self.timeout_s)

    async def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """The active controller's answer (code ""); ControllerRefused for another code,
        ControllerUnavailable when none answered as active."""
        tried: list[str] = []
        order = ([self.leader] if self.leader else []) + [
            a for a in self.addresses if a != self.leader]
        problems = []
        while order:
            address = order.pop(0)
            if address in tried:
                continue
            tried.append(address)
            try:
                answer = await self._call_one(address, method, request)
            except grpc.aio.AioRpcError as e:
                problems.append(f"{address}: {e.code().name}")
                if address == self.leader:
                    self.leader = ""
                continue
            code = answer.get("code", "")
            if code == p.NOT_LEADER:
                leader = answer.get("leader") or ""
                if leader and leader not in tried:
                    order.insert(0, leader)
                problems.append(f"{address}: not the leader")
                continue
            self.leader = address
            if code:
                raise ControllerRefused(code, str(answer.get("remark", "")))
            return answer
        raise ControllerUnavailable("no active controller answered: " + "; ".join(problems))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
