"""The members of an npz archive: where each field is, and stored members read from the plain file."""

from __future__ import annotations

import io
import mmap
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ... import fs
from ...errors import CodecIOError
from ...model import Bytes, Column, Image, Kind, Ragged, String, StringList, Tensor
from ...model.schema import SplitSpec
from .options import _COMMENT_PREFIX, _COPY_CHUNK, _ZIP_ERRORS


@dataclass
class Member:
    key: str
    zip_name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data_offset: int


@dataclass
class Source:
    """Where one field is: a plain member, values + row splits (+ shapes), or rebuilt objects."""

    kind: Kind
    count: int
    main: Member  # the plain member, or the values member
    splits: Member | None = None
    shapes: Member | None = None
    column: Column | None = None  # an object member, already rebuilt


def _plainstores(m: Member, kind: Kind) -> bool:
    """Can one plain member (no row splits) hold a field of ``kind``?"""
    if m.dtype.kind == "U":
        return isinstance(kind, String)
    if m.dtype.kind == "S":
        return isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw")
    dense = isinstance(kind, Tensor) or (isinstance(kind, Image) and kind.is_dense)
    return dense and m.dtype == kind.value_dtype and m.shape[1:] == dense_shape(kind)


def stores(src: Source, kind: Kind) -> bool:
    """Can the stored data of ``src`` hold a field of ``kind`` (as dstore writes it)?"""
    m = src.main
    if src.column is not None:
        return src.kind == kind
    if src.splits is None:
        return _plainstores(m, kind)
    if isinstance(kind, StringList):
        return m.dtype.kind == ("U" if kind.text else "S") and len(m.shape) == 1
    if m.dtype != kind.value_dtype:
        return False
    if isinstance(kind, Ragged):
        return m.shape[1:] == kind.inner_shape and src.shapes is None
    if isinstance(kind, Image) and kind.encoding == "raw":
        return len(m.shape) == 1 and src.shapes is not None
    return isinstance(kind, (String, Bytes, Image)) and len(m.shape) == 1 and src.shapes is None


def crc32_function() -> Callable[[Any, int], int]:
    """zlib's CRC-32, from ISA-L when installed (the tfrecord extra): the same values
    at about 4x the speed, so checking a stored member costs less than reading it."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.crc32
    return isal_zlib.crc32


class StoredMember:
    """A stored (uncompressed) member of a local zip read from the plain file, its
    CRC-32 checked when the read reaches its end, as zipfile checks it.

    zipfile returns every read as a fresh bytes object that the caller then copies
    into its buffer while holding the GIL (about 1 ms per 8 MiB, page faults
    included): on a conversion that stalled the encoder threads waiting for the
    GIL. :meth:`readinto` fills the caller's buffer in the read system call and
    zlib computes the CRC, both without the GIL."""

    def __init__(self, path: str, start: int, info: zipfile.ZipInfo, offset: int = 0) -> None:
        # the file is opened for each read, not held: a split of 40,000 one-record fields
        # reads all its members side by side, and one descriptor each ran out of them
        self._path = path
        self._pos = start + offset
        self._name = info.filename
        self._expected = info.CRC
        self._left = info.file_size - offset
        self._check = offset == 0  # the CRC-32 covers the whole member
        self._crc = 0
        self._crc32 = crc32_function()

    def readinto(self, buf: memoryview) -> int:
        """Up to ``len(buf)`` bytes of the member into ``buf`` (0 at its end)."""
        want = min(len(buf), self._left)
        got = 0
        if want:
            with open(self._path, "rb", buffering=0) as f:
                f.seek(self._pos)
                got = f.readinto(buf[:want]) or 0
        if self._check:
            self._crc = self._crc32(buf[:got], self._crc)
        self._pos += got
        self._left -= got
        if want and got < want:
            self._left = 0  # the file ends inside the member: the caller names the truncation
            return got
        if self._check and self._left == 0 and self._crc != self._expected:
            self._expected = self._crc  # reported once
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self._name!r}")
        return got

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(self._left if n < 0 else min(n, self._left))
        got = self.readinto(memoryview(buf)) if buf else 0
        return bytes(buf[:got])

    def seek(self, offset: int) -> None:
        """Forward from the member's start only (the CRC covers every byte read)."""
        while offset > 0 and self.read(min(offset, _COPY_CHUNK)):
            offset -= min(offset, _COPY_CHUNK)

    def close(self) -> None:
        """Nothing is held open between reads."""


