"""Reading npz archives: member headers, dstore's schema in the zip comment, streamed rows."""

from __future__ import annotations

import io
import math
import mmap
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ... import fs
from ...abc import Reader
from ...bounded_json import JsonLimitError, load_json
from ...errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ...model import (
    Bytes,
    Column,
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    Tensor,
    VarColumn,
    infer_column,
    slice_column,
)
from ...model.keys import key_for, schema_from_fields
from ...model.names import shown
from ...model.schema import MAX_EMPTY_RECORDS, Batch, FieldSpec, Schema, SplitSpec, check_dtype
from ...model.strings import (
    fixed_to_column,
)
from .options import _COMMENT_PREFIX, _COPY_CHUNK, _ROW_SPLITS, _SHAPES, _VALUES, _ZIP_ERRORS
from .safe_pickle import load_object_array

#: Bytes an object member's pickle may inflate to. Such a member (``np.savez`` of
#: a list of arrays) is rebuilt whole in memory, as ``np.load`` does; 1 GiB is far
#: beyond the ragged labels people save this way, and stops a deflate bomb before
#: a byte is inflated. Raise it here for larger object members (or store them as
#: ragged ``K.values`` + ``K.row_splits``, which stream).
MAX_OBJECT_BYTES = 2**30


@dataclass
class _Member:
    key: str
    zip_name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data_offset: int


@dataclass
class _Source:
    """Where one field is: a plain member, values + row splits (+ shapes), or rebuilt objects."""

    kind: Kind
    count: int
    main: _Member  # the plain member, or the values member
    splits: _Member | None = None
    shapes: _Member | None = None
    column: Column | None = None  # an object member, already rebuilt


def _plain_stores(m: _Member, kind: Kind) -> bool:
    """Can one plain member (no row splits) hold a field of ``kind``?"""
    if m.dtype.kind == "U":
        return isinstance(kind, String)
    if m.dtype.kind == "S":
        return isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw")
    dense = isinstance(kind, Tensor) or (isinstance(kind, Image) and kind.is_dense)
    return dense and m.dtype == kind.value_dtype and m.shape[1:] == _dense_shape(kind)


def _stores(src: _Source, kind: Kind) -> bool:
    """Can the stored data of ``src`` hold a field of ``kind`` (as dstore writes it)?"""
    m = src.main
    if src.column is not None:
        return src.kind == kind
    if src.splits is None:
        return _plain_stores(m, kind)
    if isinstance(kind, StringList):
        return m.dtype.kind == ("U" if kind.text else "S") and len(m.shape) == 1
    if m.dtype != kind.value_dtype:
        return False
    if isinstance(kind, Ragged):
        return m.shape[1:] == kind.inner_shape and src.shapes is None
    if isinstance(kind, Image) and kind.encoding == "raw":
        return len(m.shape) == 1 and src.shapes is not None
    return isinstance(kind, (String, Bytes, Image)) and len(m.shape) == 1 and src.shapes is None


