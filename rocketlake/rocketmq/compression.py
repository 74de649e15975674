"""Message body compression exactly as RocketMQ producers and consumers apply it.

Why a module of its own: the decoder must inflate bodies that Java producers compressed, and our own
producer (tests, demo) must write bodies that Java consumers can inflate. Both directions depend on
library details (frame flags, stream headers) that are easy to get subtly wrong, so they live here,
next to the upstream facts they come from.

Upstream facts (apache/rocketmq, ``common/src/main/java/org/apache/rocketmq/common/``):

* ``sysflag/MessageSysFlag.java``: bit ``0x1`` (COMPRESSED_FLAG) says the stored body is compressed;
  bits ``0x700`` (COMPRESSION_TYPE_COMPARATOR) carry the algorithm: 1 LZ4, 2 ZSTD, 3 ZLIB.
* ``compression/CompressionType.java#findByValue``: value 0 means ZLIB (4.x producers set only
  bit ``0x1``); values 4-7 are unknown and make the Java decoder give up on the record.
* ``compression/ZlibCompressor.java``: ``DeflaterOutputStream`` / ``InflaterInputStream`` = a zlib
  stream *with* the 2-byte header (``zlib.compress`` / ``zlib.decompressobj()`` with default wbits).
* ``compression/Lz4Compressor.java``: lz4-java ``LZ4FrameOutputStream(out)`` = standard LZ4 *frame*,
  4 MiB blocks, BLOCK_INDEPENDENCE set, no content size, no checksums. lz4-java's
  ``LZ4FrameInputStream`` rejects linked (dependent) blocks, so we must write independent blocks.
* ``compression/ZstdCompressor.java``: zstd-jni ``ZstdOutputStream(out, level)`` = standard zstd frame
  (streamed, so without a content-size field).
* ``client/.../producer/DefaultMQProducer.java``: default type ZLIB, default level 5; bodies larger
  than ``compressMsgBodyOverHowmuch`` (4096 bytes) are compressed.

Decompression is always bounded by ``max_size``: a 4 MiB zlib body can inflate to gigabytes, and the
Java client has no such guard, but a landing pipeline must not be taken down by one hostile message.
"""

from __future__ import annotations

import enum
import threading
import zlib
from typing import Final

__all__ = [
    "COMPRESSED_FLAG",
    "COMPRESSION_TYPE_COMPARATOR",
    "DEFAULT_COMPRESS_LEVEL",
    "DEFAULT_COMPRESS_OVER_BYTES",
    "CompressionType",
    "DecompressionError",
    "compress",
    "decompress",
]

#: ``MessageSysFlag.COMPRESSED_FLAG``
COMPRESSED_FLAG: Final = 0x1
#: ``MessageSysFlag.COMPRESSION_TYPE_COMPARATOR`` (bits 8-10 of the sysflag)
COMPRESSION_TYPE_COMPARATOR: Final = 0x7 << 8
#: ``DefaultMQProducer.compressLevel`` default (system property ``rocketmq.message.compressLevel``)
DEFAULT_COMPRESS_LEVEL: Final = 5
#: ``DefaultMQProducer.compressMsgBodyOverHowmuch`` default
DEFAULT_COMPRESS_OVER_BYTES: Final = 4096

# lz4-java BLOCKSIZE.SIZE_4MB, the default of LZ4FrameOutputStream(out)
_LZ4_BLOCK_SIZE_4MB: Final = 7
# Output buffers grow geometrically from a first guess up to max_size: python-lz4 and
# python-zstandard allocate the whole requested output size up front, so asking for max_size
# (32 MiB) would cost an allocation of that size for every message.
_FIRST_GUESS_RATIO: Final = 16
_MIN_FIRST_GUESS: Final = 64 * 1024
_GROWTH: Final = 4

# Decoder objects are reused per thread: creating an LZ4 frame decoder and its 4 MiB block buffer
# costs ~20 us, ten times the decompression of a typical body. They are not thread-safe, hence
# one per thread.
_decoders = threading.local()


class DecompressionError(ValueError):
    """A compressed body is corrupt, truncated, of unknown type, or inflates beyond the limit.

    The message decoder turns this into a ``ProtocolError`` naming the record.
    """


