"""TFRecord framing, exactly as TensorFlow writes it, without TensorFlow.

Each record is::

    uint64 length          (little-endian)
    uint32 masked_crc32c(length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

GZIP files are the whole stream gzip-compressed (TF's ``compression_type="GZIP"``),
ZLIB files the whole stream in a zlib wrapper (``compression_type="ZLIB"``).
Every CRC is checked on read; a mismatch or a short read is an error naming
the file, the record index and its byte offset (in the uncompressed stream).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Protocol

import google_crc32c
import numpy as np

from ...errors import CodecIOError
from ...fs import is_url, open_binary

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "RecordFile",
    "checked_frame",
    "detect_compression",
    "frame",
    "frame_ends",
    "is_gzip",
    "masked_crc",
]

_MASK_DELTA = 0xA282EAD8
_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER = struct.Struct("<QI")
GZIP_MAGIC = b"\x1f\x8b"
_READ_BUFFER = 1 << 20
#: Refuse records claiming more than this (a corrupt length must not allocate terabytes).
MAX_RECORD_BYTES = 2 * 1024**3


def masked_crc(data: bytes | memoryview) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One framed record."""
    length = _LEN.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


def checked_frame(buf: memoryview, path: str, record: int, offset: int, index: str) -> bytes:
    """The data of the one frame a record index lists at ``offset`` (``buf``: its bytes,
    as long as the index says): its length's CRC, that length against the index entry's
    and its data's CRC checked, each an error naming the file, record and byte."""
    where = f"{path}: record {record} at byte {offset}"
    if len(buf) < 16:
        raise CodecIOError(
            f"{index}: record {record} is listed as {len(buf)} bytes at byte "
            f"{offset} of {path}, less than a frame; rebuild the index with "
            "'dstore index'"
        )
    length, crc = _HEADER.unpack_from(buf)
    if masked_crc(bytes(buf[:8])) != crc:
        raise CodecIOError(f"{where}: bad length CRC (not a TFRecord file, or corrupt)")
    if 16 + length != len(buf):
        raise CodecIOError(
            f"{index}: record {record} is listed as {len(buf)} bytes at byte {offset} of "
            f"{path}, where a frame of {16 + length} bytes starts; rebuild the index with "
            "'dstore index'"
        )
    data = bytes(buf[12 : 12 + length])  # the CRC library takes bytes, not views
    if masked_crc(data) != _CRC.unpack_from(buf, 12 + length)[0]:
        raise CodecIOError(f"{where}: bad data CRC (corrupt record)")
    return data


def is_gzip(path: str) -> bool:
    return detect_compression(path) == "gzip"


def _compression_of(head: bytes) -> str | None:
    """The compression of a file from its first 12 bytes: "gzip", "zlib" or None (plain).

    A plain file's first 8 bytes are a length whose masked CRC follows, so a
    valid header wins: a plain record of length 0x9c78 starts with the bytes of
    a zlib header, and only the CRC tells them apart."""
    if len(head) == 12 and masked_crc(head[:8]) == _CRC.unpack_from(head, 8)[0]:
        return None
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    # RFC 1950: deflate method (CM=8) with a window of at most 32 KiB, header a multiple of 31
    if (
        len(head) >= 2
        and head[0] & 0x0F == 8
        and head[0] >> 4 <= 7
        and (head[0] << 8 | head[1]) % 31 == 0
    ):
        return "zlib"
    return None


def detect_compression(path: str) -> str | None:
    """How a TFRecord file is compressed: "gzip", "zlib" or None (plain)."""
    with open_binary(path) as f:
        return _compression_of(f.read(12))


class _Stream(Protocol):
    """What a record reader needs of its (maybe decompressing) stream."""

    def read(self, n: int, /) -> bytes: ...

    def close(self) -> None: ...


