"""How dstore's field kinds sit in HDF5 datasets: strings and lists of strings,
varying-size records as variable-length data or values plus row splits, and the
chunk store that fills fixed-size datasets chunk by chunk."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ...errors import CodecIOError, UnsupportedDtypeError
from ...model import String, StringList, VarColumn
from ...model.schema import FieldSpec
from ...parallel import ordered_map
from .options import HDF5Options, _deflate, _lzf

#: suffix of the dataset holding each record's shape for raw images of varying size
_SHAPES = ".shapes"
#: suffix of the dataset of records + 1 offsets into a list-of-strings field's strings
_ROW_SPLITS = ".row_splits"
_KIND_ATTR = "dstore_kind"


def _are_offsets(ds: Any) -> bool:
    """Can ``ds`` be a ``K.row_splits`` dataset (records + 1 integer offsets)? A foreign
    dataset that merely has the name stays a field of its own."""
    return ds.ndim == 1 and ds.shape[0] >= 1 and ds.dtype.kind in "iu"


class _ListDataset:
    """A list-of-strings field read back: its strings dataset, sliceable by record.

    h5py has no variable-length type of variable-length strings, so such a
    field is two datasets, as TensorFlow's ``RaggedTensor`` is two tensors:
    ``K`` holds every record's strings in order (vlen UTF-8 strings, or vlen
    uint8 for byte strings: h5py users get one ``str``/array per string) and
    ``K.row_splits`` records + 1 offsets into them."""

    def __init__(self, strings: Any, splits: Any, where: str) -> None:
        if splits.ndim != 1 or splits.shape[0] < 1 or splits.dtype.kind not in "iu":
            raise CodecIOError(f"{where}: {_ROW_SPLITS!r} must be records + 1 integer offsets")
        self.strings, self.splits = strings, splits
        self.shape = (splits.shape[0] - 1,)
        self.ndim = 1
        # the two ends, read now (two elements), so that info refuses what convert would
        first, last, total = int(splits[0]), int(splits[-1]), strings.shape[0]
        if first != 0 or last != total:
            raise CodecIOError(
                f"{where}: row splits run from {first} to {last}, not from 0 to {total} "
                "(the number of strings)"
            )

    def __getattr__(self, name: str) -> Any:  # name, attrs, dtype, chunks, compression...
        return getattr(self.strings, name)

    def read(self, start: int, stop: int, where: str) -> VarColumn:
        offsets = np.asarray(self.splits[start : stop + 1], dtype=np.int64)
        lo, hi = int(offsets[0]), int(offsets[-1])
        total = self.strings.shape[0]
        # the first record starts at 0 and the last ends at the last string: strings
        # before or after them would be dropped unread (found by a hostile-input pass)
        ends = (start == 0 and lo != 0) or (stop == self.shape[0] and hi != total)
        if lo < 0 or hi > total or ends or (np.diff(offsets) < 0).any():
            bad = int(np.argmax(np.diff(offsets) < 0)) if (np.diff(offsets) < 0).any() else 0
            if not (np.diff(offsets) < 0).any() and lo == 0 and stop == self.shape[0]:
                bad = stop - 1 - start
            raise CodecIOError(
                f"{where}, record {start + bad}: row splits do not describe the "
                f"{self.strings.shape[0]} strings"
            )
        raw = self.strings[lo:hi] if hi > lo else []
        strings = VarColumn.from_bytes(
            b
            if isinstance(b, bytes)
            else np.asarray(b, np.uint8).tobytes()
            if isinstance(b, np.ndarray)
            else str(b).encode("utf-8")
            for b in raw
        )
        return VarColumn(strings, offsets - lo)


class _VarDataset:
    """Appends VarColumns to a variable-length dataset (h5py takes one object per record).

    It keeps the datasets' names, not the datasets: HDF5 holds about 20 kB for each
    open dataset, and 40,000 one-record fields took 1.1 GB to write (issue 26)."""

    def __init__(self, ds: Any, shapes: Any) -> None:
        self.file = ds.file
        self.name = ds.name
        self.shapes_name = None if shapes is None else shapes.name
        self.pos = 0

    @property
    def ds(self) -> Any:
        return self.file[self.name]

    @property
    def shapes(self) -> Any:
        return None if self.shapes_name is None else self.file[self.shapes_name]

    def write(self, spec: FieldSpec, col: VarColumn) -> None:
        n = len(col)
        if isinstance(col.values, VarColumn):
            self._write_lists(spec, col)
            return
        if isinstance(spec.kind, String):
            if (col.values == 0).any():
                rec = (
                    int(np.searchsorted(col.offsets, int(np.argmax(col.values == 0)), side="right"))
                    - 1
                )
                raise UnsupportedDtypeError(
                    f"hdf5: field {spec.name!r}, record {self.pos + rec}: HDF5 variable-length strings end "
                    "at NUL, and this text holds one; use npz or zarr, or store the field as bytes"
                )
            items = np.array(col.to_str_list(f"field {spec.name!r}"), dtype=object)
        else:
            items = np.empty(n, dtype=object)
            flat = col.values.reshape(len(col.values), -1) if col.values.ndim > 1 else col.values
            for i in range(n):
                items[i] = flat[int(col.offsets[i]) : int(col.offsets[i + 1])].reshape(-1)
        if n:
            _put_vlen(self.ds, self.pos, items)
            if self.shapes is not None and col.shapes is not None:
                self.shapes[self.pos : self.pos + n] = col.shapes
        self.pos += n

    def _write_lists(self, spec: FieldSpec, col: VarColumn) -> None:
        """Appends the records' strings to the strings dataset; row splits count them."""
        strings = col.strings  # write() checked that the column is nested
        values = strings.flat_values
        base = self.ds.shape[0]
        if isinstance(spec.kind, StringList) and spec.kind.text:
            if (values == 0).any():
                at = int(np.argmax(values == 0))
                string = int(np.searchsorted(strings.offsets, at, side="right")) - 1
                rec = int(np.searchsorted(col.offsets, string, side="right")) - 1
                raise UnsupportedDtypeError(
                    f"hdf5: field {spec.name!r}, record {self.pos + rec}: HDF5 variable-length "
                    "strings end at NUL, and this text holds one; use npz or zarr, or a list of bytes"
                )
            items = np.array(strings.to_str_list(f"field {spec.name!r}"), dtype=object)
        else:
            items = np.empty(len(strings), dtype=object)
            for i in range(len(strings)):
                items[i] = values[int(strings.offsets[i]) : int(strings.offsets[i + 1])]
        if len(items):
            self.ds.resize((base + len(items),))
            _put_vlen(self.ds, base, items)
        assert self.shapes is not None  # the row splits
        self.shapes[self.pos + 1 : self.pos + len(col) + 1] = col.offsets[1:] + base
        self.pos += len(col)


