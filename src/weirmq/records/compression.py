"""Decompression of Kafka record-batch payloads.

The broker stores batches as the producer compressed them unless the topic's
compression.type names another codec (records/recompress.py rewrites them then); it
decompresses on the paths that must look at individual records (finding the first record
at or after a timestamp, routing, queues). The codec is the low three bits of the batch
attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Snappy has two framings in the wild: librdkafka and the Java client write the xerial
"snappy-java" framing (a 16-byte header, then blocks each prefixed by a 4-byte big-endian
length); some clients send raw snappy. Both are accepted. LZ4 is the LZ4 frame format.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from ..errors import ErrorCode, KafkaError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_BLOCK_LEN = struct.Struct(">i")


class UnsupportedCompressionError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class CorruptPayloadError(KafkaError):
    code = ErrorCode.corrupt_message


def decompress(codec: int, data: bytes | memoryview, *, max_bytes: int) -> bytes:
    """Decompress one batch payload; refuse output beyond `max_bytes` (a zip-bomb bound)."""
    try:
        out = _decompress(codec, data)
    except (ValueError, zlib.error, cramjam.DecompressionError) as exc:
        raise CorruptPayloadError(f"cannot decompress {CODEC_NAMES[codec]} payload: {exc}") from exc
    if len(out) > max_bytes:
        raise CorruptPayloadError(f"decompressed payload exceeds {max_bytes} bytes")
    return out


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return zlib.decompress(bytes(data), wbits=31)
    if codec == SNAPPY:
        return _snappy(bytes(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _snappy(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    parts = []
    pos = _XERIAL_HEADER_BYTES
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError("truncated xerial snappy block length")
        (block_len,) = _BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if block_len < 0 or pos + block_len > len(data):
            raise ValueError("truncated xerial snappy block")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + block_len])))
        pos += block_len
    return b"".join(parts)