def read_exactly(fp: IO[bytes] | StoredMember, want: int) -> bytes | bytearray | np.ndarray:
    """``fp.read(want)``; a large read fills one buffer a chunk at a time (zipfile's
    read of a deflated member joins what it inflates: twice the size at its peak)."""
    if isinstance(fp, StoredMember):
        # straight into the rows' buffer, a chunk at a time (its CRC while it is cached)
        out = np.empty(want, np.uint8)
        view = memoryview(out.data)
        got = 0
        while got < want and (n := fp.readinto(view[got : got + _COPY_CHUNK])):
            got += n
        return out if got == want else out[:got]
    if want <= _COPY_CHUNK:
        return fp.read(want)
    buf = bytearray(want)
    got = 0
    while got < want:
        chunk = fp.read(min(_COPY_CHUNK, want - got))
        if not chunk:
            return buf[:got]  # short: the caller names the truncation
        buf[got : got + len(chunk)] = chunk
        got += len(chunk)
    return buf


def looks_like_ours(comment: bytes) -> bool:
    """Does a zip comment start as dstore's schema does, or within one byte of it
    (one lost, one changed)? Such a comment is checked, never taken as foreign."""
    p = _COMMENT_PREFIX
    if comment.startswith(p):
        return True
    head = comment[: len(p)]
    if len(head) == len(p) and sum(a != b for a, b in zip(head, p, strict=True)) <= 1:
        return True
    return any(comment.startswith(p[:i] + p[i + 1 :]) for i in range(len(p)))


def first_line(e: BaseException) -> str:
    text = getattr(e, "reason", None) or str(e)  # a JsonLimitError's without its where
    return text.splitlines()[0] if text else type(e).__name__


def dense_shape(kind: Kind) -> tuple[int, ...]:
    if isinstance(kind, Tensor):
        return kind.shape
    return kind.shape or () if isinstance(kind, Image) else ()


