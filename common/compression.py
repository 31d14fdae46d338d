"""Message body compression as RocketMQ 5 marks it (common/compression/*.java,
MessageSysFlag): a compressed body has sysflag bit 0 (COMPRESSED) set and its algorithm in
bits 8-10 (1 LZ4, 2 ZSTD, 3 ZLIB; 0, written by clients older than the type bits, is
ZLIB). The bodies are what RocketMQ's compressors write: a zlib stream (Deflater), an LZ4
frame (LZ4FrameOutputStream), a zstd frame (ZstdOutputStream), so each side reads the
other's.

The producer compresses (`BodyCompressor`), readers decompress (`decompress_body`); the
store keeps the bytes as sent. The codecs are the PyPI libraries `zstandard` and `lz4`
and the standard library's `zlib`.
"""

from __future__ import annotations

import enum
import threading
import zlib

import lz4.frame
import zstandard

COMPRESSED_FLAG = 0x1  # MessageSysFlag.COMPRESSED_FLAG
COMPRESSION_LZ4_TYPE = 0x1 << 8  # MessageSysFlag.COMPRESSION_LZ4_TYPE
COMPRESSION_ZSTD_TYPE = 0x2 << 8
COMPRESSION_ZLIB_TYPE = 0x3 << 8
COMPRESSION_TYPE_COMPARATOR = 0x7 << 8
# The sysflag bits a producer may set on a message: the broker takes no other from it.
PRODUCER_SYS_FLAGS = COMPRESSED_FLAG | COMPRESSION_TYPE_COMPARATOR

# DefaultMQProducer: compressMsgBodyOverHowmuch, compressLevel, compressType.
COMPRESS_MSG_BODY_OVER_HOWMUCH = 4 * 1024
COMPRESS_LEVEL = 5
# A decompressed body larger than this is refused (a corrupt or hostile length field must
# not make a reader allocate without bound): RocketMQ's maxMessageSize is 4 MiB; 64 MiB
# leaves room for producers configured above it.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


class CompressionType(enum.IntEnum):
    """RocketMQ's CompressionType: the value is the one in sysflag bits 8-10."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3

    @classmethod
    def of(cls, name: str | CompressionType) -> CompressionType:
        """By name, any case ("zstd", "ZLIB"); ValueError for others."""
        if isinstance(name, CompressionType):
            return name
        try:
            return cls[str(name).strip().upper()]
        except KeyError:
            raise ValueError(f"unsupported compress type {name!r} (want zlib, zstd or lz4)"
                             ) from None

    @property
    def sys_flag(self) -> int:
        """COMPRESSED_FLAG and this type's bits."""
        return COMPRESSED_FLAG | (self.value << 8)


class DecompressError(ValueError):
    """A body marked compressed that its algorithm cannot read."""


def compression_type(sys_flag: int) -> CompressionType:
    """The type of a body marked COMPRESSED (type bits 0: ZLIB, as RocketMQ reads them);
    DecompressError for the unused values 4-7."""
    value = (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8
    if value == 0:
        return CompressionType.ZLIB
    try:
        return CompressionType(value)
    except ValueError:
        raise DecompressError(f"unknown compression type {value} in sysflag "
                              f"{sys_flag:#x}") from None


def check_level(kind: CompressionType, level: int) -> int:
    """`level` when the algorithm takes it (zlib 0-9, zstd 1-22 or negative for speed,
    lz4 0-16); ValueError otherwise."""
    ok = {CompressionType.ZLIB: -1 <= level <= 9,
          CompressionType.ZSTD: -131072 <= level <= 22 and level != 0,
          CompressionType.LZ4: 0 <= level <= 16}[kind]
    if isinstance(level, bool) or not isinstance(level, int) or not ok:
        raise ValueError(f"compress level {level!r} is not one {kind.name} takes")
    return level


class BodyCompressor:
    """What a producer uses: `compress(body)` -> (body to send, sysflag bits), the body
    compressed when it is at least `over` bytes (DefaultMQProducerImpl.tryToCompressMessage:
    `body.length >= compressMsgBodyOverHowmuch`), unchanged with 0 otherwise."""

    def __init__(self, kind: CompressionType | str = CompressionType.ZLIB,
                 level: int = COMPRESS_LEVEL, over: int = COMPRESS_MSG_BODY_OVER_HOWMUCH
                 ) -> None:
        self.kind = CompressionType.of(kind)
        self.level = check_level(self.kind, level)
        if isinstance(over, bool) or not isinstance(over, int) or over < 0:
            raise ValueError(f"compress_msg_body_over_howmuch must be an int >= 0, not {over!r}")
        self.over = over
        self.sys_flag = self.kind.sys_flag
        if self.kind is CompressionType.ZSTD:
            # One compressor, used by one thread at a time: the producer compresses on the
            # caller's thread, so each thread gets its own (zstandard objects are not
            # thread-safe). A frame of its own per body, with the content size written.
            self._zstd_level = level
            self._local = threading.local()

    def _zstd(self) -> zstandard.ZstdCompressor:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = zstandard.ZstdCompressor(level=self._zstd_level)
        return c

    def compress(self, body: bytes) -> tuple[bytes, int]:
        if len(body) < self.over:
            return body, 0
        kind = self.kind
        if kind is CompressionType.ZLIB:
            data = zlib.compress(body, self.level)
        elif kind is CompressionType.ZSTD:
            data = self._zstd().compress(body)
        else:
            data = lz4.frame.compress(body, compression_level=self.level)
        return data, self.sys_flag


def compress(body: bytes, kind: CompressionType | str, level: int = COMPRESS_LEVEL) -> bytes:
    """`body` compressed by `kind` at `level` (whatever its size)."""
    return BodyCompressor(kind, level, 0).compress(body)[0]


def decompress_body(body: bytes, sys_flag: int,
                    max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The body as the producer gave it: decompressed when `sys_flag` has COMPRESSED_FLAG
    (by the algorithm of its type bits), else `body` itself. DecompressError, naming the
    algorithm and the reason, when it cannot be read or exceeds `max_size`."""
    if not sys_flag & COMPRESSED_FLAG:
        return body
    kind = compression_type(sys_flag)
    try:
        if kind is CompressionType.ZLIB:
            d = zlib.decompressobj()
            out = d.decompress(body, max_size)
            if d.unconsumed_tail:
                raise DecompressError(f"ZLIB body decompresses to over {max_size} bytes")
            if not d.eof:
                raise DecompressError(f"ZLIB body of {len(body)} bytes is cut off")
            return out
        if kind is CompressionType.ZSTD:
            size = zstandard.get_frame_parameters(body).content_size
            if size != zstandard.CONTENTSIZE_UNKNOWN and size > max_size:
                raise DecompressError(f"ZSTD body decompresses to {size} bytes, over "
                                      f"{max_size}")
            # A frame without its content size (ZstdOutputStream's) is bounded by max_size.
            out = zstandard.ZstdDecompressor().decompress(body, max_output_size=max_size)
        else:
            d4 = lz4.frame.LZ4FrameDecompressor()
            out = d4.decompress(body, max_length=max_size + 1)
            if not d4.eof and len(out) <= max_size:
                raise DecompressError(f"LZ4 body of {len(body)} bytes is cut off")
    except DecompressError:
        raise
    except (zlib.error, zstandard.ZstdError, RuntimeError, ValueError, MemoryError) as e:
        raise DecompressError(f"{kind.name} body of {len(body)} bytes cannot be "
                              f"decompressed: {e}") from None
    if len(out) > max_size:
        raise DecompressError(f"{kind.name} body decompresses to over {max_size} bytes")
    return out
