"""NumPy ``.npz``: streamed in both directions, numpy only.

Reading parses each member's ``.npy`` header and then reads rows in chunks
from the zip member stream, so memory is bounded by the batch size and every
byte is decompressed once (indexing ``np.load(...)[key][i]`` per record
re-reads the whole member each time: that is what made label-maker's
conversion take hours). Writing puts the ``.npy`` header first and appends
rows; a zip file can only have one member open for writing, so the largest
field of a split is streamed straight into the archive and the others are
spooled to an anonymous temporary file and copied in when the split ends.
Deflate runs on all cores (see :class:`dstore.parallel.ParallelDeflate`).
The schema travels in the zip comment, which ``np.load`` ignores. Nothing is
ever unpickled: object arrays are refused by name.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from .. import fs, names
from ..errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ..parallel import ParallelDeflate
from ..schema import Batch, Schema, SplitSpec, check_dtype, key_for, schema_from_arrays, split_key
from .base import Codec, Reader, Writer

__all__ = ["NpzCodec"]

_COMMENT_PREFIX = b"dstore-schema:"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # reproducible archives
_COPY_CHUNK = 8 * 1024 * 1024
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError)


@dataclass(frozen=True)
class NpzOptions:
    compress: bool = True
    #: zlib level (1 fastest .. 9 smallest); 6 is what ``np.savez_compressed`` uses.
    level: int = 6
    #: threads compressing in parallel; 0 means one per core.
    workers: int = 0

    def validate(self) -> None:
        if not 0 <= self.level <= 9:
            raise ValueError(f"npz: level must be 0..9. Got {self.level} instead.")
        if self.workers < 0:
            raise ValueError(f"npz: workers must be >= 0. Got {self.workers} instead.")


@dataclass
class _Member:
    key: str
    zip_name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data_offset: int


class NpzReader(Reader):
    def __init__(self, path: str) -> None:
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
            self._members = self._read_headers()
            arrays = {m.key: (m.dtype, m.shape) for m in self._members.values()}
            inferred = schema_from_arrays(arrays, path)
            stored = self._stored_schema(inferred)
            self.schema = stored or inferred
            # the member of each field: where dstore put it (escaped names), else the key read
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
            end = zipfile._EndRecData(f)  # private but stable since Python 2; no public equivalent
        if end is None:
            raise CodecIOError(f"{self.path}: not a valid npz (zip) file: no end of central directory")
        declared = end[zipfile._ECD_ENTRIES_TOTAL]
        found = len(self._zip.infolist())
        if declared != found:
            raise CodecIOError(
                f"{self.path}: corrupt zip directory: it declares {declared} members, {found} are readable"
            )

    def _read_headers(self) -> dict[str, _Member]:
        members = {}
        for info in self._zip.infolist():
            if info.is_dir():
                continue
            if not info.filename.endswith(".npy"):
                raise SchemaError(
                    f"{self.path}: member {info.filename!r} is not a .npy array "
                    "(an npz holds only .npy members)"
                )
            key = info.filename[: -len(".npy")]
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
            check_dtype(dtype, f"{self.path}: key {key!r}")
            members[key] = _Member(key, info.filename, dtype, tuple(shape), fortran, offset)
        return members

    def _stored_schema(self, inferred: Schema) -> Schema | None:
        """The schema from the zip comment, if present and consistent with the members."""
        comment = self._zip.comment
        if not comment.startswith(_COMMENT_PREFIX):
            return None
        try:
            stored = Schema.from_json(json.loads(comment[len(_COMMENT_PREFIX) :]))
        except (ValueError, SchemaError):
            return None
        for split in stored.splits.values():
            for spec in split.fields.values():
                m = self._members.get(key_for(split.name, spec))
                if m is None or m.dtype != spec.dtype or m.shape != (split.count, *spec.shape):
                    return None
        if sum(len(s.fields) for s in stored.splits.values()) != len(self._members):
            return None
        return stored

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        split = spec.name
        members = {n: self._members[self._keys[(split, n)]] for n in names}
        if any(m.fortran and len(m.shape) > 1 for m in members.values()):
            # Fortran order stores columns first: rows are not contiguous, so
            # these (rare) members are read whole.
            yield from self._iter_fortran(spec, members, start, stop, rows)
            return
        streams: dict[str, IO[bytes]] = {}
        try:
            for n, m in members.items():
                skip = m.data_offset + start * spec.fields[n].record_bytes
                fp = self._open_stored_at(m, skip, (stop - start) * spec.fields[n].record_bytes) if start else None
                if fp is None:
                    fp = self._zip.open(m.zip_name)
                    self._seek(fp, m, skip, split, n)
                streams[n] = fp
            pos = start
            while pos < stop:
                take = min(rows, stop - pos)
                yield {n: self._read_rows(streams[n], members[n], spec, n, pos, take) for n in names}
                pos += take
            if stop == spec.count:
                for n, fp in streams.items():
                    # Reading past the end makes zipfile check the member's CRC.
                    self._finish(fp, spec, n)
        finally:
            for fp in streams.values():
                fp.close()

    def _open_stored_at(self, m: _Member, offset: int, length: int) -> IO[bytes] | None:
        """A plain file positioned ``offset`` bytes into a stored member, or None.

        zipfile (before 3.12) seeks forward by reading and discarding, so a
        worker reading the last shard of a stored member would read the whole
        member first. The member CRC covers the whole member: a range that does
        not start at record 0 is read without it (reads from 0 keep it)."""
        info = self._zip.getinfo(m.zip_name)
        if info.compress_type != zipfile.ZIP_STORED or offset + length > info.file_size:
            return None
        f = fs.open_binary(self.path)
        try:
            f.seek(info.header_offset)
            local = f.read(30)
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise CodecIOError(f"{self.path}: member {m.zip_name}: bad local header")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
            f.seek(info.header_offset + 30 + name_len + extra_len + offset)
        except BaseException:
            f.close()
            raise
        return f

    def _seek(self, fp: IO[bytes], m: _Member, offset: int, split: str, name: str) -> None:
        try:
            fp.seek(offset)
        except _ZIP_ERRORS as e:
            raise CodecIOError(
                f"{self.path}: split {split!r}, field {name!r} (key {m.key!r}): {e}"
            ) from None

    def _read_rows(
        self, fp: IO[bytes], m: _Member, spec: SplitSpec, name: str, first: int, n: int
    ) -> np.ndarray:
        fspec = spec.fields[name]
        want = n * fspec.record_bytes
        try:
            buf = fp.read(want)
        except _ZIP_ERRORS as e:
            raise CodecIOError(
                f"{self.path}: split {spec.name!r}, field {name!r} (key {m.key!r}), "
                f"records {first}..{first + n - 1}: {e}"
            ) from None
        if len(buf) != want:
            got = len(buf) // max(1, fspec.record_bytes)
            raise CodecIOError(
                f"{self.path}: split {spec.name!r}, field {name!r} (key {m.key!r}) is truncated: "
                f"data ends at record {first + got} of {spec.count}"
            )
        return np.frombuffer(buf, dtype=m.dtype).reshape((n, *fspec.shape))

    def _finish(self, fp: IO[bytes], spec: SplitSpec, name: str) -> None:
        try:
            while fp.read(_COPY_CHUNK):
                pass
        except _ZIP_ERRORS as e:
            raise CodecIOError(f"{self.path}: split {spec.name!r}, field {name!r}: {e}") from None

    def _iter_fortran(
        self, spec: SplitSpec, members: dict[str, _Member], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        whole = {}
        for n, m in members.items():
            with self._zip.open(m.zip_name) as fp:
                self._seek(fp, m, m.data_offset, spec.name, n)
                count = int(np.prod(m.shape))
                buf = fp.read(count * m.dtype.itemsize)
                if len(buf) != count * m.dtype.itemsize:
                    raise CodecIOError(f"{self.path}: key {m.key!r} is truncated")
                self._finish(fp, spec, n)
            whole[n] = np.frombuffer(buf, m.dtype).reshape(m.shape, order="F")
        for pos in range(start, stop, rows):
            yield {n: np.ascontiguousarray(a[pos : min(stop, pos + rows)]) for n, a in whole.items()}

    def describe(self) -> list[str]:
        lines = []
        for m in self._members.values():
            info = self._zip.getinfo(m.zip_name)
            how = "deflate" if info.compress_type == zipfile.ZIP_DEFLATED else "stored"
            lines.append(
                f"member {m.zip_name}: {how}, {info.file_size} -> {info.compress_size} bytes"
            )
        return lines

    def close(self) -> None:
        self._zip.close()
        if self._remote is not None:
            self._remote.close()


class NpzWriter(Writer):
    def __init__(self, path: str, schema: Schema, options: NpzOptions) -> None:
        super().__init__(path, schema)
        self.options = options
        compression = zipfile.ZIP_DEFLATED if options.compress else zipfile.ZIP_STORED
        try:
            self._zip = zipfile.ZipFile(path, "w", compression=compression, allowZip64=True)
        except OSError as e:
            raise CodecIOError(f"{path}: cannot create: {e}") from None
        self._pending = list(schema.splits)  # splits not yet started, in order
        self._current: _SplitWriter | None = None

    def write(self, split: str, batch: Batch) -> None:
        if self._current is None or self._current.spec.name != split:
            self._advance_to(split)
        assert self._current is not None
        self._current.write(batch)

    def _advance_to(self, split: str | None) -> None:
        if self._current is not None:
            self._current.finish()
            self._current = None
        while self._pending:
            name = self._pending.pop(0)
            sw = _SplitWriter(self, self.schema.splits[name])
            if name == split:
                self._current = sw
                return
            sw.finish()  # a split that received no batch: headers only
        if split is not None:
            raise SchemaError(f"split {split!r} is unknown or written out of order")

    def close(self) -> None:
        self._advance_to(None)
        comment = _COMMENT_PREFIX + self.schema.dumps().encode()
        if len(comment) <= 0xFFFF:
            self._zip.comment = comment
        else:
            # without the comment, names are inferred from the keys: escaped ones would come back changed
            changed = [
                f"{split.name}/{name}"
                for split in self.schema.splits.values()
                for name, spec in split.fields.items()
                if split_key(key_for(split.name, spec)) != (split.name, name)
            ]
            if changed:
                raise SchemaError(
                    f"npz: the schema ({len(comment)} bytes) does not fit in the 64 KiB zip comment, and "
                    f"without it the escaped names {changed[:3]} could not be restored; use zarr or HDF5"
                )
        self._zip.close()

    def abort(self) -> None:
        if self._current is not None:
            self._current.abort()
        try:
            self._zip.close()
        except Exception:  # noqa: BLE001 - the output is deleted anyway; keep the first error
            pass

    def _open_member(self, key: str) -> IO[bytes]:
        names.check_relative(self.path, key)  # a member unzip would write outside its folder
        info = zipfile.ZipInfo(key + ".npy", date_time=_FIXED_DATE)
        info.external_attr = 0o644 << 16
        info.compress_type = self._zip.compression
        fp = self._zip.open(info, "w", force_zip64=True)
        if self.options.compress and hasattr(fp, "_compressor"):
            # zipfile's member writer only calls .compress()/.flush() on its
            # compressor: a parallel one yields the same deflate stream format.
            fp._compressor = ParallelDeflate(self.options.level, self.options.workers or None)
        return fp


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": shape,
    }
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, header)
    except ValueError:  # header over 64 KiB
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, header)
    return buf.getvalue()


class _SplitWriter:
    """Writes one split: the biggest field streams into the zip, others spool."""

    def __init__(self, parent: NpzWriter, spec: SplitSpec) -> None:
        self.parent = parent
        self.spec = spec
        self.rows = 0
        self.keys = {n: key_for(spec.name, f) for n, f in spec.fields.items()}
        self.direct = max(spec.fields, key=lambda n: spec.fields[n].record_bytes, default=None)
        self.streams: dict[str, IO[bytes]] = {}
        for n, f in spec.fields.items():
            fp = parent._open_member(self.keys[n]) if n == self.direct else tempfile.TemporaryFile(
                dir=_dirname(parent.path), prefix=".dstore-spool-"
            )
            self.streams[n] = fp
            fp.write(_npy_header(f.dtype, (spec.count, *f.shape)))

    def write(self, batch: Batch) -> None:
        n_rows = len(next(iter(batch.values()))) if batch else 0
        if self.rows + n_rows > self.spec.count:
            raise SchemaError(
                f"split {self.spec.name!r}: more records than the {self.spec.count} announced"
            )
        for name, arr in batch.items():
            self.streams[name].write(np.ascontiguousarray(arr).data)
        self.rows += n_rows

    def finish(self) -> None:
        if self.rows != self.spec.count:
            raise SchemaError(
                f"split {self.spec.name!r}: got {self.rows} records, expected {self.spec.count}"
            )
        if self.direct is not None:
            self.streams[self.direct].close()
        for name, fp in self.streams.items():
            if name == self.direct:
                continue
            fp.seek(0)
            with self.parent._open_member(self.keys[name]) as out:
                shutil.copyfileobj(fp, out, _COPY_CHUNK)
            fp.close()
        self.streams.clear()

    def abort(self) -> None:
        for fp in self.streams.values():
            try:
                fp.close()
            except Exception:  # noqa: BLE001, S110 - cleaning up after the real error
                pass


def _dirname(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


class NpzCodec(Codec):
    """NumPy ``.npz`` archives (compressed by default)."""

    name = "npz"
    extensions = (".npz",)
    Options = NpzOptions

    def open_reader(self, path: str) -> Reader:
        return NpzReader(path)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        return NpzWriter(path, schema, self.options)