class StoredMembers:
    """Reads of members that bypass zipfile where the member is stored (uncompressed):
    mapped ranges, plain-file reads with the CRC-32 kept, positioned opens."""

    path: str
    _zip: zipfile.ZipFile
    _remote: Any

    def _map_stored(self, m: Member, offset: int, length: int) -> np.ndarray | None:
        """``length`` bytes from ``offset`` into a stored member, memory-mapped, or None.

        For reads of part of a member (a training reader's record range): the
        pages come from the page cache as they are touched, with no read
        buffer and no copy. The mapping is private copy-on-write (the arrays
        are writeable, so torch uses them without a copy; a write changes the
        caller's pages only, never the file) and made afresh for each read, so
        a caller's writes are never seen by a later read. Like any partial
        read of a stored member (see :meth:`_open_stored_at`) it does not
        check the member's CRC-32, which covers the whole member: a read of
        the whole member goes through zipfile and keeps that check. The file
        must hold the whole range when it is mapped (else the plain read runs
        and reports the truncation); a file truncated *while* its arrays are
        in use raises SIGBUS, as with ``np.load(mmap_mode="r")``. None for
        remote files, deflated members and empty ranges."""
        info = self._zip.getinfo(m.zip_name)
        if (
            self._remote is not None
            or length <= 0
            or info.compress_type != zipfile.ZIP_STORED
            or offset + length > info.file_size
            or m.dtype.hasobject
        ):
            return None
        try:
            with fs.open_binary(self.path) as f:
                begin = self._stored_data_start(f, m, info) + offset
                fileno = f.fileno()
                if begin + length > os.fstat(fileno).st_size:
                    return None
                base = begin - begin % mmap.ALLOCATIONGRANULARITY
                mm = mmap.mmap(fileno, begin + length - base, access=mmap.ACCESS_COPY, offset=base)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return None  # no file descriptor, or the system would not map it: read instead
        return np.frombuffer(mm, m.dtype, length // m.dtype.itemsize, begin - base)

    def _stored_data_start(self, f: IO[bytes], m: Member, info: zipfile.ZipInfo) -> int:
        """Where a stored member's bytes begin in the file (after its local header)."""
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise CodecIOError(f"{self.path}: member {m.zip_name}: bad local header")
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        return info.header_offset + 30 + name_len + extra_len

    def _open_stored_whole(self, m: Member) -> StoredMember | None:
        """A stored member of a local file read from its start with its CRC-32 checked
        (see :class:`StoredMember`), or None (remote, deflated, encrypted: zipfile)."""
        info = self._zip.getinfo(m.zip_name)
        if (
            self._remote is not None
            or info.compress_type != zipfile.ZIP_STORED
            or info.flag_bits & 1
        ):
            return None
        with fs.open_binary(self.path) as f:
            start = self._stored_data_start(f, m, info)
        return StoredMember(self.path, start, info)

    def _open_stored_at(
        self, m: Member, offset: int, length: int
    ) -> IO[bytes] | StoredMember | None:
        """A plain file positioned ``offset`` bytes into a stored member, or None.

        zipfile (before 3.12) seeks forward by reading and discarding, so a
        worker reading the last shard of a stored member would read the whole
        member first. The member CRC covers the whole member: a range that does
        not start at record 0 is read without it (reads from 0 keep it)."""
        info = self._zip.getinfo(m.zip_name)
        if info.compress_type != zipfile.ZIP_STORED or offset + length > info.file_size:
            return None
        if self._remote is None:  # a local file: opened per read, not held (see StoredMember)
            with fs.open_binary(self.path) as f:
                return StoredMember(self.path, self._stored_data_start(f, m, info), info, offset)
        f = fs.open_binary(self.path)
        try:
            f.seek(self._stored_data_start(f, m, info) + offset)
        except BaseException:
            f.close()
            raise
        return f

    def _seek(
        self, fp: IO[bytes] | StoredMember, m: Member, offset: int, split: str, name: str
    ) -> None:
        try:
            fp.seek(offset)
        except _ZIP_ERRORS as e:
            raise CodecIOError(
                f"{self.path}: split {split!r}, field {name!r} (key {m.key!r}): {e}"
            ) from None

    def _read_rows(
        self,
        fp: IO[bytes] | StoredMember,
        m: Member,
        spec: SplitSpec,
        name: str,
        first: int,
        n: int,
        row_bytes: int,
        count: int,
    ) -> np.ndarray:
        want = n * row_bytes
        try:
            buf = read_exactly(fp, want)
        except _ZIP_ERRORS as e:
            # zipfile checks the CRC-32 when a read reaches the member's end: it covers
            # every record, so the damage may be in any of them, not in the last ones read
            where = (
                f"records 0..{spec.count - 1} (the member's CRC-32 covers them all)"
                if "CRC" in str(e)
                else f"records {first}..{first + n - 1}"
            )
            raise CodecIOError(
                f"{self.path}: split {spec.name!r}, field {name!r} (key {m.key!r}), {where}: {e}"
            ) from None
        if len(buf) != want:
            got = len(buf) // max(1, row_bytes)
            raise CodecIOError(
                f"{self.path}: split {spec.name!r}, field {name!r} (key {m.key!r}) is truncated: "
                f"data ends at record {first + got} of {count}"
            )
        return np.frombuffer(buf, dtype=m.dtype).reshape((n, *m.shape[1:]))

    def _finish(self, fp: IO[bytes] | StoredMember, spec: SplitSpec, name: str) -> None:
        try:
            while fp.read(_COPY_CHUNK):
                pass
        except _ZIP_ERRORS as e:
            raise CodecIOError(f"{self.path}: split {spec.name!r}, field {name!r}: {e}") from None
