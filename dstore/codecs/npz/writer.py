"""Writing npz archives: one streamed ``.npy`` member per field, the schema in the zip comment."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from typing import IO

import numpy as np

from ...abc import Writer
from ...errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ...model import Bytes, Image, Ragged, String, StringList, VarColumn, names
from ...model.keys import key_for, split_key
from ...model.schema import Batch, FieldSpec, Schema, SplitSpec
from ...model.strings import (
    bytes_to_fixed,
    char_counts,
    ends_with_nul,
    utf8_to_fixed_unicode,
)
from ...output import TMP_MARK, check_room
from ...parallel import ParallelDeflate
from .options import (
    _COMMENT_PREFIX,
    _COPY_CHUNK,
    _FIXED_DATE,
    _ROW_SPLITS,
    _SHAPES,
    _VALUES,
    NpzOptions,
)

#: a string or bytes field is a fixed-width ``<U``/``S`` member unless that member would
#: pass 64 MiB and this many times its records' own bytes: then values + row splits
FIXED_WIDTH_WASTE = 8


def _check_space(path: str, schema: Schema) -> None:
    """Refuse before writing when free space or ``ulimit -f`` is below the archive's
    fixed-size data (raw: deflate is not guaranteed to shrink it), as HDF5 does: an
    HDF5 dataset declaring 8 TB of fill values would otherwise fill the disk first."""
    raw = schema.nbytes
    need = raw + raw // 1000 + 64 * 1024 + 1024 * sum(len(s.fields) for s in schema.splits.values())
    folder, base = os.path.split(os.path.abspath(path))
    if base.startswith(".") and TMP_MARK in base:  # the temporary output: name the destination
        path = os.path.join(os.path.dirname(path), base[1 : base.index(TMP_MARK)])
    what = f"the npz archive may need {need:,} bytes ({raw:,} bytes of data; compression is not guaranteed)"
    check_room(path, folder, need, what)


class NpzWriter(Writer):
    def __init__(self, path: str, schema: Schema, options: NpzOptions) -> None:
        super().__init__(path, schema)
        self.options = options
        compression = zipfile.ZIP_DEFLATED if options.compress else zipfile.ZIP_STORED
        if options.check_space and "://" not in path:
            _check_space(path, schema)
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
        with contextlib.suppress(Exception):  # the output is deleted anyway; keep the first error
            self._zip.close()

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


def _spool_file(folder: str) -> IO[bytes]:
    """An anonymous temporary file that lives as long as its split writer (closed by it)."""
    return tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")


class _VarSpool:
    """A field whose records vary, spooled while its split is written.

    Values, lengths and shapes go to anonymous temporary files (memory stays
    bounded); the field becomes members when the split ends, because only
    then is its form known: strings and bytes as one ``<U``/``S`` member
    (``np.load`` reads them without pickle) unless a record ends in NUL,
    which numpy's fixed-width strings would drop; everything else, and such
    strings, as ``K.values`` + ``K.row_splits`` (+ ``K.shapes``)."""

    def __init__(self, folder: str, spec: FieldSpec) -> None:
        self.spec = spec
        # SIM115: the spool files live as long as this field's spool; close() closes them
        self.values = tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")  # noqa: SIM115
        self.lengths = tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")  # noqa: SIM115
        self.shapes = tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")  # noqa: SIM115
        #: lists of strings: values/lengths spool the strings, this each record's list length
        self.list_lengths = tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")  # noqa: SIM115
        self.strings = 0
        self.total = 0  # values (first-axis entries) so far
        self.width = 0  # widest record, in characters (strings) or bytes
        self.nul_end = False
        self.ndim = 0

    def write(self, col: VarColumn) -> None:
        if isinstance(col.values, VarColumn):
            self.list_lengths.write(np.ascontiguousarray(col.lengths, dtype="<i8").data)
            self.strings += len(col.values)
            col = col.values
        self.values.write(np.ascontiguousarray(col.values).data)
        self.lengths.write(np.ascontiguousarray(col.lengths, dtype="<i8").data)
        if col.shapes is not None:
            self.ndim = col.shapes.shape[1]
            self.shapes.write(np.ascontiguousarray(col.shapes, dtype="<i8").data)
        self.total += len(col.values)
        if self._fixed_candidate and len(col):
            widths = char_counts(col) if self._text else col.lengths
            self.width = max(self.width, int(widths.max()))
            self.nul_end = self.nul_end or ends_with_nul(col)

    @property
    def _fixed_candidate(self) -> bool:
        kind = self.spec.kind
        return isinstance(kind, (String, Bytes, StringList)) or (
            isinstance(kind, Image) and kind.encoding != "raw"
        )

    @property
    def _text(self) -> bool:
        kind = self.spec.kind
        return isinstance(kind, String) or (isinstance(kind, StringList) and kind.text)

    def _padding_dominates(self, count: int) -> bool:
        """Would a fixed-width array be mostly padding? Every record takes the widest's
        room (4 bytes a character for text): one 40 MB caption among short ones would
        make three records 480 MB. Beyond :data:`FIXED_WIDTH_WASTE` times the bytes the
        records hold (and 64 MiB), they are values + row splits instead."""
        fixed = count * self._fixed_dtype().itemsize
        return fixed > max(FIXED_WIDTH_WASTE * self.total, 64 << 20)

    def _fixed_dtype(self) -> np.dtype:
        return np.dtype(f"<U{max(self.width, 1)}" if self._text else f"S{max(self.width, 1)}")

    def members(self, count: int) -> list[tuple[str, bytes, Iterator[bytes | memoryview]]]:
        """(suffix, .npy header, data chunks) of the members this field becomes."""
        if isinstance(self.spec.kind, StringList):
            if self.nul_end:
                raise UnsupportedDtypeError(
                    f"field {self.spec.name!r}: a string ends in NUL, which npz's fixed-width "
                    "string arrays drop; lists of such strings cannot be stored in npz"
                )
            return [
                (
                    _VALUES,
                    _npy_header(self._fixed_dtype(), (self.strings,)),
                    self._fixed_chunks(self.strings),
                ),
                (
                    _ROW_SPLITS,
                    _npy_header(np.dtype("<i8"), (count + 1,)),
                    self._split_chunks(self.list_lengths),
                ),
            ]
        if self._fixed_candidate and not self.nul_end and not self._padding_dominates(count):
            return [("", _npy_header(self._fixed_dtype(), (count,)), self._fixed_chunks(count))]
        inner = self.spec.shape if isinstance(self.spec.kind, Ragged) else ()
        out: list[tuple[str, bytes, Iterator[bytes | memoryview]]] = [
            (
                _VALUES,
                _npy_header(self.spec.dtype, (self.total, *inner)),
                _file_chunks(self.values),
            ),
            (
                _ROW_SPLITS,
                _npy_header(np.dtype("<i8"), (count + 1,)),
                self._split_chunks(self.lengths),
            ),
        ]
        if isinstance(self.spec.kind, Image) and self.spec.kind.encoding == "raw":
            out.append(
                (
                    _SHAPES,
                    _npy_header(np.dtype("<i8"), (count, self.ndim)),
                    _file_chunks(self.shapes),
                )
            )
        return out

    def _split_chunks(self, lengths: IO[bytes]) -> Iterator[bytes]:
        yield np.zeros(1, "<i8").tobytes()
        base = 0
        for chunk in _file_chunks(lengths):
            ends = np.cumsum(np.frombuffer(chunk, "<i8")) + base
            if len(ends):
                base = int(ends[-1])
            yield ends.astype("<i8").tobytes()

    def _fixed_chunks(self, count: int) -> Iterator[bytes | memoryview]:
        """The spooled records as fixed-width items, a few thousand records at a time
        (fewer when they are wide: a chunk holds about ``_COPY_CHUNK`` bytes, or one record)."""
        self.lengths.seek(0)
        self.values.seek(0)
        item = max(self.width, 1) * (4 if self._text else 1)
        step = max(1, min(1 << 14, _COPY_CHUNK // item))
        for _ in range(0, count, step):
            lengths = np.frombuffer(self.lengths.read(step * 8), "<i8")
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = np.frombuffer(self.values.read(int(offsets[-1])), np.uint8)
            if not self._text and self.width and (lengths == self.width).all():
                yield values.data  # every item full width: its bytes are the items
                del values
                continue
            col = VarColumn(values, offsets)
            fixed = (
                utf8_to_fixed_unicode(col, self.width)
                if self._text
                else bytes_to_fixed(col, self.width)
            )
            del col, values  # before the next read: one chunk in memory at a time
            yield fixed.data.cast("B")  # no copy: the zip member writes any buffer
            del fixed

    def close(self) -> None:
        for f in (self.values, self.lengths, self.shapes, self.list_lengths):
            f.close()


def _file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    f.seek(0)
    while chunk := f.read(_COPY_CHUNK - _COPY_CHUNK % 8):  # whole int64s for the lengths
        yield chunk


class _SplitWriter:
    """Writes one split: the biggest dense field streams into the zip, the others spool."""

    def __init__(self, parent: NpzWriter, spec: SplitSpec) -> None:
        self.parent = parent
        self.spec = spec
        self.rows = 0
        self.keys = {n: key_for(spec.name, f) for n, f in spec.fields.items()}
        _check_member_names(spec, self.keys)
        dense = [n for n, f in spec.fields.items() if f.dense]
        self.direct = max(dense, key=lambda n: spec.fields[n].record_bytes, default=None)
        self.streams: dict[str, IO[bytes]] = {}
        self.spools: dict[str, _VarSpool] = {}
        folder = _dirname(parent.path)
        for n, f in spec.fields.items():
            if not f.dense:
                self.spools[n] = _VarSpool(folder, f)
                continue
            fp = (
                parent._open_member(self.keys[n])
                if n == self.direct
                # closed by finish() or abort(), after this call returns
                else tempfile.TemporaryFile(dir=folder, prefix=".dstore-spool-")  # noqa: SIM115
            )
            self.streams[n] = fp
            fp.write(_npy_header(f.dtype, (spec.count, *f.shape)))

    def write(self, batch: Batch) -> None:
        n_rows = len(next(iter(batch.values()))) if batch else 0
        if self.rows + n_rows > self.spec.count:
            raise SchemaError(
                f"split {self.spec.name!r}: more records than the {self.spec.count} announced"
            )
        for name, col in batch.items():
            if isinstance(col, VarColumn):
                self.spools[name].write(col)
            else:
                self.streams[name].write(np.ascontiguousarray(col).data)
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
        for name, spool in self.spools.items():
            for suffix, header, chunks in spool.members(self.spec.count):
                with self.parent._open_member(self.keys[name] + suffix) as out:
                    out.write(header)
                    for chunk in chunks:
                        out.write(chunk)
                        del chunk  # not kept while the next chunk is made
            spool.close()
        self.streams.clear()
        self.spools.clear()

    def abort(self) -> None:
        handles: list[IO[bytes] | _VarSpool] = [*self.streams.values(), *self.spools.values()]
        for fp in handles:
            with contextlib.suppress(Exception):  # cleaning up after the real error
                fp.close()


def _check_member_names(spec: SplitSpec, keys: dict[str, str]) -> None:
    """Every member name once: a field ``a.values`` would collide with ragged field ``a``'s values."""
    seen: dict[str, str] = {}
    for name, key in keys.items():
        suffixes = [""] if spec.fields[name].dense else ["", _VALUES, _ROW_SPLITS, _SHAPES]
        for suffix in suffixes:
            other = seen.setdefault(key + suffix, name)
            if other != name:
                raise SchemaError(
                    f"npz: split {spec.name!r}: fields {other!r} and {name!r} would both be stored as "
                    f"member {key + suffix!r}.npy; rename one of them"
                )


def _dirname(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))
