"""HDF5 files through h5py: one group per split, one chunked dataset per field.

Written: chunks along the record axis (about ``chunk_mb`` each), gzip level 4
by default (``lzf`` and ``none`` too), optional byte shuffle; the schema sits
in the root attributes. Read: any HDF5 file; datasets in the root form the
default split (``x_train`` style names map to splits), each group a split.
Datasets dstore cannot carry (strings, compound, references) and datasets
compressed with a filter that is not installed are refused by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from .. import fs
from .._dist import install_hint
from ..errors import (
    CodecIOError,
    DstoreError,
    MissingDependencyError,
    SchemaError,
    UnsafeInputError,
    UnsupportedDtypeError,
)
from ..model import Bytes, Column, Image, Kind, Ragged, String, StringList, Tensor, VarColumn, names
from ..model.attrs import encode, fill_value, for_hdf5, group_attrs, target_notes
from ..model.schema import Batch, FieldSpec, Schema, check_dtype, split_key, stored_paths
from ..output import TMP_MARK, check_room
from ..parallel import default_workers, ordered_map
from ._chunked import (
    AlignedAppender,
    ArrayTreeReader,
    chunk_rows,
    max_chunk_bytes,
    max_fill_bytes,
)
from ._imagecodec import LOSSY_FORMATS, check_quality, image_fields
from ._strings import fixed_to_column
from .base import Codec, Reader, Writer, is_regular_file, read_at

__all__ = ["HDF5Codec"]

_ATTR = "dstore_schema"


def _plugins() -> Any:
    """hdf5plugin registers blosc/zstd/lz4 filters with HDF5 when imported; optional."""
    try:
        import hdf5plugin
    except ImportError:
        return None
    return hdf5plugin


def _lzf() -> Any:
    """imagecodecs' liblzf (the same LZF h5py's filter uses), if installed."""
    try:
        import imagecodecs
    except ImportError:
        return None
    return imagecodecs


def _deflate(data: Any, level: int) -> bytes:
    """A zlib stream of ``data`` at ``level``, as HDF5's deflate filter stores a chunk.

    libdeflate (imagecodecs, when installed) compresses photo tiles at level 4
    about twice as fast as zlib to the same size (0.67 of the raw tiles either
    way); its output depends only on the data, the level and its version, and
    any zlib reads it. Without imagecodecs: zlib."""
    codecs = _lzf()
    if codecs is not None and hasattr(codecs, "deflate_encode"):
        return bytes(codecs.deflate_encode(data, level=level))
    return zlib.compress(data, level)


#: Filter ids of plain HDF5 (deflate, shuffle, fletcher32, szip, nbit, scaleoffset) and h5py's lzf.
_STANDARD_FILTERS = {1, 2, 3, 4, 5, 6, 32000}


@dataclass(frozen=True)
class HDF5Options:
    compression: str = field(
        default="gzip",
        metadata={"help": "gzip, lzf or none; blosc or zstd need hdf5plugin (also to read them)"},
    )
    level: int = field(default=4, metadata={"help": "compression level 0..9 (gzip, blosc, zstd)"})
    shuffle: bool = field(
        default=False, metadata={"help": "byte-shuffle filter before compressing"}
    )
    chunk_mb: float = field(default=1.0, metadata={"help": "target chunk size in MiB"})
    # refuse up front when the destination's free space or the process's file size
    # limit is below an upper bound of the file's size (raw data: compression is not
    # guaranteed); false tries anyway, and a full disk is then reported when it happens
    check_space: bool = field(
        default=True,
        metadata={
            "help": "refuse before writing when free space or ulimit -f is below the file's upper bound"
        },
    )

    image_codec: str = field(
        default="none",
        metadata={
            "help": "lossy image fields: refused (no HDF5 filter plugin for jpeg, webp or jxl "
            "exists in hdf5plugin); use zarr or TFRecord with -o image_codec="
        },
    )
    quality: int = field(default=90, metadata={"help": "quality 1..100 of image_codec"})

    def validate(self) -> None:
        if self.image_codec not in ("none", *LOSSY_FORMATS):
            raise ValueError(
                f"hdf5: image_codec must be none, {', '.join(LOSSY_FORMATS)}. "
                f"Got {self.image_codec!r} instead."
            )
        check_quality(self.quality, "hdf5")
        if self.compression not in ("gzip", "lzf", "none", "blosc", "zstd"):
            raise ValueError(
                f"hdf5: compression must be gzip, lzf, none, blosc or zstd. Got {self.compression!r}."
            )
        if self.compression in ("blosc", "zstd") and _plugins() is None:
            raise MissingDependencyError(f"hdf5 {self.compression}", "hdf5-plugins", "hdf5plugin")
        if not 0 <= self.level <= 9:
            raise ValueError(f"hdf5: level must be 0..9. Got {self.level} instead.")


def _output_name(path: str) -> str:
    """The destination a temporary output stands for (``.out.h5.dstore-tmp-1-ab`` -> ``out.h5``)."""
    folder, base = os.path.split(path)
    if base.startswith(".") and TMP_MARK in base:
        base = base[1 : base.index(TMP_MARK)]
    return os.path.join(folder, base)


def _chunked(spec: FieldSpec, count: int) -> bool:
    return bool(count) and all(spec.shape)


def size_bound(schema: Schema, options: HDF5Options) -> int:
    """An upper bound of the bytes of the HDF5 file dstore writes for ``schema``.

    Raw bytes of every chunk at full size (HDF5 stores edge chunks whole), plus what
    a filter may add to incompressible data (deflate stored blocks: 5 bytes per
    16 kB; blosc/zstd headers), plus the chunk index, object headers and schema."""
    total = 64 * 1024 + 2 * len(json.dumps(schema.to_json()))  # superblock, root, schema attr
    for split in schema.splits.values():
        total += 4096
        for spec in split.fields.values():
            total += 4096 + 2 * len(json.dumps(spec.to_json()))  # object header, attributes
            if not _chunked(spec, split.count):
                continue
            rows = chunk_rows(spec, split.count, int(options.chunk_mb * 1024 * 1024))
            n_chunks = -(-split.count // rows)
            chunk = rows * spec.record_bytes
            total += n_chunks * (chunk + chunk // 1000 + 512)  # + filter growth + index entry
    return total


def _check_space(path: str, need: int, raw: int) -> None:
    """Refuse before writing a byte: HDF5 cannot recover from a failed write (a write
    that fails while HDF5 closes the file leaves the library in a state where the
    process later dies with SIGSEGV/SIGBUS), so a full disk must not happen mid-write."""
    dst = _output_name(path)
    folder = os.path.dirname(os.path.abspath(path))
    what = (
        f"the HDF5 file may need up to {need:,} bytes ({raw:,} bytes of data; "
        "compression is not guaranteed)"
    )
    check_room(dst, folder, need, what)


def _write_error(path: str, e: BaseException) -> CodecIOError:
    """One line for a write HDF5 could not do: h5py's messages span lines and bury the cause."""
    text = str(e)
    code = getattr(e, "errno", None)
    if not isinstance(code, int) or not code:
        found = re.search(r"errno = (\d+)", text)
        code = int(found.group(1)) if found else None
    if code:
        cause = f"{os.strerror(code)} (errno {code})"
    else:
        cause = text.splitlines()[0] if text else type(e).__name__
    return CodecIOError(
        f"{_output_name(path)}: writing the HDF5 file failed: {cause}; nothing was written"
    )