class CompressionType(enum.IntEnum):
    """``CompressionType.java``: the value stored in sysflag bits 8-10."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3

    @classmethod
    def from_sys_flag(cls, sys_flag: int) -> CompressionType:
        """Type of a body whose sysflag has COMPRESSED_FLAG set (``MessageSysFlag#getCompressionType``).

        Value 0 is ZLIB for compatibility with producers that predate the type bits
        (``CompressionType#findByValue``).

        Raises:
            DecompressionError: for the undefined values 4-7.
        """
        value = (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8
        if value == 0:
            return cls.ZLIB
        try:
            return cls(value)
        except ValueError:
            raise DecompressionError(f"unknown compression type value {value} in sysflag") from None

    @property
    def sys_flag_bits(self) -> int:
        """Bits to OR into a sysflag next to COMPRESSED_FLAG (``CompressionType#getCompressionFlag``)."""
        return int(self) << 8


def compress(
    data: bytes, compression_type: CompressionType = CompressionType.ZLIB, level: int = DEFAULT_COMPRESS_LEVEL
) -> bytes:
    """Compress a body the way the Java producer does, so any Java consumer can inflate it.

    The caller sets ``COMPRESSED_FLAG | compression_type.sys_flag_bits`` in the SEND sysFlag.
    ``level`` is ignored for LZ4, like lz4-java's fast compressor ignores it.
    """
    if compression_type is CompressionType.ZLIB:
        return zlib.compress(data, level)
    if compression_type is CompressionType.LZ4:
        import lz4.frame

        # The streaming compressor keeps the 4 MiB block size even for small inputs (one-shot
        # lz4.frame.compress would shrink it), so the frame header is byte for byte lz4-java's:
        # 04 22 4D 18 | FLG 0x60 (version 1, independent blocks) | BD 0x70 | HC 0x73.
        compressor = lz4.frame.LZ4FrameCompressor(
            block_size=_LZ4_BLOCK_SIZE_4MB,
            block_linked=False,  # LZ4FrameInputStream: "Dependent block stream is unsupported"
            content_checksum=False,
            block_checksum=False,
        )
        return compressor.begin() + compressor.compress(data) + compressor.flush()
    if compression_type is CompressionType.ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(data)
    raise ValueError(f"unsupported compression type {compression_type!r}")


def decompress(data: bytes, compression_type: CompressionType, max_size: int) -> bytes:
    """Inflate ``data``; never produce (or allocate for) more than ``max_size`` bytes.

    Raises:
        DecompressionError: corrupt or truncated input, or output larger than ``max_size``.
    """
    if compression_type is CompressionType.ZLIB:
        return _inflate_zlib(data, max_size)
    if compression_type is CompressionType.LZ4:
        return _inflate_lz4(data, max_size)
    if compression_type is CompressionType.ZSTD:
        return _inflate_zstd(data, max_size)
    raise DecompressionError(f"unsupported compression type {compression_type!r}")


def _too_large(max_size: int) -> DecompressionError:
    return DecompressionError(f"decompressed body exceeds the limit of {max_size} bytes")


def _inflate_zlib(data: bytes, max_size: int) -> bytes:
    # InflaterInputStream stops at the end of the zlib stream and ignores what follows; a stream
    # that ends early is an EOFException ("Unexpected end of ZLIB input stream").
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, max_size + 1)
    except zlib.error as exc:
        raise DecompressionError(f"zlib: {exc}") from None
    if len(out) > max_size:
        raise _too_large(max_size)
    if not inflater.eof:
        raise DecompressionError("zlib: truncated stream")
    return out


def _first_guess(data: bytes, max_size: int) -> int:
    return min(max_size + 1, max(len(data) * _FIRST_GUESS_RATIO, _MIN_FIRST_GUESS))


def _inflate_lz4(data: bytes, max_size: int) -> bytes:
    try:
        import lz4.frame
    except ImportError:  # pragma: no cover - lz4 is a declared dependency
        raise DecompressionError("LZ4 body, but the 'lz4' package is not installed") from None
    decoder = getattr(_decoders, "lz4", None)
    if decoder is None:
        decoder = _decoders.lz4 = lz4.frame.LZ4FrameDecompressor()
    decoder.reset()  # a previous body may have failed half-way
    parts: list[bytes] = []
    size = 0
    pending = data
    chunk = _first_guess(data, max_size)
    try:
        while True:
            part = decoder.decompress(pending, max_length=min(chunk, max_size + 1 - size))
            pending = b""
            parts.append(part)
            size += len(part)
            if size > max_size:
                raise _too_large(max_size)
            if decoder.eof:
                # LZ4FrameInputStream reads frame after frame until the input ends, so
                # concatenated frames are one body.
                pending = decoder.unused_data or b""
                if not pending:
                    break
                decoder.reset()
            elif decoder.needs_input:  # all input consumed, frame not finished
                raise DecompressionError("lz4: truncated frame")
            else:  # output limit reached, more to come: fetch it with a larger limit
                chunk *= _GROWTH
    except RuntimeError as exc:  # python-lz4 reports frame errors as RuntimeError
        raise DecompressionError(f"lz4: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _inflate_zstd(data: bytes, max_size: int) -> bytes:
    try:
        import zstandard
    except ImportError:  # pragma: no cover - zstandard is a declared dependency
        raise DecompressionError("ZSTD body, but the 'zstandard' package is not installed") from None
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"zstd: {exc}") from None
    if declared > max_size:
        # python-zstandard would allocate the declared size before looking at the blocks.
        raise _too_large(max_size)
    decoder = getattr(_decoders, "zstd", None)
    if decoder is None:
        decoder = _decoders.zstd = zstandard.ZstdDecompressor()
    if declared >= 0:
        try:
            return decoder.decompress(data)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None
    # No content size (what ZstdOutputStream writes): one-shot decompression into a buffer that
    # grows geometrically. A too-small buffer and a truncated frame give the same error, so only
    # the last attempt, at max_size, decides.
    capacity = min(max_size, _first_guess(data, max_size))
    while True:
        try:
            return decoder.decompress(data, max_output_size=capacity)
        except zstandard.ZstdError as exc:
            if capacity >= max_size:
                if "did not decompress full frame" in str(exc):
                    raise DecompressionError(f"zstd: truncated frame or body larger than {max_size} bytes") from None
                raise DecompressionError(f"zstd: {exc}") from None
            capacity = min(max_size, capacity * _GROWTH)
