"""Single values of a Parquet byte-string column read from their pages, not their row group.

A shuffled read asks for one row of a row group, and pyarrow reads a column chunk
whole: the ten photo tiles of a 1 MiB row group, their page CRCs checked, for one
of them. A column chunk stored plain and uncompressed, without a dictionary (what
dstore writes for image bytes), holds each value in its page as a 4-byte length
and the bytes. So for such a chunk:

* :func:`chunk_pages` walks its page headers once (Thrift's compact protocol,
  parsed by :class:`_Compact`): every page a v1 data page, PLAIN, their sizes
  filling the chunk exactly and their values adding up to the chunk's;
* :func:`page_values` reads the one page that holds a row: its CRC checked when
  the page has one (dstore writes them), its definition levels saying every
  value is there, its values filling it exactly.

Anything else -- a dictionary, compression, a null, repetition, a v2 page, a
header that does not parse -- is ``None``, and the caller reads the row group with
pyarrow, which gives the precise error if there is one. A page that parses but
whose CRC differs is an error naming the file, row group, column and page.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from isal import isal_zlib

from ...errors import CodecIOError

__all__ = ["PageRef", "chunk_pages", "direct_leaf", "page_values"]

#: Parquet's page types and encodings (parquet.thrift)
_DATA_PAGE, _PLAIN, _RLE = 0, 0, 3
#: bytes read for a page header at first (more if it does not parse in them)
_HEAD = 256
#: the most bytes a page header may take (a header with statistics of large values)
_MAX_HEAD = 1 << 16
#: Thrift compact protocol's type ids
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _Truncated(Exception):
    """The header runs past the bytes read: read more, or give up."""


class _Compact:
    """A reader of Thrift's compact protocol over ``data`` (structs as {field id: value})."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Truncated
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("a varint longer than 64 bits")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def value(self, kind: int, depth: int, element: bool = False) -> Any:
        if depth > 8:
            raise ValueError("values nested too deep")
        if kind in (_TRUE, _FALSE) and element:  # a bool in a list is a byte of its own
            return self.byte() == _TRUE
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            self.skip(8)
            return float(struct.unpack_from("<d", self.data, self.pos - 8)[0])
        if kind == _BINARY:
            n = self.varint()
            start = self.pos
            self.skip(n)
            return self.data[start : self.pos]
        if kind in (_LIST, _SET):
            head = self.byte()
            n, item = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            return [self.value(item, depth + 1, element=True) for _ in range(n)]
        if kind == _MAP:
            n = self.varint()
            types = self.byte() if n else 0
            return [
                (
                    self.value(types >> 4, depth + 1, element=True),
                    self.value(types & 0x0F, depth + 1, element=True),
                )
                for _ in range(n)
            ]
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise ValueError(f"unknown Thrift type {kind}")

    def skip(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise _Truncated
        self.pos += n

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > 8:
            raise ValueError("structs nested too deep")
        out: dict[int, Any] = {}
        field = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            delta, kind = head >> 4, head & 0x0F
            field = field + delta if delta else self.zigzag()
            out[field] = self.value(kind, depth)


@dataclass(frozen=True)
class PageRef:
    """One data page of a column chunk: where its values start, how large they are,
    its CRC (None when it has none), how many values (rows) it holds."""

    body: int
    size: int
    crc: int | None
    values: int


def _page_header(fd: int, offset: int, end: int) -> tuple[dict[int, Any], int] | None:
    """The page header at ``offset`` and its length, or None if it does not parse."""
    want = _HEAD
    while True:
        head = os.pread(fd, min(want, end - offset), offset)
        parser = _Compact(head)
        try:
            return parser.struct(), parser.pos
        except _Truncated:
            if want >= _MAX_HEAD or len(head) < want:
                return None
            want *= 4
        except ValueError:
            return None


def _i32(value: Any) -> bool:
    """Whether a header field holds what Parquet declares it as: an i32, not a bool (a
    Python int too), a byte string or a list that a forged header may put there."""
    return type(value) is int and -(1 << 31) <= value < 1 << 31


def _page_ref(header: dict[int, Any], at: int, length: int) -> PageRef | None:
    """The :class:`PageRef` of a parsed page header at ``at`` (``length`` bytes), or None
    unless it is a v1 data page of PLAIN values, uncompressed, every field it uses of
    its declared type and in range."""
    data, size, crc = header.get(5), header.get(3, -1), header.get(4, 0)
    if header.get(1) != _DATA_PAGE or not isinstance(data, dict) or not _i32(crc):
        return None
    n = data.get(1, -1)
    if not (_i32(size) and _i32(n)):
        return None
    size, n = int(size), int(n)
    if n < 0 or size < 0 or header.get(2) != size:
        return None  # compressed after all, or a count that makes no sense
    if data.get(2) != _PLAIN or data.get(3, _RLE) != _RLE:
        return None
    return PageRef(at + length, size, crc & 0xFFFFFFFF if 4 in header else None, n)


def chunk_pages(fd: int, chunk: Any) -> list[PageRef] | None:
    """The data pages of column chunk ``chunk`` (pyarrow's ``ColumnChunkMetaData``) of the
    file open as ``fd``, or None unless it lies inside the file and is plain,
    uncompressed and undictionaried with v1 data pages that fill it exactly and hold
    its values."""
    if (
        chunk.compression != "UNCOMPRESSED"
        or chunk.has_dictionary_page
        or chunk.physical_type != "BYTE_ARRAY"
        or not set(chunk.encodings) <= {"PLAIN", "RLE"}
    ):
        return None
    pos, end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
    if not 0 <= pos < end <= os.fstat(fd).st_size:  # a footer's range: pyarrow refuses it
        return None
    pages: list[PageRef] = []
    values = 0
    while pos < end:
        parsed = _page_header(fd, pos, end)
        page = None if parsed is None else _page_ref(parsed[0], pos, parsed[1])
        if page is None or page.body + page.size > end:
            return None
        pages.append(page)
        values += page.values
        pos = page.body + page.size
    if values != chunk.num_values:
        return None
    return pages


def _levels_all(data: memoryview, count: int, level: int) -> int | None:
    """The byte length of a v1 page's definition levels (a 4-byte length, then RLE /
    bit-packed runs of ``level``'s bit width) if all ``count`` levels are ``level``,
    else None."""
    if len(data) < 4:
        return None
    (n,) = struct.unpack_from("<I", data, 0)
    if 4 + n > len(data):
        return None
    runs, width, seen, pos = data[4 : 4 + n], level.bit_length(), 0, 0
    nbytes = (width + 7) // 8
    while seen < count and pos < len(runs):
        parser = _Compact(bytes(runs[pos : pos + 10]))
        try:
            head = parser.varint()
        except (_Truncated, ValueError):
            return None
        pos += parser.pos
        if head & 1:  # bit-packed: (head >> 1) groups of 8 values
            groups = head >> 1
            packed = np.frombuffer(runs[pos : pos + groups * width], np.uint8)
            if len(packed) != groups * width:
                return None
            bits = np.unpackbits(packed, bitorder="little")
            vals = bits.reshape(-1, width) @ (1 << np.arange(width))
            take = min(count - seen, groups * 8)
            if (vals[:take] != level).any():
                return None
            seen += take
            pos += groups * width
        else:  # a run: (head >> 1) copies of one value
            if pos + nbytes > len(runs):
                return None
            if int.from_bytes(runs[pos : pos + nbytes], "little") != level:
                return None
            seen += head >> 1
            pos += nbytes
    return 4 + n if seen >= count else None


def page_values(
    fd: int, page: PageRef, max_definition: int, wanted: list[int], where: str
) -> list[memoryview] | None:
    """Values ``wanted`` (indices within ``page``) of a page :func:`chunk_pages` found,
    or None if the page does not read as such (a null among its values); a page whose
    CRC differs from its bytes is an error naming ``where``."""
    data = os.pread(fd, page.size, page.body)
    if len(data) != page.size:
        raise CodecIOError(f"{where}: the file ends inside the page")
    if page.crc is not None and isal_zlib.crc32(data) != page.crc:
        raise CodecIOError(f"{where}: the page's CRC differs from its bytes (a damaged file)")
    view = memoryview(data)
    pos = 0
    if max_definition:
        used = _levels_all(view, page.values, max_definition)
        if used is None:
            return None
        pos = used
    starts = []
    for _ in range(page.values):
        if pos + 4 > len(data):
            return None
        (n,) = struct.unpack_from("<I", data, pos)
        starts.append((pos + 4, n))
        pos += 4 + n
    if pos != len(data):
        return None
    return [view[s : s + n] for s, n in (starts[i] for i in wanted)]  # no copy of each


def direct_leaf(meta: Any, leaf: int) -> bool:
    """Whether leaf column ``leaf`` of the file could be read by page: byte strings that
    repeat nowhere (one value or null per row)."""
    column = meta.schema.column(leaf)
    return column.physical_type == "BYTE_ARRAY" and column.max_repetition_level == 0