class _ZlibReader:
    """``read(n)`` over a zlib stream (TensorFlow's ZLIB TFRecords); concatenated streams follow on."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._z = zlib.decompressobj()
        self._in = b""  # compressed bytes not fed yet
        self._buf = bytearray()  # decompressed bytes not returned yet
        self._open = False  # a stream has begun and not reached its end marker

    def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._in:
                self._in = self._raw.read(1 << 16)
                if not self._in:
                    if self._open:
                        raise EOFError("zlib stream ends before its end marker")
                    break
            if self._z.eof:  # another stream follows the one that ended
                self._z = zlib.decompressobj()
            # max_length bounds memory: a tiny input may inflate a thousandfold
            self._buf += self._z.decompress(self._in, max(n - len(self._buf), 1 << 16))
            self._in = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            self._open = not self._z.eof
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def close(self) -> None:
        self._raw.close()


class RecordFile:
    """Sequential reader of one TFRecord file (plain or GZIP), CRC-checked."""

    def __init__(self, path: str, compression: str | None = None) -> None:
        self.path = path
        try:
            # records are read header then body: a large buffer makes one system call
            # (one wait for the GIL after it) per MiB rather than per record
            raw = (
                open_binary(path) if is_url(path) else open(path, "rb", buffering=_READ_BUFFER)  # noqa: SIM115 - closed by close()
            )
        except OSError as e:
            raise CodecIOError(f"{path}: cannot open: {e.strerror or e}") from None
        if compression is None:
            compression = _compression_of(raw.read(12))
            raw.seek(0)
        self._raw = raw
        self._f: _Stream = raw  # uncompressed: seek and tell go to ``self._raw``, the same file
        if compression == "gzip":
            self._f = gzip.GzipFile(fileobj=raw, mode="rb")
        elif compression == "zlib":
            self._f = _ZlibReader(raw)
        self.compression = compression
        self.compressed = compression in ("gzip", "zlib")
        self.index = 0  # records read so far
        self.offset = 0  # byte offset of the next record in the uncompressed stream
        #: after :meth:`seek_record`: the frame ends its record index lists, and its path
        self._ends: Sequence[int] | np.ndarray | None = None
        self._index_path = ""

    def _read(self, n: int) -> bytes:
        try:
            return self._f.read(n)
        except (OSError, EOFError, zlib.error) as e:
            raise CodecIOError(
                f"{self.path}: record {self.index} at byte {self.offset}: corrupt {self.compression} stream: {e}"
            ) from None

    def _header(self) -> int | None:
        head = self._read(12)
        if not head:
            return None
        where = f"{self.path}: record {self.index} at byte {self.offset}"
        if len(head) < 12:
            raise CodecIOError(f"{where}: truncated record header ({len(head)} of 12 bytes)")
        length, crc = _HEADER.unpack(head)
        if masked_crc(head[:8]) != crc:
            raise CodecIOError(f"{where}: bad length CRC (not a TFRecord file, or corrupt)")
        if length > MAX_RECORD_BYTES:
            raise CodecIOError(f"{where}: record length {length} is implausible")
        ends = self._ends
        if ends is not None and self.index + 1 < len(ends):
            listed = int(ends[self.index + 1]) - self.offset
            if listed != 16 + length:  # every read by an index checks its entry
                raise CodecIOError(
                    f"{self._index_path}: record {self.index} is listed as {listed} bytes at "
                    f"byte {self.offset} of {self.path}, where a frame of {16 + length} bytes "
                    "starts; rebuild the index with 'dstore index'"
                )
        return length

    def header_ok(self) -> bool:
        """Whether the next record's length and its CRC check out (nothing else is read)."""
        try:
            return self._header() is not None
        except CodecIOError:
            return False

    def next_record(self) -> bytes | None:
        """The next record's data, or None at a clean end of file."""
        length = self._header()
        if length is None:
            return None
        # data and its CRC read apart: slicing one read of both would copy a large record
        data = self._read(length)
        crc = self._read(4) if len(data) == length else b""
        where = f"{self.path}: record {self.index} at byte {self.offset}"
        if len(data) + len(crc) < length + 4:
            raise CodecIOError(
                f"{where}: truncated record ({len(data) + len(crc)} of {length + 4} bytes "
                "after the header)"
            )
        if masked_crc(data) != _CRC.unpack(crc)[0]:
            raise CodecIOError(f"{where}: bad data CRC (corrupt record)")
        self.index += 1
        self.offset += 16 + length
        return data

    def skip(self, n: int) -> None:
        """Skip ``n`` records, checking length CRCs (data is seeked over in plain files)."""
        for _ in range(n):
            if self.compressed:
                if self.next_record() is None:
                    raise CodecIOError(f"{self.path}: ended after {self.index} records")
                continue
            length = self._header()
            if length is None:
                raise CodecIOError(f"{self.path}: ended after {self.index} records")
            self._raw.seek(length + 4, 1)
            self.index += 1
            self.offset += 16 + length

    def seek_record(self, index: int, ends: Sequence[int] | np.ndarray, index_path: str) -> None:
        """Go to record ``index`` by the frame ends a record index lists (``ends[i]`` is
        where record ``i`` starts, the last one the end of the file); plain files only.
        Each frame read from here must be exactly its entry's length."""
        if self.compressed:
            raise CodecIOError(f"{self.path}: a {self.compression} file cannot be entered mid-way")
        offset = int(ends[index])
        self._raw.seek(offset)
        self.index, self.offset = index, offset
        self._ends, self._index_path = ends, index_path

    def frame_lengths(self) -> list[int]:
        """Each remaining record's whole frame length (16 + data), every CRC checked:
        an index must only ever point at real records."""
        lengths = []
        while (rec := self.next_record()) is not None:
            lengths.append(16 + len(rec))
        return lengths

    def count(self) -> int:
        """Count the remaining records (frames and length CRCs checked, data skipped)."""
        n = 0
        while True:
            length = self._header()
            if length is None:
                return n
            if self.compressed:
                body = self._read(length + 4)
                got = len(body)
            else:
                pos = self._raw.tell()
                self._raw.seek(length + 4, 1)
                got = min(length + 4, _size(self._raw) - pos)
            if got < length + 4:
                raise CodecIOError(
                    f"{self.path}: record {self.index} at byte {self.offset}: truncated record"
                )
            self.index += 1
            self.offset += 16 + length
            n += 1

    def __iter__(self) -> Iterator[bytes]:
        while (rec := self.next_record()) is not None:
            yield rec

    def close(self) -> None:
        self._f.close()
        self._raw.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def frame_ends(path: str) -> list[int]:
    """Where each frame of the plain TFRecord file at ``path`` starts, then where the file
    ends: its headers walked (each length and its CRC checked, the data seeked over),
    what an index of the file must list."""
    try:
        raw = open_binary(path) if is_url(path) else open(path, "rb", buffering=0)  # noqa: SIM115
    except OSError as e:
        raise CodecIOError(f"{path}: cannot open: {e.strerror or e}") from None
    with raw as f:
        size = _size(f)
        ends = [0]
        while (pos := ends[-1]) < size:
            f.seek(pos)
            head = f.read(12)
            where = f"{path}: record {len(ends) - 1} at byte {pos}"
            if len(head) < 12 or masked_crc(head[:8]) != _CRC.unpack_from(head, 8)[0]:
                raise CodecIOError(f"{where}: not a whole TFRecord frame header")
            end = pos + 16 + _LEN.unpack_from(head)[0]
            if end > size:
                raise CodecIOError(f"{where}: truncated record (the file ends at byte {size})")
            ends.append(end)
    return ends


def _size(f: IO[bytes]) -> int:
    size = getattr(f, "size", None)  # fsspec files know their size
    if isinstance(size, int):
        return size
    return os.fstat(f.fileno()).st_size
