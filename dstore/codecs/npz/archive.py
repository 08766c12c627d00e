"""An npz archive opened and checked: its directory, member headers, fields and schema."""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Sequence

import numpy as np

from ... import fs
from ...bounded_json import JsonLimitError, load_json
from ...errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ...model import Bytes, Image, Kind, Ragged, String, StringList, Tensor, infer_column
from ...model.keys import key_for, schema_from_fields
from ...model.names import shown
from ...model.schema import MAX_EMPTY_RECORDS, FieldSpec, Schema, SplitSpec, check_dtype
from ...parallel import NPY_HEADER_LOCK
from .members import Member, Source, StoredMembers, first_line, looks_like_ours, stores
from .options import _COMMENT_PREFIX, _COPY_CHUNK, _ROW_SPLITS, _SHAPES, _VALUES, _ZIP_ERRORS
from .safe_pickle import load_object_array

#: Bytes an object member's pickle may inflate to. Such a member (``np.savez`` of
#: a list of arrays) is rebuilt whole in memory, as ``np.load`` does; 1 GiB is far
#: beyond the ragged labels people save this way, and stops a deflate bomb before
#: a byte is inflated. Raise it here for larger object members (or store them as
#: ragged ``K.values`` + ``K.row_splits``, which stream).
MAX_OBJECT_BYTES = 2**30


class NpzArchive(StoredMembers):
    """An npz file's members and the schema they hold, checked when opened."""

    notes: Sequence[str] = ()

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

    def _read_headers(self) -> dict[str, Member]:
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
                with self._zip.open(info) as fp, NPY_HEADER_LOCK:
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
            if any(n < 0 for n in shape):  # numpy's parser takes them; no array has one
                raise CodecIOError(
                    f"{self.path}: key {key!r} ({info.filename}): the .npy header declares "
                    f"shape {tuple(shape)}, with a negative length"
                )
            if len(shape) == 0:
                # np.savez(..., n=np.array(5)) beside the data is common: --drop may
                # leave it out, so it is refused after --drop (in __init__), not here
                self._scalars[key] = info.filename
                continue
            self._check_size(key, info, dtype, tuple(shape), offset)
            members[key] = Member(key, info.filename, dtype, tuple(shape), fortran, offset)
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

    def _group_members(self) -> dict[str, Source]:
        """One source per field: a plain member, or ``K.values`` + ``K.row_splits`` (+ ``K.shapes``)."""
        sources: dict[str, Source] = {}
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

    def _ragged_source(self, base: str, key: str) -> Source | None:
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
        return Source(kind, count, values, splits, shapes)

    def _plain_source(self, key: str, m: Member) -> Source:
        """A member that is a field on its own: strings, bytes, objects or a tensor."""
        where = f"{self.path}: key {key!r}"
        if m.dtype.kind in "US":
            if len(m.shape) != 1:
                raise UnsupportedDtypeError(
                    f"{where}: string arrays need exactly one (record) axis, got {m.shape}"
                )
            return Source(String() if m.dtype.kind == "U" else Bytes(), m.shape[0], m)
        if m.dtype.kind == "O":
            if len(m.shape) != 1:
                raise UnsupportedDtypeError(
                    f"{where}: object arrays need exactly one (record) axis, got {m.shape}"
                )
            kind, col = infer_column(self._load_objects(m), where)
            return Source(kind, len(col), m, column=col)
        return Source(Tensor(m.dtype, m.shape[1:]), m.shape[0], m)

    def _load_objects(self, m: Member) -> list[object]:
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
                "(dstore.codecs.npz.archive.MAX_OBJECT_BYTES)"
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
        if not looks_like_ours(comment):
            return None
        where = f"{self.path}: the dstore schema in the zip comment"
        try:
            if not comment.startswith(_COMMENT_PREFIX):
                raise ValueError(f"it starts {comment[: len(_COMMENT_PREFIX)]!r}")
            stored = Schema.from_json(load_json(comment[len(_COMMENT_PREFIX) :], where))
        except (ValueError, SchemaError, RecursionError, JsonLimitError) as e:
            raise SchemaError(f"{where} is damaged ({first_line(e)})") from None
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
        if not stores(src, spec.kind):
            m = src.main
            raise SchemaError(
                f"{where} says {field} is {spec.kind.describe()}; key {key!r} holds "
                f"{m.dtype} {m.shape}"
            )

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