def _put_vlen(ds: Any, start: int, items: np.ndarray) -> None:
    """Writes ``items`` (an object array of records) at ``start``. h5py turns an object
    array whose records all have one shape into an (n, k) array it cannot broadcast
    (k = 0 too), so such a run is written record by record."""
    arrays = all(isinstance(x, np.ndarray) for x in items)
    if arrays and len({x.shape for x in items}) == 1:
        for k, x in enumerate(items):
            ds[start + k] = x
    else:
        ds[start : start + len(items)] = items


class _ChunkStore:
    """Writes aligned runs of records to one dense dataset.

    It holds what it needs rather than the writer: a writer reached from its own
    datasets would be a reference cycle, its h5py objects freed only by a later
    garbage collection, on whichever thread runs it; freeing an h5py object takes
    h5py's global lock, so that thread may wait for another's h5py call. It keeps
    the dataset's name, not the open dataset (see :class:`_VarDataset`)."""

    def __init__(
        self, ds: Any, rows: int, options: HDF5Options, pool: ThreadPoolExecutor, workers: int
    ) -> None:
        self.file, self.name = ds.file, ds.name
        self.rows, self.options, self.pool, self.workers = rows, options, pool, workers
        self.direct = ds.chunks is not None and (
            options.compression == "gzip" or (options.compression == "lzf" and _lzf() is not None)
        )

    def __call__(self, pos: int, data: np.ndarray) -> None:
        ds = self.file[self.name]
        if not self.direct:
            ds[pos : pos + len(data)] = data
            return
        # HDF5 compresses chunk by chunk on one core; compress the chunks on
        # all cores here and hand HDF5 the finished bytes (the same filter
        # pipeline: optional shuffle, then deflate or LZF), so plain h5py reads them.
        rows = self.rows
        chunks = (data[i : i + rows] for i in range(0, len(data), rows))
        tail = (0,) * (data.ndim - 1)
        blobs = ordered_map(self._compress, chunks, self.pool, 2 * self.workers)
        for i, (blob, mask) in enumerate(blobs):
            ds.id.write_direct_chunk((pos + i * rows, *tail), blob, filter_mask=mask)

    def _compress(self, chunk: np.ndarray) -> tuple[bytes, int]:
        dtype = chunk.dtype  # the dataset's, byte order included
        if len(chunk) < self.rows:  # HDF5 stores the last chunk at full size
            chunk = np.concatenate(
                [chunk, np.zeros((self.rows - len(chunk), *chunk.shape[1:]), chunk.dtype)]
            )
        raw = np.ascontiguousarray(chunk, dtype=dtype)
        shuffled = self.options.shuffle and raw.dtype.itemsize > 1
        if shuffled:
            raw = raw.view(np.uint8).reshape(-1, raw.dtype.itemsize).T.copy()
        data = raw.reshape(-1).view(np.uint8)  # no copy: the compressors take any buffer
        if self.options.compression == "gzip":
            return _deflate(data, self.options.level), 0
        packed = _lzf().lzf_encode(data)
        if len(packed) < len(data):
            return packed, 0
        # h5py's LZF filter is optional: an incompressible chunk is stored raw,
        # its bit set in the chunk's filter mask (LZF follows shuffle if present).
        return data.tobytes(), 1 << (1 if self.options.shuffle else 0)
