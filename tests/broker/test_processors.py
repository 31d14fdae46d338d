"""The send and pull processors on a broker context built here: no controller, no gRPC
server, no other process (tests/support/context.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.pull import PullProcessor
from broker.send import SendProcessor
from broker.status import RequestError
from mqproto import common_pb2, messaging_pb2
from tests.support.context import broker_context, dispatched

M = messaging_pb2
BORN_HOST = ("127.0.0.1", 50000)


def test_a_message_sent_through_the_processor_is_pulled_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_context(tmp_path / "store", autoCreateTopicEnable=True) as ctx:
            send, pull = SendProcessor(ctx), PullProcessor(ctx)
            sent = await send.send_message(M.SendMessageRequest(
                producer_group="PG", queue_id=0,
                message=M.Message(topic="TopicCtx", body=b"hello", tag="TagA")), BORN_HOST)
            assert sent.status.code == common_pb2.SUCCESS, sent.status
            assert ctx.topics.get("TopicCtx") is not None  # created by the send
            await dispatched(ctx)
            got = await pull.pull(M.PullMessageRequest(
                consumer_group="CG", topic="TopicCtx", queue_id=0, queue_offset=0,
                max_msg_nums=8, subscription="TagA"))
            assert got.status.code == common_pb2.SUCCESS, got.status
            assert [(m.body, m.tag) for m in got.messages] == [(b"hello", "TagA")]
            assert got.next_begin_offset == 1

    asyncio.run(scenario())


def test_a_commit_outside_the_queue_is_refused_by_the_context(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_context(tmp_path / "store", autoCreateTopicEnable=True) as ctx:
            await SendProcessor(ctx).send_message(M.SendMessageRequest(
                producer_group="PG", queue_id=0, message=M.Message(topic="T", body=b"x")),
                BORN_HOST)
            await dispatched(ctx)
            ctx.commit_offset("CG", "T", 0, 1)
            assert ctx.offsets.query_offset("CG", "T", 0) == 1
            try:
                ctx.commit_offset("CG", "T", 0, 2)
            except RequestError as e:
                assert e.status().code == common_pb2.INVALID_PARAMETER
            else:
                raise AssertionError("an offset past the queue's end was committed")

    asyncio.run(scenario())