def _crc32_function() -> Callable[[Any, int], int]:
    """zlib's CRC-32, from ISA-L when installed (the tfrecord extra): the same values
    at about 4x the speed, so checking a stored member costs less than reading it."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.crc32
    return isal_zlib.crc32


class _StoredMember:
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
        self._crc32 = _crc32_function()

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


def _read_exactly(fp: IO[bytes] | _StoredMember, want: int) -> bytes | bytearray | np.ndarray:
    """``fp.read(want)``; a large read fills one buffer a chunk at a time (zipfile's
    read of a deflated member joins what it inflates: twice the size at its peak)."""
    if isinstance(fp, _StoredMember):
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


def _looks_like_ours(comment: bytes) -> bool:
    """Does a zip comment start as dstore's schema does, or within one byte of it
    (one lost, one changed)? Such a comment is checked, never taken as foreign."""
    p = _COMMENT_PREFIX
    if comment.startswith(p):
        return True
    head = comment[: len(p)]
    if len(head) == len(p) and sum(a != b for a, b in zip(head, p, strict=True)) <= 1:
        return True
    return any(comment.startswith(p[:i] + p[i + 1 :]) for i in range(len(p)))


def _first_line(e: BaseException) -> str:
    text = getattr(e, "reason", None) or str(e)  # a JsonLimitError's without its where
    return text.splitlines()[0] if text else type(e).__name__


def _dense_shape(kind: Kind) -> tuple[int, ...]:
    if isinstance(kind, Tensor):
        return kind.shape
    return kind.shape or () if isinstance(kind, Image) else ()


class NpzReader(Reader):
    def __init__(self, path: str, drop: tuple[str, ...] = ()) -> None:
        self.path = path
        self._remote = None
        try:
            self._remote = fs.open_binary(path) if fs.is_url(path) else None
            self._zip = zipfile.ZipFile(self._remote or path)
        except FileNotFoundError:
            raise CodecIOError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise CodecIOError(f"{path}: is a directory, not an npz file") from None
        except _ZIP_ERRORS as e:
            if self._remote is not None:
                self._remote.close()
            raise CodecIOError(f"{path}: not a valid npz (zip) file: {e}") from None
        try:
            self._check_directory()
            self._scalars: dict[str, str] = {}  # 0-d members: refused unless dropped
            self._members = self._read_headers()
            self._drop(drop)
            if self._scalars:
                key = next(iter(self._scalars))
                raise SchemaError(
                    f"{path}: key {key!r} is a 0-d array; every field needs a record axis "
                    f"(leave it out with drop={key!r})"
                )
            self._sources = self._group_members()
            fields = {key: (src.kind, src.count) for key, src in self._sources.items()}
            inferred = schema_from_fields(fields, path)
            stored = self._stored_schema(inferred)
            self.schema = stored or inferred
            # the storage of each field: where dstore put it (escaped names), else the key read
            self._keys = {
                (split.name, name): key_for(split.name, spec) if stored else str(spec.key)
                for split in self.schema.splits.values()
                for name, spec in split.fields.items()
            }
            # Deflated members only stream; stored ones can be entered anywhere.
            self.random_access = all(
                self._zip.getinfo(m.zip_name).compress_type == zipfile.ZIP_STORED
                for m in self._members.values()
            )
        except BaseException:
            self.close()
            raise

    def _check_directory(self) -> None:
        """The end record's member count must match what zipfile parsed.

        zipfile stops reading the central directory where an entry is
        corrupt and silently returns fewer members: that would drop fields.
        """
        with fs.open_binary(self.path) as f:
            # private but stable since Python 2, no public equivalent (so not in typeshed)
            end = zipfile._EndRecData(f)  # type: ignore[attr-defined]
        if end is None:
            raise CodecIOError(
                f"{self.path}: not a valid npz (zip) file: no end of central directory"
            )
        declared = end[zipfile._ECD_ENTRIES_TOTAL]  # type: ignore[attr-defined]
        found = len(self._zip.infolist())
        if declared != found:
            raise CodecIOError(
                f"{self.path}: corrupt zip directory: it declares {declared} members, {found} are readable"
            )
        # zipfile keeps every entry in infolist() but only the last of a name in
        # its name map: one of two same-named members would be dropped unseen
        seen: set[str] = set()
        for info in self._zip.infolist():
            if info.filename in seen:
                raise CodecIOError(
                    f"{self.path}: two zip members are named {info.filename!r}; "
                    "which one holds the data is ambiguous"
                )
            seen.add(info.filename)

    def _read_headers(self) -> dict[str, _Member]:
        members = {}
        for info in self._zip.infolist():
            if info.filename.endswith("/"):  # is_dir() raises IndexError on an empty name
                continue
            if not info.filename.endswith(".npy"):
                raise SchemaError(
                    f"{self.path}: member {info.filename!r} is not a .npy array "
                    "(an npz holds only .npy members)"
                )
            key = info.filename[: -len(".npy")]
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                # numpy writes only these two; zipfile's bzip2 and lzma readers
                # inflate a whole input block per call with no output limit, so a
                # few kB of bzip2 unpacks gigabytes before the first header byte
                raise CodecIOError(
                    f"{self.path}: key {key!r}: compressed with zip method {info.compress_type}; "
                    "npz members are stored or deflated"
                )
            try:
                with self._zip.open(info) as fp:
                    version = np.lib.format.read_magic(fp)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
                    else:
                        raise UnsupportedDtypeError(
                            f"{self.path}: key {key!r}: .npy format {version} "
                            "(structured dtypes) is not supported"
                        )
                    offset = fp.tell()
            except (UnsupportedDtypeError, SchemaError):
                raise
            except Exception as e:  # noqa: BLE001 - numpy parses the header with ast: any error type
                raise CodecIOError(
                    f"{self.path}: key {key!r}: unreadable .npy header: {type(e).__name__}: {e}"
                ) from None
            if dtype.kind not in "USO":
                check_dtype(dtype, f"{self.path}: key {key!r}")
            if len(shape) == 0:
                # np.savez(..., n=np.array(5)) beside the data is common: --drop may
                # leave it out, so it is refused after --drop (in __init__), not here
                self._scalars[key] = info.filename
                continue
            self._check_size(key, info, dtype, tuple(shape), offset)
            members[key] = _Member(key, info.filename, dtype, tuple(shape), fortran, offset)
        return members

    def _check_size(
        self, key: str, info: zipfile.ZipInfo, dtype: np.dtype, shape: tuple[int, ...], offset: int
    ) -> None:
        """The header's shape must be what the member holds.

        A header is a claim: ``(2**62, 2**62)`` overflows any fixed-width
        product, and records of zero bytes (``(10**18, 0)``, or ``S0``)
        cost nothing to claim, yet every reader and writer walks the record
        axis. So the byte count is computed exactly and must fit in the
        member, and a record axis of empty records is bounded."""
        where = f"{self.path}: key {key!r}"
        if dtype.kind != "O":
            if dtype.itemsize == 0:
                raise CodecIOError(f"{where}: dtype {dtype} has zero bytes per element")
            claimed = math.prod(shape) * dtype.itemsize
            held = max(0, info.file_size - offset)
            if claimed > held:
                record = math.prod(shape[1:]) * dtype.itemsize
                raise CodecIOError(
                    f"{where} is truncated: data ends at record {held // max(1, record)} of "
                    f"{shape[0]} (the .npy header claims shape {shape} of {dtype}, "
                    f"{claimed:,} bytes; the member holds {held:,})"
                )
        if math.prod(shape[1:]) == 0 and shape[0] > MAX_EMPTY_RECORDS:
            raise CodecIOError(
                f"{where}: {shape[0]:,} records of zero elements each (shape {shape}); "
                f"more than {MAX_EMPTY_RECORDS:,} empty records is not data"
            )

    def _drop(self, keys: tuple[str, ...]) -> None:
        """Leave out the keys asked for (with a ragged field's members), and say so."""
        notes = []
        self._dropped: set[str] = set()
        for key in keys:
            if self._scalars.pop(key, None) is not None:
                self._dropped.add(key)
                notes.append(f"{self.path}: key {key!r} () left out (drop={shown(key)})")
                continue
            found = [
                k
                for k in self._members
                if k == key or k in (key + s for s in (_VALUES, _ROW_SPLITS, _SHAPES))
            ]
            if not found:
                held = ", ".join(map(repr, [*self._members, *self._scalars]))
                raise SchemaError(f"{self.path}: drop={key!r}: no such key (keys: {held})")
            self._dropped.add(key)
            for k in found:
                m = self._members.pop(k)
                notes.append(f"{self.path}: key {k!r} {m.shape} left out (drop={shown(key)})")
        self.notes = notes

    def _group_members(self) -> dict[str, _Source]:
        """One source per field: a plain member, or ``K.values`` + ``K.row_splits`` (+ ``K.shapes``)."""
        sources: dict[str, _Source] = {}
        grouped: set[str] = set()
        for key in self._members:
            if (
                not key.endswith(_ROW_SPLITS)
                or key[: -len(_ROW_SPLITS)] + _VALUES not in self._members
            ):
                continue
            base = key[: -len(_ROW_SPLITS)]
            source = self._ragged_source(base, key)
            if source is None:
                continue
            sources[base] = source
            grouped.update(k for k in (base + _VALUES, key, base + _SHAPES) if k in self._members)
        for key, m in self._members.items():
            if key not in grouped:
                sources[key] = self._plain_source(key, m)
        return sources

    def _ragged_source(self, base: str, key: str) -> _Source | None:
        """``base.values`` + ``base.row_splits`` (``key``), + ``base.shapes``, as one field;
        None when the members are not dstore's layout (then they stay plain fields)."""
        values, splits = self._members[base + _VALUES], self._members[key]
        shapes = self._members.get(base + _SHAPES)
        where = f"{self.path}: key {base!r}"
        if (
            splits.dtype.kind not in "iu"
            or len(splits.shape) != 1
            or splits.shape[0] < 1
            or values.dtype.kind == "O"
            or (values.dtype.kind in "US" and len(values.shape) != 1)
        ):
            # not dstore's values + row splits layout: foreign members that merely
            # share its names stay plain fields (a dstore schema listing them as
            # one ragged field then disagrees with the members, an error)
            return None
        count = splits.shape[0] - 1
        if shapes is not None and (len(shapes.shape) != 2 or shapes.shape[0] != count):
            raise CodecIOError(f"{where}: {base + _SHAPES!r} must have one row per record")
        kind: Kind = (
            StringList(values.dtype.kind == "U")
            if values.dtype.kind in "US"
            else Ragged(values.dtype, values.shape[1:])
        )
        if shapes is not None and values.dtype.kind == "u" and values.dtype.itemsize in (1, 2):
            # 2-d records are greyscale; for 3-d ones the channels are in each record's shape
            kind = Image(values.dtype, 0 if shapes.shape[1] == 2 else None)
        return _Source(kind, count, values, splits, shapes)

    def _plain_source(self, key: str, m: _Member) -> _Source:
        """A member that is a field on its own: strings, bytes, objects or a tensor."""
        where = f"{self.path}: key {key!r}"
        if m.dtype.kind in "US":
            if len(m.shape) != 1:
                raise UnsupportedDtypeError(
                    f"{where}: string arrays need exactly one (record) axis, got {m.shape}"
                )
            return _Source(String() if m.dtype.kind == "U" else Bytes(), m.shape[0], m)
        if m.dtype.kind == "O":
            if len(m.shape) != 1:
                raise UnsupportedDtypeError(
                    f"{where}: object arrays need exactly one (record) axis, got {m.shape}"
                )
            kind, col = infer_column(self._load_objects(m), where)
            return _Source(kind, len(col), m, column=col)
        return _Source(Tensor(m.dtype, m.shape[1:]), m.shape[0], m)

    def _load_objects(self, m: _Member) -> list[object]:
        """An object member, through the restricted unpickler only (plain arrays and strings).

        The pickle is streamed into the unpickler, never read whole, and its
        inflated size (the zip directory's, which zipfile never reads past) is
        bounded first: a 1.5 MB member of deflated zeros inflates to 1.5 GB."""
        where = f"{self.path}: key {m.key!r}"
        info = self._zip.getinfo(m.zip_name)
        size = max(0, info.file_size - m.data_offset)
        if size > MAX_OBJECT_BYTES:
            raise CodecIOError(
                f"{where}: the pickled object array inflates to {size:,} bytes "
                f"({info.compress_size:,} in the file); object members are rebuilt in memory "
                f"and the limit is {MAX_OBJECT_BYTES:,} "
                "(dstore.codecs.npz.reader.MAX_OBJECT_BYTES)"
            )
        try:
            with self._zip.open(info) as fp:
                fp.seek(m.data_offset)
                # buffered: the unpickler reads a few bytes per opcode
                buffered = io.BufferedReader(fp, 1 << 20)  # type: ignore[type-var]  # ZipExtFile is a RawIOBase in all but name
                arr = load_object_array(buffered, where, size)
                while buffered.read(_COPY_CHUNK):  # to the member's end: zipfile checks its CRC
                    pass
                buffered.detach()  # fp is closed by its own ``with``
        except _ZIP_ERRORS as e:
            raise CodecIOError(f"{where}: {e}") from None
        if arr.shape != m.shape:
            raise CodecIOError(
                f"{where}: the pickled array is {arr.shape}, its header says {m.shape}"
            )
        return [np.asarray(v) if isinstance(v, (list, tuple)) else v for v in arr.tolist()]

    def _stored_schema(self, inferred: Schema) -> Schema | None:
        """The schema from the zip comment, None if there is none.

        A comment that looks like dstore's but does not parse, or disagrees
        with the members, is an error: read as a foreign file, int8 codes
        would be delivered as data and attributes lost without a word."""
        comment = self._zip.comment
        if not _looks_like_ours(comment):
            return None
        where = f"{self.path}: the dstore schema in the zip comment"
        try:
            if not comment.startswith(_COMMENT_PREFIX):
                raise ValueError(f"it starts {comment[: len(_COMMENT_PREFIX)]!r}")
            stored = Schema.from_json(load_json(comment[len(_COMMENT_PREFIX) :], where))
        except (ValueError, SchemaError, RecursionError, JsonLimitError) as e:
            raise SchemaError(f"{where} is damaged ({_first_line(e)})") from None
        listed: set[str] = set()
        for split in stored.splits.values():
            for name, spec in list(split.fields.items()):
                key = key_for(split.name, spec)
                if key in self._dropped:
                    del split.fields[name]  # --drop: the field goes with its members
                    continue
                listed.add(key)
                self._check_stored_field(where, split, spec, key)
        unlisted = [k for k in self._sources if k not in listed]
        if unlisted:
            raise SchemaError(f"{where} does not list key {unlisted[0]!r}, which the npz holds")
        return stored

    def _check_stored_field(self, where: str, split: SplitSpec, spec: FieldSpec, key: str) -> None:
        """One field of the stored schema must be what its members hold."""
        field = f"split {split.name!r}, field {spec.name!r}"
        src = self._sources.get(key)
        if src is None:
            raise SchemaError(f"{where} lists {field} (key {key!r}), which the npz does not hold")
        if src.count != split.count:
            raise SchemaError(
                f"{where} gives {field} {split.count} records; key {key!r} holds {src.count}"
            )
        if not _stores(src, spec.kind):
            m = src.main
            raise SchemaError(
                f"{where} says {field} is {spec.kind.describe()}; key {key!r} holds "
                f"{m.dtype} {m.shape}"
            )

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        streams = [self._field_batches(spec, n, start, stop, rows) for n in names]
        for cols in zip(*streams, strict=True):
            yield dict(zip(names, cols, strict=True))

    def _field_batches(
        self, spec: SplitSpec, name: str, start: int, stop: int, rows: int
    ) -> Iterator[Column]:
        """Batches of one field, records ``start:stop``, ``rows`` at a time."""
        src = self._sources[self._keys[(spec.name, name)]]
        where = f"{self.path}: split {spec.name!r}, field {name!r} (key {src.main.key!r})"
        if src.column is not None:
            for pos in range(start, stop, rows):
                yield slice_column(src.column, pos, min(stop, pos + rows))
            return
        if src.splits is None:
            yield from self._plain_batches(src, spec, name, start, stop, rows, where)
            return
        offsets = self._row_splits(src, spec, name, where)
        total = src.main.shape[0]
        shapes = (
            None
            if src.shapes is None
            else self._read_whole(src.shapes, spec, name).astype(np.int64)
        )
        bounds = [(pos, min(stop, pos + rows)) for pos in range(start, stop, rows)]
        # the values member read as one range, cut at the records' offsets
        values = self._member_rows(
            src.main,
            spec,
            name,
            int(offsets[start]),
            int(offsets[stop]),
            0,
            cuts=[int(offsets[b] - offsets[a]) for a, b in bounds],
            total=total,
        )
        kind = spec.fields[name].kind
        for (a, b), vals in zip(bounds, values, strict=True):
            col = VarColumn(
                fixed_to_column(vals, where) if isinstance(kind, StringList) else vals,
                offsets[a : b + 1] - offsets[a],
                None if shapes is None else shapes[a:b],
            )
            col.check(where)
            if isinstance(kind, String) or (isinstance(kind, StringList) and kind.text):
                col.check_utf8(where)
            yield col

    def _plain_batches(
        self, src: _Source, spec: SplitSpec, name: str, start: int, stop: int, rows: int, where: str
    ) -> Iterator[Column]:
        """Batches of a field stored as one plain member (fixed-width strings as text)."""
        dense = self._member_rows(src.main, spec, name, start, stop, rows)
        if src.main.dtype.kind not in "US":
            yield from dense
            return
        for arr in dense:
            col = fixed_to_column(arr, where)
            if isinstance(spec.fields[name].kind, String):
                col.check_utf8(where)
            yield col
            del arr, col  # not kept while the next batch is read

    def _row_splits(self, src: _Source, spec: SplitSpec, name: str, where: str) -> np.ndarray:
        """The record offsets of a values + row splits field, checked against its values."""
        assert src.splits is not None
        offsets = self._read_whole(src.splits, spec, name).astype(np.int64)
        total = src.main.shape[0]
        if (
            offsets[0] != 0
            or offsets[-1] != total
            or (len(offsets) > 1 and (np.diff(offsets) < 0).any())
        ):
            bad = int(np.argmax(np.diff(offsets) < 0)) if (np.diff(offsets) < 0).any() else 0
            raise CodecIOError(
                f"{where}: row splits do not describe the {total} values (record {bad}; they must start "
                "at 0, never decrease and end at the number of values)"
            )
        return offsets

    def _read_whole(self, m: _Member, spec: SplitSpec, name: str) -> np.ndarray:
        count = m.shape[0]
        return next(
            iter(self._member_rows(m, spec, name, 0, count, max(count, 1))),
            np.zeros(m.shape, m.dtype),
        )

    def _member_rows(
        self,
        m: _Member,
        spec: SplitSpec,
        name: str,
        start: int,
        stop: int,
        rows: int,
        cuts: list[int] | None = None,
        total: int | None = None,
    ) -> Iterator[np.ndarray]:
        """Rows ``start:stop`` of one member in pieces of ``rows`` (or of the sizes ``cuts``)."""
        sizes = (
            cuts if cuts is not None else [min(rows, stop - p) for p in range(start, stop, rows)]
        )
        count = m.shape[0] if total is None else total
        record_shape = m.shape[1:]
        row_bytes = int(np.prod(record_shape, dtype=np.int64)) * m.dtype.itemsize
        if m.fortran and len(m.shape) > 1:
            # Fortran order stores columns first: rows are not contiguous, so
            # these (rare) members are read whole.
            whole = self._fortran_whole(m, spec, name)
            pos = start
            for n in sizes:
                yield np.ascontiguousarray(whole[pos : pos + n])
                pos += n
            return
        skip = m.data_offset + start * row_bytes
        entire = start == 0 and stop == count  # read whole through zipfile: CRC-checked
        mapped = None if entire else self._map_stored(m, skip, (stop - start) * row_bytes)
        if mapped is not None:
            # the whole range maps (no page is read yet); each piece gets a mapping of its
            # own, so the pages read leave this process's memory with their batch
            del mapped
            pos = start
            for n in sizes:
                piece = self._map_stored(m, m.data_offset + pos * row_bytes, n * row_bytes)
                if piece is None:  # the file changed since: a whole read names the damage
                    raise CodecIOError(
                        f"{self.path}: split {spec.name!r}, field {name!r}: "
                        f"records {pos}:{pos + n} could no longer be read"
                    )
                yield piece.reshape((n, *record_shape))
                pos += n
            return
        fp: IO[bytes] | _StoredMember | None = (
            self._open_stored_at(m, skip, (stop - start) * row_bytes) if start else None
        )
        in_zip = fp is None
        if fp is None:
            fp = self._open_stored_whole(m) or self._zip.open(m.zip_name)
            self._seek(fp, m, skip, spec.name, name)
        try:
            pos = start
            for n in sizes:
                yield self._read_rows(fp, m, spec, name, pos, n, row_bytes, count)
                pos += n
            if stop == count and in_zip:
                # Reading past the end makes zipfile check the member's CRC (a plain
                # file would read on through the members after this one, unchecked).
                self._finish(fp, spec, name)
        finally:
            fp.close()

    def _map_stored(self, m: _Member, offset: int, length: int) -> np.ndarray | None:
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

    def _stored_data_start(self, f: IO[bytes], m: _Member, info: zipfile.ZipInfo) -> int:
        """Where a stored member's bytes begin in the file (after its local header)."""
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise CodecIOError(f"{self.path}: member {m.zip_name}: bad local header")
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        return info.header_offset + 30 + name_len + extra_len

    def _open_stored_whole(self, m: _Member) -> _StoredMember | None:
        """A stored member of a local file read from its start with its CRC-32 checked
        (see :class:`_StoredMember`), or None (remote, deflated, encrypted: zipfile)."""
        info = self._zip.getinfo(m.zip_name)
        if (
            self._remote is not None
            or info.compress_type != zipfile.ZIP_STORED
            or info.flag_bits & 1
        ):
            return None
        with fs.open_binary(self.path) as f:
            start = self._stored_data_start(f, m, info)
        return _StoredMember(self.path, start, info)

    def _open_stored_at(
        self, m: _Member, offset: int, length: int
    ) -> IO[bytes] | _StoredMember | None:
        """A plain file positioned ``offset`` bytes into a stored member, or None.

        zipfile (before 3.12) seeks forward by reading and discarding, so a
        worker reading the last shard of a stored member would read the whole
        member first. The member CRC covers the whole member: a range that does
        not start at record 0 is read without it (reads from 0 keep it)."""
        info = self._zip.getinfo(m.zip_name)
        if info.compress_type != zipfile.ZIP_STORED or offset + length > info.file_size:
            return None
        if self._remote is None:  # a local file: opened per read, not held (see _StoredMember)
            with fs.open_binary(self.path) as f:
                return _StoredMember(self.path, self._stored_data_start(f, m, info), info, offset)
        f = fs.open_binary(self.path)
        try:
            f.seek(self._stored_data_start(f, m, info) + offset)
        except BaseException:
            f.close()
            raise
        return f

    def _seek(
        self, fp: IO[bytes] | _StoredMember, m: _Member, offset: int, split: str, name: str
    ) -> None:
        try:
            fp.seek(offset)
        except _ZIP_ERRORS as e:
            raise CodecIOError(
                f"{self.path}: split {split!r}, field {name!r} (key {m.key!r}): {e}"
            ) from None

    def _read_rows(
        self,
        fp: IO[bytes] | _StoredMember,
        m: _Member,
        spec: SplitSpec,
        name: str,
        first: int,
        n: int,
        row_bytes: int,
        count: int,
    ) -> np.ndarray:
        want = n * row_bytes
        try:
            buf = _read_exactly(fp, want)
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

    def check_ranges(self, split: str) -> None:
        """Every stored member of ``split``'s fields read through once and its CRC-32
        checked (ranges are read mapped, unchecked: :meth:`_map_stored`). A deflated
        member is only ever read whole, its CRC-32 checked then."""
        spec = self.schema.splits[split]
        buf = memoryview(bytearray(_COPY_CHUNK))
        for name in spec.fields:
            src = self._sources[self._keys[(split, name)]]
            for m in (src.main, src.splits, src.shapes):
                fp = None if m is None or src.column is not None else self._open_stored_whole(m)
                try:
                    while fp is not None and fp.readinto(buf):
                        pass
                except _ZIP_ERRORS as e:
                    raise CodecIOError(
                        f"{self.path}: split {split!r}, field {name!r}: {e}"
                    ) from None

    def _finish(self, fp: IO[bytes] | _StoredMember, spec: SplitSpec, name: str) -> None:
        try:
            while fp.read(_COPY_CHUNK):
                pass
        except _ZIP_ERRORS as e:
            raise CodecIOError(f"{self.path}: split {spec.name!r}, field {name!r}: {e}") from None

    def _fortran_whole(self, m: _Member, spec: SplitSpec, name: str) -> np.ndarray:
        with self._zip.open(m.zip_name) as fp:
            self._seek(fp, m, m.data_offset, spec.name, name)
            count = int(np.prod(m.shape))
            buf = fp.read(count * m.dtype.itemsize)
            if len(buf) != count * m.dtype.itemsize:
                raise CodecIOError(f"{self.path}: key {m.key!r} is truncated")
            self._finish(fp, spec, name)
        return np.frombuffer(buf, m.dtype).reshape(m.shape, order="F")

    def describe(self) -> list[str]:
        lines = []
        for m in self._members.values():
            info = self._zip.getinfo(m.zip_name)
            how = "deflate" if info.compress_type == zipfile.ZIP_DEFLATED else "stored"
            lines.append(
                f"member {shown(m.zip_name)}: {how}, {info.file_size} -> {info.compress_size} bytes"
            )
        return lines

    def close(self) -> None:
        self._zip.close()
        if self._remote is not None:
            self._remote.close()
