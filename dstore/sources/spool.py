"""The records of a file that cannot be read by range (a stream), spooled to a temporary
file as they are first read, so that the many-file reader can return to them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping

import numpy as np

from ..abc import Reader
from ..model import Column, VarColumn, slice_column
from ..model.schema import Batch, Schema, SplitSpec

#: Where one column of a spooled file is: (offset, bytes, dtype, shape) per array
#: (one for a dense column; values, offsets and shapes of a VarColumn).
_Desc = tuple[bool, list[tuple[int, int, str, tuple[int, ...]]]]


class _Spool:
    """Columns of parsed files in an anonymous temporary file, read back when needed."""

    def __init__(self) -> None:
        self._f = tempfile.TemporaryFile(prefix="dstore-sources-")  # noqa: SIM115 - closed in close()
        self._end = 0

    def _write(self, arr: np.ndarray) -> tuple[int, int, str, tuple[int, ...]]:
        arr = np.ascontiguousarray(arr)
        self._f.seek(self._end)
        self._f.write(arr.data)
        where = (self._end, arr.nbytes, arr.dtype.str, arr.shape)
        self._end += arr.nbytes
        return where

    def put(self, cols: Mapping[str, Column]) -> dict[str, _Desc]:
        out: dict[str, _Desc] = {}
        for name, col in cols.items():
            if isinstance(col, VarColumn):
                # JSON, the only parsed (spooled) format, has no list-of-strings fields
                parts = [col.flat_values, col.offsets]
                parts += [] if col.shapes is None else [col.shapes]
                out[name] = (True, [self._write(a) for a in parts])
            else:
                out[name] = (False, [self._write(col)])
        return out

    def _read(self, where: tuple[int, int, str, tuple[int, ...]]) -> np.ndarray:
        offset, nbytes, dtype, shape = where
        self._f.seek(offset)
        return np.frombuffer(self._f.read(nbytes), dtype).reshape(shape)

    def get(self, desc: _Desc) -> Column:
        var, parts = desc
        arrays = [self._read(w) for w in parts]
        if not var:
            return arrays[0]
        return VarColumn(arrays[0], arrays[1], arrays[2] if len(arrays) > 2 else None)

    def close(self) -> None:
        self._f.close()


class _SpooledFile(Reader):
    """One parsed file's records, back from the spool."""

    def __init__(
        self,
        path: str,
        spool: _Spool,
        descs: dict[str, dict[str, _Desc]],
        counts: dict[str, int],
    ) -> None:
        self.path = path
        self._spool = spool
        self._descs = descs
        self.schema = Schema({s: SplitSpec(s, n, {}) for s, n in counts.items()})

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        cols = {n: self._spool.get(self._descs[spec.name][n]) for n in names}
        for pos in range(start, stop, rows):
            yield {n: slice_column(c, pos, min(stop, pos + rows)) for n, c in cols.items()}
