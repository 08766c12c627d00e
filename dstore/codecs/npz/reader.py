"""Reading npz archives: rows of each field streamed in batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

import numpy as np

from ...abc import Reader
from ...errors import CodecIOError
from ...model import Column, String, StringList, VarColumn, slice_column
from ...model.schema import Batch, SplitSpec
from ...model.strings import fixed_to_column
from .archive import MAX_OBJECT_BYTES, NpzArchive
from .members import Member, Source, StoredMember
from .options import _COPY_CHUNK, _ZIP_ERRORS

__all__ = ["MAX_OBJECT_BYTES", "NpzReader"]


class NpzReader(NpzArchive, Reader):
    """Batches of an npz archive's fields (:class:`NpzArchive` opens and checks it)."""

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
        self, src: Source, spec: SplitSpec, name: str, start: int, stop: int, rows: int, where: str
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

    def _row_splits(self, src: Source, spec: SplitSpec, name: str, where: str) -> np.ndarray:
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

    def _read_whole(self, m: Member, spec: SplitSpec, name: str) -> np.ndarray:
        count = m.shape[0]
        return next(
            iter(self._member_rows(m, spec, name, 0, count, max(count, 1))),
            np.zeros(m.shape, m.dtype),
        )

    def _member_rows(
        self,
        m: Member,
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
        fp: IO[bytes] | StoredMember | None = (
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

    def _fortran_whole(self, m: Member, spec: SplitSpec, name: str) -> np.ndarray:
        with self._zip.open(m.zip_name) as fp:
            self._seek(fp, m, m.data_offset, spec.name, name)
            count = int(np.prod(m.shape))
            buf = fp.read(count * m.dtype.itemsize)
            if len(buf) != count * m.dtype.itemsize:
                raise CodecIOError(f"{self.path}: key {m.key!r} is truncated")
            self._finish(fp, spec, name)
        return np.frombuffer(buf, m.dtype).reshape(m.shape, order="F")