def _set_attrs(obj: Any, encoded: dict[str, Any]) -> None:
    """Restore user attributes (dstore's own schema attribute is never overwritten)."""
    for name, enc in encoded.items():
        if name != _ATTR:
            try:
                obj.attrs[name] = for_hdf5(enc)[0]
            except (
                TypeError,
                ValueError,
                OSError,
            ) as e:  # e.g. text with NUL, which HDF5 cannot hold
                where = f"{_output_name(obj.file.filename)}: {obj.name}"
                raise CodecIOError(
                    f"{where}: attribute {name!r} cannot be stored in HDF5: {e}"
                ) from None


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


def _filters(options: HDF5Options) -> dict[str, Any]:
    """``create_dataset``'s compression arguments for ``options.compression``."""
    if options.compression == "gzip":
        return {"compression": "gzip", "compression_opts": options.level}
    if options.compression == "lzf":
        return {"compression": "lzf"}
    if options.compression == "blosc":
        shuffle = _plugins().Blosc.SHUFFLE if options.shuffle else _plugins().Blosc.NOSHUFFLE
        return dict(_plugins().Blosc(cname="zstd", clevel=options.level, shuffle=shuffle))
    if options.compression == "zstd":
        return dict(_plugins().Zstd(clevel=options.level))
    return {}


