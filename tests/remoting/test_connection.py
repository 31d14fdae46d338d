"""The asyncio remoting connection and server on loopback: opaque correlation, oneway,
requests from server to client, bounded frames, bad input closing only its own stream."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from remoting.command import RemotingCommand, decode, encode
from remoting.connection import (
    RemotingConnection,
    RemotingLimits,
    RemotingServer,
    RemotingTimeout,
    connect,
)


async def echo_handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
    if cmd.code == 1:  # slow: answered after the fast one
        await asyncio.sleep(0.2)
    if cmd.code == 50:  # asks the client back on its own connection
        back = await conn.request(RemotingCommand(code=51, ext_fields={"q": "1"}), 2)
        return cmd.response(0, back.remark)
    if cmd.code == 60:
        conn.attributes["oneway"] = cmd.ext_str("v")
        return cmd.response(0)
    return cmd.response(0, f"echo {cmd.code}", {"n": cmd.ext_int("n", 0) + 1}, cmd.body)


def with_server(scenario: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Runs `scenario(server, *args)` against a server of its own, on a loop of its own."""
    async def main() -> None:
        server = RemotingServer(echo_handler, RemotingLimits(max_frame_bytes=64 * 1024,
                                                             frame_timeout_s=0.5))
        server.port = await server.start("127.0.0.1", 0)  # type: ignore[attr-defined]
        try:
            await asyncio.wait_for(scenario(server, *args), 20)
        finally:
            await server.stop()
    asyncio.run(main())


async def raw(server: RemotingServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)  # type: ignore[attr-defined]


async def read_answer(reader: asyncio.StreamReader) -> RemotingCommand:
    (total,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    return decode(await reader.readexactly(total))


async def _test_answers_pair_with_requests_by_opaque_out_of_order(server: RemotingServer
                                                                 ) -> None:
    conn, task = await connect("127.0.0.1", server.port)  # type: ignore[attr-defined]
    slow = asyncio.create_task(conn.request(RemotingCommand(code=1, body=b"s"), 5))
    await asyncio.sleep(0.05)
    fast = await conn.request(RemotingCommand(code=2, ext_fields={"n": 4}, body=b"f"), 5)
    assert not slow.done()
    assert (fast.remark, fast.ext_fields, fast.body) == ("echo 2", {"n": "5"}, b"f")
    assert (await slow).remark == "echo 1"
    await conn.close()
    await task


async def _test_oneway_is_not_answered_and_the_server_can_ask_the_client(
        server: RemotingServer) -> None:
    async def client_side(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(0, f"client got {cmd.code} q={cmd.ext_str('q')}")

    conn, task = await connect("127.0.0.1", server.port, client_side)  # type: ignore[attr-defined]
    conn.send_oneway(RemotingCommand(code=60, ext_fields={"v": "x"}))
    answer = await conn.request(RemotingCommand(code=50), 5)
    assert answer.remark == "client got 51 q=1"
    (served,) = server.connections
    assert served.attributes["oneway"] == "x"
    await conn.close()
    await task


async def _test_a_request_without_answer_times_out(server: RemotingServer) -> None:
    async def silent(conn: RemotingConnection, cmd: RemotingCommand) -> None:
        return None

    client, task = await connect("127.0.0.1", server.port, silent)  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    (served,) = server.connections
    with pytest.raises(RemotingTimeout, match="code 77"):
        await served.request(RemotingCommand(code=77), 0.1)
    no_handler, task2 = await connect("127.0.0.1", server.port)  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    (served2,) = server.connections - {served}
    answer = await served2.request(RemotingCommand(code=78), 2)
    assert answer.code == 3 and "78" in (answer.remark or "")
    await client.close()
    await no_handler.close()
    await task
    await task2


async def _test_bad_input_closes_that_stream_only_with_one_clear_line(
        server: RemotingServer, garbage: bytes, why: str,
        caplog: pytest.LogCaptureFixture) -> None:
    other, other_task = await connect("127.0.0.1", server.port)  # type: ignore[attr-defined]
    reader, writer = await raw(server)
    with caplog.at_level(logging.WARNING, "remoting.connection"):
        writer.write(garbage)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    assert [r.getMessage() for r in caplog.records if why in r.getMessage()]
    assert (await other.request(RemotingCommand(code=2), 5)).remark == "echo 2"
    writer.close()
    await other.close()
    await other_task


async def _test_a_half_frame_held_open_is_closed_after_the_frame_timeout(
        server: RemotingServer) -> None:
    reader, writer = await raw(server)
    writer.write(struct.pack(">i", 100) + b"\x00\x00")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert 0.4 < loop.time() - started < 3


async def _test_wrong_ext_field_types_are_an_error_answer_and_the_connection_stays(
        server: RemotingServer) -> None:
    reader, writer = await raw(server)
    header = json.dumps({"code": 2, "opaque": 9, "extFields": {"n": "seven"}}).encode()
    writer.write(struct.pack(">iI", 4 + len(header), len(header)) + header)
    answer = await read_answer(reader)
    assert answer.opaque == 9 and answer.code == 1
    assert "extFields.n is 'seven', not an integer" in (answer.remark or "")
    writer.write(encode(RemotingCommand(code=2, opaque=10)))
    assert (await read_answer(reader)).remark == "echo 2"
    writer.close()


def test_answers_pair_with_requests_by_opaque_out_of_order() -> None:
    with_server(_test_answers_pair_with_requests_by_opaque_out_of_order)


def test_oneway_is_not_answered_and_the_server_can_ask_the_client() -> None:
    with_server(_test_oneway_is_not_answered_and_the_server_can_ask_the_client)


def test_a_request_without_answer_times_out() -> None:
    with_server(_test_a_request_without_answer_times_out)


@pytest.mark.parametrize(("garbage", "why"), [
    (b"GET / HTTP/1.1\r\n\r\n", "over the limit"),
    (struct.pack(">i", 2) + b"xx", "under the 4 bytes"),
    (struct.pack(">iI", 8, 100) + b"{}{}", "header length 100 past"),
    (struct.pack(">i", 64 * 1024 + 1), "over the limit of 65536"),
    (struct.pack(">iI", 6, 2) + b"[]", "not an object"),
])
def test_bad_input_closes_that_stream_only_with_one_clear_line(
        garbage: bytes, why: str, caplog: pytest.LogCaptureFixture) -> None:
    with_server(_test_bad_input_closes_that_stream_only_with_one_clear_line, garbage, why,
                caplog)


def test_a_half_frame_held_open_is_closed_after_the_frame_timeout() -> None:
    with_server(_test_a_half_frame_held_open_is_closed_after_the_frame_timeout)


def test_wrong_ext_field_types_are_an_error_answer_and_the_connection_stays() -> None:
    with_server(_test_wrong_ext_field_types_are_an_error_answer_and_the_connection_stays)


def test_connections_past_the_limit_are_closed_and_the_others_served() -> None:
    async def main() -> None:
        server = RemotingServer(echo_handler, RemotingLimits(max_connections=2))
        port = await server.start("127.0.0.1", 0)
        try:
            kept = [await connect("127.0.0.1", port) for _ in range(2)]
            await asyncio.sleep(0.05)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            for conn, _ in kept:
                assert (await conn.request(RemotingCommand(code=2), 5)).remark == "echo 2"
            for conn, task in kept:
                await conn.close()
                await task
        finally:
            await server.stop()
    asyncio.run(main())
