"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310, one-letter field names) and SEND_BATCH_MESSAGE
(320, or 10 with `batch` true as the C++ client sends it), through the broker's send
processor (SendProcessor.send_built): the same checks, auto-create, delay levels, half
messages and one append as a gRPC send.

The message is stored as sent: its properties string (TAGS, KEYS, UNIQ_KEY, DELAY, user
properties ...), its flag, and its body with the compressed bit of sysFlag (a client
compresses bodies over 4 KiB and inflates them when it reads them back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.convert import messages_from_batch
from broker.remoting4x.status import response_code
from broker.status import RequestError
from common.codec import PROPERTIES_SEPARATOR, PROPERTY_SEPARATOR, encode_offset_msg_id
from common.constants import MessageProperty, SysFlag
from mqproto import common_pb2
from remoting import codes
from remoting.command import RemotingCommand
from remoting.framing import decode_batch
from store.message import Message

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.send import SendProcessor

# SendMessageRequestHeaderV2's one-letter names.
V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic",
            "d": "defaultTopicQueueNums", "e": "queueId", "f": "sysFlag", "g": "bornTimestamp",
            "h": "flag", "i": "properties", "j": "reconsumeTimes", "k": "unitMode",
            "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
CLIENT_SYS_FLAGS = int(SysFlag.COMPRESSED | SysFlag.MULTI_TAGS)  # what a sender may set
DEFAULT_TOPIC_QUEUE_NUMS = 4
# Every Java message carries WAIT (waitStoreMsgOK) in its properties; a batch element's
# properties keep what the consumer sees, so it is dropped there.
_WAIT_PAIRS = (b"WAIT\x01true\x02", b"WAIT\x01false\x02")


def v1_header(cmd: RemotingCommand) -> RemotingCommand:
    """The request with SEND_MESSAGE_V2's field names spelt out (V1 requests unchanged)."""
    if cmd.code == codes.SEND_MESSAGE:
        return cmd
    return RemotingCommand(code=cmd.code, opaque=cmd.opaque, flag=cmd.flag,
                           ext_fields={V2_NAMES.get(k, k): v for k, v in cmd.ext_fields.items()},
                           body=cmd.body, serialize_type=cmd.serialize_type)


def parse_properties(text: str) -> dict[str, str]:
    """`name\\x01value\\x02` pairs (a trailing \\x02 or not); RequestError when a pair has
    no name."""
    out: dict[str, str] = {}
    for pair in text.split(PROPERTIES_SEPARATOR):
        if not pair:
            continue
        name, sep, value = pair.partition(PROPERTY_SEPARATOR)
        if not sep or not name:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL,
                               f"property {pair[:60]!r} is not name\\x01value")
        out[name] = value
    return out


class RemotingSend:
    def __init__(self, broker: BrokerContext, send: SendProcessor) -> None:
        self.broker = broker
        self.send = send

    async def __call__(self, cmd: RemotingCommand, born_host: tuple[str, int]
                       ) -> RemotingCommand:
        h = v1_header(cmd)
        topic = h.ext_str("topic")
        queue_id = h.ext_int("queueId", -1)
        queue_nums = h.ext_int("defaultTopicQueueNums", DEFAULT_TOPIC_QUEUE_NUMS)
        properties = parse_properties(h.ext_str("properties"))
        born_timestamp = h.ext_int("bornTimestamp", 0)
        batch = cmd.code == codes.SEND_BATCH_MESSAGE or h.ext_bool("batch")
        body = cmd.body
        if batch:
            build = self._batch_builder(topic, body, born_host, born_timestamp)
        else:
            properties.pop("WAIT", None)
            if properties.get(MessageProperty.TRAN_MSG) == "true":
                if not properties.get(MessageProperty.PGROUP):
                    properties[MessageProperty.PGROUP] = h.ext_str("producerGroup")
                await self.send.prepare_halves()
            flag = h.ext_int("flag", 0)
            sys_flag = h.ext_int("sysFlag", 0) & CLIENT_SYS_FLAGS
            reconsume = h.ext_int("reconsumeTimes", 0)

            def build(queue: int, now: int, uniq_key: Callable[[], str]) -> list[Message]:
                props = dict(properties)
                if not props.get(MessageProperty.UNIQ_KEY):
                    props[MessageProperty.UNIQ_KEY] = uniq_key()
                return [Message(topic=topic, body=body, properties=props, queue_id=queue,
                                flag=flag, sys_flag=sys_flag,
                                born_timestamp=born_timestamp or now, born_host=born_host,
                                reconsume_times=max(reconsume, 0))]

        status, msgs, append = await self.send.send_built(topic, queue_id, queue_nums, build)
        if append is None:
            return cmd.response(response_code(status.code), status.remark or None)
        # the offset message id names where 4.x clients reach this broker (queries by id
        # and send-backs go there): the remoting port, not the store's gRPC port
        ip, _ = self.broker.store_host
        _, _, port = self.broker.addresses.remoting_addr.rpartition(":")
        host = (ip, int(port)) if port.isdigit() else self.broker.store_host
        first = msgs[0]
        ext: dict[str, object] = {
            "msgId": ",".join(encode_offset_msg_id(host, p) for p in append.commit_log_offsets),
            "queueId": first.queue_id,
            "queueOffset": append.queue_offsets[0],
        }
        if first.properties.get(MessageProperty.TRAN_MSG) == "true":
            ext["transactionId"] = first.properties[MessageProperty.UNIQ_KEY]
        return cmd.response(response_code(status.code), status.remark or None, ext)

    def _batch_builder(self, topic: str, body: bytes, born_host: tuple[str, int],
                       born_timestamp: int
                       ) -> Callable[[int, int, Callable[[], str]], list[Message]]:
        try:
            elements = decode_batch(body)
        except ValueError as e:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL, f"batch body: {e}") from None
        if not elements:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL, "a batch needs at least one message")
        cleaned = []
        for flag, element_body, raw in elements:
            for pair in _WAIT_PAIRS:
                raw = raw.replace(pair, b"")
            cleaned.append((flag, element_body, raw))
        limit = self.broker.store_config.max_message_size
        total = sum(len(b) for _, b, _ in cleaned)
        if total > limit:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL,
                               f"batch bodies total {total} bytes, over maxMessageSize {limit}")

        def build(queue: int, now: int, uniq_key: Callable[[], str]) -> list[Message]:
            return messages_from_batch(cleaned, topic=topic, queue_id=queue,
                                       born_host=born_host,
                                       born_timestamp=born_timestamp or now, uniq_key=uniq_key)
        return build