class HDF5Writer(Writer):
    def __init__(self, path: str, schema: Schema, options: HDF5Options) -> None:
        super().__init__(path, schema)
        self.options = options
        if options.check_space:
            _check_space(path, size_bound(schema, options), schema.nbytes)
        self._workers = default_workers()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="dstore-h5")
        # No chunk cache: every chunk reaches the file in write(), where a full disk is an
        # exception dstore can report; a cached chunk would be written in close(), and HDF5
        # does not survive a failed write there.
        self.file = h5py.File(path, "w-", rdcc_nbytes=0)
        self._appenders: dict[tuple[str, str], AlignedAppender] = {}
        self._var: dict[tuple[str, str], _VarDataset] = {}
        comp = _filters(options)
        root_attrs, split_attrs = group_attrs(schema.attrs)
        _set_attrs(self.file, root_attrs)
        paths = stored_paths(schema)
        for split in schema.splits.values():
            for spec in split.fields.values():
                # the split's group, or the root for a split read from there (stored_paths)
                where, _, name = paths[(split.name, spec.name)].rpartition("/")
                # require: a nested split (a/b) may have created this group (a) already
                group = self.file.require_group(where) if where else self.file
                if not spec.dense:
                    self._var[(split.name, spec.name)] = self._create_var(
                        group, name, split.count, spec
                    )
                    continue
                self._appenders[(split.name, spec.name)] = self._create_dense(
                    group, name, split.count, spec, comp
                )
            if split.name in split_attrs or not split.fields:
                group = self.file.require_group("/".join(names.split_parts(split.name)))
                _set_attrs(group, split_attrs.get(split.name, {}))

    def _create_dense(
        self, group: Any, name: str, count: int, spec: FieldSpec, comp: dict[str, Any]
    ) -> AlignedAppender:
        """A fixed-shape field as one chunked dataset (compressed with ``comp``) and the
        appender that writes it chunk by chunk."""
        options = self.options
        rows = chunk_rows(spec, count, int(options.chunk_mb * 1024 * 1024))
        chunked = bool(count) and all(spec.shape)
        ds = group.create_dataset(
            name,
            shape=(count, *spec.shape),
            dtype=_enum_or(spec),
            fillvalue=fill_value(spec.attrs, spec.dtype),
            chunks=(rows, *(max(1, d) for d in spec.shape)) if chunked else None,
            shuffle=options.shuffle
            and options.compression in ("gzip", "lzf", "zstd")
            and count > 0
            and all(spec.shape),
            **(comp if chunked else {}),
        )
        _set_attrs(ds, spec.attrs.get("user", {}))
        return AlignedAppender(rows, _ChunkStore(ds, rows, options, self._pool, self._workers))

    def _create_var(self, group: Any, name: str, count: int, spec: FieldSpec) -> _VarDataset:
        """A field whose records vary, as HDF5 variable-length data (one array or string per record).

        Strings are UTF-8 vlen strings; bytes and encoded images vlen uint8
        (vlen *strings* end at the first NUL, vlen arrays keep every byte);
        ragged values vlen arrays of their dtype, each record flattened, the
        inner shape in the dataset's ``dstore_inner_shape`` attribute; raw
        images of varying size vlen pixels plus a ``<name>.shapes`` dataset;
        lists of strings as :class:`_ListDataset` describes.
        HDF5 filters compress only the pointers of vlen data, so none is set."""
        kind = spec.kind
        if isinstance(kind, StringList):
            strings = group.create_dataset(
                name,
                shape=(0,),
                maxshape=(None,),
                chunks=(4096,),
                dtype=h5py.string_dtype("utf-8") if kind.text else h5py.vlen_dtype(np.uint8),
            )
            strings.attrs[_KIND_ATTR] = json.dumps(kind.to_json())
            splits = group.create_dataset(name + _ROW_SPLITS, shape=(count + 1,), dtype="<i8")
            return _VarDataset(strings, splits)
        dtype = (
            h5py.string_dtype("utf-8") if isinstance(kind, String) else h5py.vlen_dtype(spec.dtype)
        )
        chunks = (max(1, min(count, 4096)),) if count else None
        ds = group.create_dataset(name, shape=(count,), dtype=dtype, chunks=chunks)
        shapes = None
        if isinstance(kind, Ragged):
            ds.attrs["dstore_inner_shape"] = list(kind.inner_shape)
        if isinstance(kind, Image) and kind.encoding == "raw":
            ndim = 2 if kind.channels == 0 else 3
            shapes = group.create_dataset(name + _SHAPES, shape=(count, ndim), dtype="<i8")
        return _VarDataset(ds, shapes)

    def write(self, split: str, batch: Batch) -> None:
        try:
            for name, data in batch.items():
                if isinstance(data, VarColumn):
                    self._var[(split, name)].write(self.schema.splits[split].fields[name], data)
                else:
                    self._appenders[(split, name)].append(data)
        except (OSError, RuntimeError) as e:
            raise _write_error(self.path, e) from None

    def close(self) -> None:
        try:
            for appender in self._appenders.values():
                appender.flush()
            self.file.attrs[_ATTR] = json.dumps(self.schema.to_json())
            self.file.flush()
        except (OSError, RuntimeError) as e:
            raise _write_error(self.path, e) from None
        self.file.close()
        self._pool.shutdown()

    def abort(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        with contextlib.suppress(Exception):  # the output is deleted anyway
            self.file.close()


def _is_vlunicode(arr: Any) -> bool:
    """A PyTables ``VLUnicodeAtom`` array: vlen uint32 code points, marked ``PSEUDOATOM``."""
    if not isinstance(arr, h5py.Dataset) or h5py.check_vlen_dtype(arr.dtype) != np.uint32:
        return False
    mark = arr.attrs.get("PSEUDOATOM")
    return (mark.decode() if isinstance(mark, bytes) else str(mark)) == "vlunicode"


def _enum_or(spec: FieldSpec) -> Any:
    """The field's dtype, as the HDF5 enum it was read from when its labels came along
    (``attrs["enum"]``) and it is still an integer field (a cast drops the labels)."""
    labels = spec.attrs.get("enum")
    if isinstance(labels, dict) and labels and spec.dtype.kind in "iu":
        return h5py.enum_dtype({str(k): int(v) for k, v in labels.items()}, basetype=spec.dtype)
    return spec.dtype


def _check_filters(ds: Any, where: str) -> None:
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        fid, _, _, fname = plist.get_filter(i)
        if not h5py.h5z.filter_avail(fid):
            name = fname.decode(errors="replace") if isinstance(fname, bytes) else str(fname)
            raise CodecIOError(
                f"{where}: compressed with HDF5 filter {fid} ({name}), which is not installed "
                f"({install_hint('hdf5-plugins')} may provide it)"
            )


def _check_utf8(col: VarColumn, where: str, start: int) -> None:
    """:meth:`VarColumn.check_utf8` naming the record in the dataset, not in the column
    read from ``start`` (``verify`` re-reads a failing range one record at a time, and
    said "record 0" of every record it pinned)."""
    try:
        col.check_utf8(where)
    except SchemaError as e:
        found = re.match(rf"{re.escape(where)}, record (\d+)", str(e))
        if found is None:
            raise
        rest = str(e)[found.end() :]
        raise SchemaError(f"{where}, record {start + int(found.group(1))}{rest}") from None


def _stage_remote(url: str) -> str:
    """A local copy of a remote HDF5 file, for h5py to open by name.

    h5py could read the fsspec file object itself (ranged GETs), but it holds its
    global lock while it calls a file object, and an fsspec file waits there on
    fsspec's event-loop thread; a garbage collection on that thread which frees an
    h5py object waits for the same lock, and the process hangs (h5py issue 2019).
    Pausing the collector around each read leaves a window (a collection already
    running on that thread), which the test suite hit; a local copy leaves none."""
    fd, local = tempfile.mkstemp(prefix="dstore-h5-", suffix=".h5")
    try:
        with os.fdopen(fd, "wb") as out, fs.open_binary(url) as src:
            shutil.copyfileobj(src, out, fs.READ_BLOCK)
    except BaseException as e:
        os.unlink(local)
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise CodecIOError(f"{url}: could not copy it to local disk for h5py: {e}") from None
        raise
    return local


def _check_field_dataset(member: Any, where: str) -> None:
    """A dataset dstore reads as a field: a supported dtype, a record axis (exactly one
    for strings and vlen data) and filters it can decode."""
    dtype = member.dtype
    if h5py.check_string_dtype(dtype) is not None or h5py.check_vlen_dtype(dtype) is not None:
        if member.ndim != 1:
            raise UnsupportedDtypeError(
                f"{where}: strings or vlen data need exactly one (record) axis"
            )
    elif dtype.kind in "UO":
        raise UnsupportedDtypeError(f"{where}: dtype {dtype} is not supported")
    elif dtype.fields is not None:
        raise UnsupportedDtypeError(f"{where}: compound dtype {dtype} is not supported")
    elif dtype.kind not in "biufcS":
        raise UnsupportedDtypeError(f"{where}: dtype {dtype} is not supported")
    if member.ndim == 0:
        raise UnsupportedDtypeError(f"{where}: scalar dataset has no record axis")
    _check_filters(member, where)


class HDF5Reader(ArrayTreeReader):
    read_errors = (OSError, ValueError, RuntimeError)

    def __init__(self, path: str, follow_links: bool = False) -> None:
        self.path = path
        self.follow_links = follow_links
        _plugins()  # makes blosc/zstd/lz4-compressed datasets readable when installed
        local = None
        try:
            if fs.is_url(path):
                local = _stage_remote(path)
            try:
                self.file = h5py.File(local or path, "r")
            finally:
                if local is not None:
                    os.unlink(local)  # the open file is read until closed; nothing is left behind
        except CodecIOError:
            raise
        except OSError as e:
            if isinstance(e, FileNotFoundError):
                raise CodecIOError(f"{path}: no such file") from None
            raise CodecIOError(f"{path}: not a readable HDF5 file: {e}") from None
        try:
            self.arrays: dict[tuple[str, str], Any] = {}
            self.by_path: dict[str, Any] = {}
            self.groups: dict[str, Any] = {}
            self.notes: list[str] = []
            self._sized: set[str] = set()  # datasets whose declared size was checked
            # per dataset, the last chunk-aligned block read (start record, records)
            self._blocks: dict[str, tuple[int, np.ndarray]] = {}
            # every group reached, by identity (h5py compares the object, not the path)
            self._seen_groups: dict[Any, str] = {self.file.id: "/"}
            try:
                self._walk(self.file, "")
                stored = self.file.attrs.get(_ATTR)
            except DstoreError:
                raise
            except Exception as e:  # noqa: BLE001 - HDF5's C errors arrive as many Python types
                raise CodecIOError(
                    f"{path}: corrupt HDF5 structure: {type(e).__name__}: {e}"
                ) from None
            try:
                parsed = json.loads(stored) if stored is not None else None
            except ValueError:
                raise CodecIOError(
                    f"{path}: dstore's stored schema is unreadable (corrupt?)"
                ) from None
            self.schema = self._build_schema(parsed)
        except BaseException:
            self.close()
            raise

    def _walk(self, group: Any, prefix: str) -> None:
        for name in group:
            key = f"{prefix}{name}"
            member = self._member(group, name, key)
            if isinstance(member, h5py.Dataset):
                self._see_dataset(group, prefix, name, key, member)
            elif isinstance(member, h5py.Group):
                # A group reached twice (a second hard link, a soft link back up)
                # would be walked once per path: 40 groups of two links to the one
                # before are 2**40 paths in a 47 kB file (found by a hostile-input
                # pass; only true cycles ended, as RecursionError)
                first = self._seen_groups.setdefault(member.id, f"/{key}")
                if first != f"/{key}":
                    raise CodecIOError(
                        f"{self.path}: group '/{key}' is group {first!r} again (a second "
                        "link to it); dstore reads each group under one name"
                    )
                self._walk(member, f"{key}/")

    def _see_dataset(self, group: Any, prefix: str, name: str, key: str, member: Any) -> None:
        """A dataset met by :meth:`_walk`: a field, or the record shapes or offsets of one."""
        self._check_storage(member, key)
        where = f"{self.path}: dataset {key!r}"
        if key.endswith(_SHAPES) and key[: -len(_SHAPES)] in self.by_path:
            self.by_path[key] = member  # an image field's record shapes, not a field
            return
        base = key[: -len(_ROW_SPLITS)]
        if (
            key.endswith(_ROW_SPLITS)
            and self._is_strings(self.by_path.get(base))
            and _are_offsets(member)
        ):
            # a list-of-strings field's record offsets: the field is the pair
            lists = _ListDataset(self.by_path[base], member, where)
            self.by_path[base] = lists
            self.by_path[key] = member
            for k, v in list(self.arrays.items()):
                if v is lists.strings:
                    self.arrays[k] = lists
            return
        _check_field_dataset(member, where)
        split, field = split_key(key) if not prefix else (prefix.rstrip("/"), name)
        self.arrays[(split, field)] = member
        self.by_path[key] = member
        if prefix:
            self.groups[split] = group

    def _member(self, group: Any, name: str, key: str) -> Any:
        """``group[name]``, unless that reads another file (an external link, or a soft
        link through one) and ``follow_links`` is off: checked on the link before
        HDF5 opens what it names (DESIGN: never a read outside the input)."""
        try:
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink) and not self.follow_links:
                raise UnsafeInputError(
                    f"{self.path}: '/{key}' is an HDF5 external link to "
                    f"{link.filename!r}, object {link.path!r}: {self._another(link.filename)}"
                )
            member = group[name]
        except (KeyError, OSError) as e:
            raise CodecIOError(f"{self.path}: {key}: unreadable: {e}") from None
        if not self.follow_links and member.file.filename != self.file.filename:
            # a soft link whose path goes through an external link elsewhere in the file
            via = f"a soft link to {link.path!r}" if isinstance(link, h5py.SoftLink) else "a link"
            raise UnsafeInputError(
                f"{self.path}: '/{key}' is {via}, which leads into {member.file.filename!r}: "
                f"{self._another(member.file.filename)}"
            )
        return member

    def _another(self, target: str) -> str:
        """Why a file ``target`` names is refused; a file beside the input is named too
        (never read outside the input: it is still not the file the user named)."""
        if not fs.is_url(self.path):
            folder = os.path.dirname(os.path.abspath(self.path))
            if os.path.dirname(os.path.normpath(os.path.join(folder, target))) == folder:
                return "another file than the input (in its folder, but not the file named)"
        return "another file than the input"

    def _check_storage(self, ds: Any, key: str) -> None:
        """Refuse a dataset whose values are in other files: a virtual dataset's
        sources, raw external storage (``H5Pset_external``). A virtual source that is
        missing would read as fill values and pass ``verify``: refused even with
        ``follow_links``."""
        where = f"{self.path}: dataset '/{key}'"
        external = ds.external
        if external and not self.follow_links:
            raise UnsafeInputError(
                f"{where} keeps its values in the external file {external[0][0]!r}: "
                f"{self._another(os.fsdecode(external[0][0]))}"
            )
        if not ds.is_virtual:
            return
        for source in ds.virtual_sources():
            fname, dname = source.file_name, source.dset_name
            if fname != "." and not self.follow_links:
                raise UnsafeInputError(
                    f"{where} is an HDF5 virtual dataset reading {fname!r}, dataset "
                    f"{dname!r}: {self._another(fname)}"
                )
            self._check_virtual_source(where, fname, dname)

    def _check_virtual_source(self, where: str, fname: str, dname: str) -> None:
        """A virtual dataset's source must exist; HDF5 fills what it cannot find."""
        if fname == ".":
            if dname not in self.file:
                raise UnsafeInputError(
                    f"{where} is an HDF5 virtual dataset whose source dataset {dname!r} is "
                    "not in the file: it would read as fill values",
                    hint=False,
                )
            return
        # HDF5 looks for a relative source beside the virtual dataset's file
        folder = os.path.dirname(os.path.abspath(self.file.filename))
        real = os.path.join(folder, fname)
        found = False
        if os.path.isfile(real):
            try:
                with h5py.File(real, "r") as f:
                    found = dname in f
            except OSError:
                found = False
        if not found:
            raise UnsafeInputError(
                f"{where} is an HDF5 virtual dataset whose source {fname!r}, dataset "
                f"{dname!r}, is missing or unreadable: it would read as fill values",
                hint=False,
            )

    @staticmethod
    def _is_strings(ds: Any) -> bool:
        """Can ``ds`` be a list-of-strings field's strings (dstore's mark, or vlen text)?"""
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 1:
            return False
        if _KIND_ATTR in ds.attrs:
            return True
        info = h5py.check_string_dtype(ds.dtype)
        return info is not None and info.length is None

    def _kind_of(self, arr: Any) -> Kind:
        if isinstance(arr, _ListDataset):
            info = h5py.check_string_dtype(arr.dtype)
            return StringList(info is not None and info.encoding == "utf-8")
        info = h5py.check_string_dtype(arr.dtype)
        if info is not None:
            # UTF-8 text is a string; ASCII-declared or fixed-width data may hold any bytes
            return String() if info.encoding == "utf-8" and info.length is None else Bytes()
        base = h5py.check_vlen_dtype(arr.dtype)
        if base is not None and _is_vlunicode(arr):
            return String()
        if base is not None:
            inner = tuple(int(n) for n in arr.attrs.get("dstore_inner_shape", ()))
            return Ragged(check_dtype(np.dtype(base), f"{self.path}: dataset {arr.name!r}"), inner)
        # the plain dtype: h5py's enum labels ride in the dtype's metadata, which numpy
        # will not save (they are carried in the field's attributes instead)
        return Tensor(np.dtype(arr.dtype.str), tuple(arr.shape[1:]))

    def _stores(self, arr: Any, spec: FieldSpec, count: int) -> bool:
        if spec.dense:
            return super()._stores(arr, spec, count)
        if tuple(arr.shape) != (count,):
            return False
        kind = self._kind_of(arr)
        if isinstance(spec.kind, StringList) or isinstance(kind, StringList):
            return kind == spec.kind
        if isinstance(spec.kind, String):
            return isinstance(kind, String)
        if isinstance(spec.kind, Ragged):
            return kind == spec.kind
        # bytes and images: vlen values of their dtype (raw images also have their shapes)
        if (
            isinstance(spec.kind, Image)
            and spec.kind.encoding == "raw"
            and arr.name + _SHAPES not in self.file
        ):
            return False
        return isinstance(kind, Ragged) and kind.dtype == spec.dtype and kind.inner_shape == ()

    def _companions(self, paths: Any) -> set[str]:
        return {
            p + suffix
            for p in paths
            for suffix in (_SHAPES, _ROW_SPLITS)
            if p + suffix in self.by_path
        }

    def _read_var(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        where = f"{self.path}: dataset {arr.name!r}"
        if isinstance(arr, _ListDataset):
            col = arr.read(start, stop, where)
            col.check(where)
            if isinstance(spec.kind, StringList) and spec.kind.text:
                _check_utf8(col, where, start)
            return col
        info = h5py.check_string_dtype(arr.dtype)
        if info is not None and info.length is not None:  # fixed-width: numpy's NUL rule
            col = fixed_to_column(np.asarray(arr[start:stop]), where)
        elif info is not None:
            raw = arr[start:stop]  # bytes objects: decoding is checked per record below
            col = VarColumn.from_bytes(
                b if isinstance(b, bytes) else str(b).encode("utf-8") for b in raw
            )
        elif _is_vlunicode(arr):  # PyTables text: each record UTF-32 code points
            col = VarColumn.from_bytes(
                np.asarray(r, "<u4").tobytes().decode("utf-32-le").encode("utf-8")
                for r in arr[start:stop]
            )
        else:
            items = arr[start:stop]
            inner = spec.shape if isinstance(spec.kind, Ragged) else ()
            rows = []
            for i, raw_item in enumerate(items):
                item = np.asarray(raw_item, dtype=spec.dtype)
                size = int(np.prod(inner, dtype=np.int64))
                if size and item.size % size:
                    raise CodecIOError(
                        f"{where}, record {start + i}: {item.size} values do not fill records of inner shape {inner}"
                    )
                rows.append(item.reshape(-1, *inner) if inner else item)
            col = VarColumn.from_rows(rows, spec.dtype, inner)
            if isinstance(spec.kind, Image) and spec.kind.encoding == "raw":
                shapes = np.asarray(self.file[arr.name + _SHAPES][start:stop], dtype=np.int64)
                col = VarColumn(col.values, col.offsets, shapes)
                col.check(where)
        if isinstance(spec.kind, String):
            _check_utf8(col, where, start)
        return col

    def _check_size(self, arr: Any) -> None:
        """Refuse, before its first read, a dataset whose declared size the file does not
        back: chunks too large to decode (:data:`~dstore.codecs._chunked.MAX_CHUNK_BYTES`), or more unallocated
        bytes (read as fill values) than :data:`~dstore.codecs._chunked.MAX_FILL_BYTES`. ``info`` still shows it."""
        if arr.name in self._sized or not isinstance(arr, h5py.Dataset):
            return
        where = f"{self.path}: dataset {arr.name!r}"
        itemsize = np.dtype(arr.dtype).itemsize
        declared = int(np.prod(arr.shape, dtype=object)) * itemsize
        if arr.chunks is not None:
            chunk = int(np.prod(arr.chunks, dtype=object)) * itemsize
            if chunk > max_chunk_bytes():
                raise CodecIOError(
                    f"{where}: chunks {arr.chunks} hold {chunk:,} bytes each once decoded, "
                    f"more than the limit of {max_chunk_bytes():,} bytes (set DSTORE_MAX_CHUNK_BYTES "
                    "to raise it)"
                )
            covered = int(arr.id.get_num_chunks()) * chunk
        else:
            covered = int(arr.id.get_storage_size())
        unallocated = declared - covered
        if unallocated > max_fill_bytes():
            raise CodecIOError(
                f"{where}: declares {arr.shape} {arr.dtype} ({declared:,} bytes) but stores "
                f"{arr.id.get_storage_size():,} bytes: {unallocated:,} bytes were never written "
                f"and would read as fill values, more than the limit of {max_fill_bytes():,} "
                f"(set DSTORE_MAX_FILL_BYTES to raise it)"
            )
        self._sized.add(arr.name)

    def _read_dense(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        """Records ``start:stop``, each chunk decoded once per pass: a chunk of more
        records than a batch would be decoded again for every batch (four 400 MB gzip
        chunks were still converting after 150 s), so the last chunk-aligned block read
        is kept and batches are cut from it."""
        rows = int(arr.chunks[0]) if arr.chunks is not None else 0
        if rows <= stop - start:
            return super()._read_column(spec, arr, start, stop)
        parts = []
        pos = start
        while pos < stop:
            lo = (pos // rows) * rows
            held = self._blocks.get(arr.name)
            if held is None or held[0] != lo:
                self._blocks[arr.name] = held = (lo, np.asarray(arr[lo : lo + rows]))
            block = held[1]
            end = min(stop, lo + len(block))
            parts.append(block[pos - lo : end - lo])
            pos = end
        data = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return np.array(data, dtype=spec.dtype)  # a copy: the block is reused

    def _read_column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        self._check_size(arr)
        try:
            if spec.dense:
                dense = self._read_dense(spec, arr, start, stop)
                # h5py's enum dtype carries metadata numpy will not save: the plain dtype
                if isinstance(dense, np.ndarray) and dense.dtype.metadata:
                    return dense.view(spec.dtype)
                return dense
            return self._read_var(spec, arr, start, stop)
        except MemoryError:
            # a MemoryError has no text: name it
            raise CodecIOError(
                f"{self.path}: dataset {arr.name!r}, records {start}..{stop - 1}: out of memory "
                "(MemoryError) while reading them"
            ) from None

    def _field_key(self, arr: Any) -> str | None:
        return arr.name.lstrip("/")

    def _field_attrs(self, arr: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # dstore's own marker of a ragged dataset's inner shape is not a user attribute
        user = self._attr_notes(
            arr.attrs,
            f"{self.path}: dataset {arr.name!r}",
            skip=("dstore_inner_shape", _KIND_ATTR),
        )
        if user:
            out["user"] = user
        # only a fill value someone chose: HDF5's default (zeros) is no information
        try:
            chosen = (
                arr.id.get_create_plist().fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
            )
            fill = np.asarray(arr.fillvalue, arr.dtype)[()] if chosen else None
        except Exception as e:  # noqa: BLE001 - HDF5's C errors arrive as many Python types
            raise CodecIOError(
                f"{self.path}: dataset {arr.name!r}: unreadable fill value: {e}"
            ) from None
        if fill is not None:
            out["fill_value"] = encode(fill)
        # an HDF5 enum's labels: the values are the integers, the labels ride in the
        # schema, and the HDF5 writer makes the enum type again
        labels = h5py.check_enum_dtype(arr.dtype) if isinstance(arr, h5py.Dataset) else None
        if labels:
            out["enum"] = {str(k): int(v) for k, v in labels.items()}
        return out

    def _root_attrs(self) -> dict[str, Any]:
        return self._attr_notes(self.file.attrs, f"{self.path}: root group", skip=(_ATTR,))

    def describe(self) -> list[str]:
        lines = []
        for (split, name), ds in self.arrays.items():
            comp = ds.compression or "none"
            if ds.compression_opts is not None:
                comp += f" {ds.compression_opts}"
            plist = ds.id.get_create_plist()
            plugin = [
                plist.get_filter(i)[3].decode(errors="replace")
                for i in range(plist.get_nfilters())
                if plist.get_filter(i)[0] not in _STANDARD_FILTERS
            ]
            if plugin:
                comp = (
                    f"{', '.join(plugin)} (a plugin filter: other tools need hdf5plugin to read it)"
                )
            lines.append(
                f"{split}/{name}: dataset {ds.name}, chunks {ds.chunks}, {comp}"
                + (", shuffle" if ds.shuffle else "")
            )
        return lines

    def close(self) -> None:
        if getattr(self, "file", None) is not None:
            self.file.close()


_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class HDF5Codec(Codec):
    """HDF5 files via h5py (gzip/lzf compression, chunked along records)."""

    name = "hdf5"
    media_type = "application/x-hdf5"
    extensions = (".h5", ".hdf5", ".he5", ".hdf")
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_empty_rows = False  # a vlen record is its values only
    bfloat16_as = "uint16"  # HDF5 1.14 has no bfloat16 type (h5py writes it as opaque V2)
    Options = HDF5Options

    @classmethod
    def owns(cls, path: str) -> bool:
        """A file with the HDF5 signature at 0, or after a user block (512, 1024, 2048, ... bytes)."""
        if not is_regular_file(path):
            return False
        size = fs.getsize(path)
        offset = 0
        while offset + len(_SIGNATURE) <= size:
            if read_at(path, offset, len(_SIGNATURE)) == _SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
        return False

    def open_reader(self, path: str) -> Reader:
        return HDF5Reader(path, self.follow_links)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        fmt = self.options.image_codec
        if fmt == "none":
            return
        # A lossy HDF5 filter would need a plugin every reader installs; hdf5plugin (the
        # one h5py users have) registers none for these codecs: refuse, naming a way that works.
        plugins = _plugins()
        shipped = ", ".join(sorted(plugins.FILTERS)) if plugins is not None else "not installed"
        where = "hdf5"
        first = next(image_fields(schema), None)
        if first is not None:
            where = f"hdf5: split {first[0]!r}, field {first[1].name!r}"
        raise UnsupportedDtypeError(
            f"{where}: no HDF5 filter plugin for {fmt} exists (hdf5plugin: {shipped}); "
            f"write zarr or TFRecord with -o image_codec={fmt}, "
            "or keep HDF5 lossless"
        )

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)  # before any byte: a raw h5py/zarr error otherwise
        return HDF5Writer(path, schema, self.options)

    def attribute_notes(self, schema: Schema) -> list[str]:
        return target_notes(schema, self.name, for_hdf5)
