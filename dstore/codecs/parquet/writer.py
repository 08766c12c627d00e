"""Records -> Parquet shards: pyarrow's ParquetWriter writing into the shard file.

The shard files, their ``.part`` commits, hashes, the manifest and resume are
the sharded-directory container's (:mod:`dstore.sharding`); this module turns
batches into row groups (:meth:`ParquetShardWriter.write_records`).

A row group ends after ``row_group_rows`` records or once its encoded records
reach ``row_group_mb``, whichever comes first, decided record by record: the
cut depends on the data and options only, never on the batches the engine
hands over, so every run (resumed, on Dask) writes the same bytes. Images are
encoded on all cores in chunks of 16 records; at most one row group's records
(plus the chunks in flight) are held at a time.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ...model import Image, Ragged, VarColumn
from ...model.schema import Batch, FieldSpec, Schema
from ...sharding import ShardedDirectoryWriter, encode_chunks
from .._imagecodec import LossyImage
from .._pixels import image_libraries
from .._png import png_encoder
from ..base import Shard
from .features import (
    PIXEL_ENCODINGS,
    Storage,
    arrow_type,
    choose_storage,
    hf_feature,
    value_dims,
)
from .options import ParquetOptions

__all__ = ["FORMAT_ID", "ParquetShardWriter"]

FORMAT_ID = "dstore-parquet"
_MAX_OFFSET = 2**31 - 1  # Arrow string/binary/list offsets are int32


def _offsets32(offsets: np.ndarray, where: str) -> pa.Buffer:
    if len(offsets) and int(offsets[-1]) > _MAX_OFFSET:
        raise CodecIOError(f"{where}: more than 2 GiB of values in 16 records")
    return pa.py_buffer(np.ascontiguousarray(offsets, np.int32))


def _binary(values: np.ndarray, offsets: np.ndarray, t: pa.DataType, where: str) -> pa.Array:
    data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(t, len(offsets) - 1, [None, _offsets32(offsets, where), data])


def _lists(values: pa.Array, lengths: np.ndarray, t: pa.DataType, where: str) -> pa.Array:
    """``values`` grouped ``lengths[i]`` at a time, as Arrow type ``t`` (list or fixed-size)."""
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(values, type=t)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(
        _primitive(offsets.astype(np.int32), pa.int32()), values, type=t
    )


def _primitive(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """Numbers as an Arrow array over the same memory (bools packed to bits): no copy,
    and no detour through ``pa.array``, which imports pandas to inspect its argument."""
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(t, len(values), [None, data])


def _value_array(spec: FieldSpec, col: Any, t: pa.DataType, where: str) -> pa.Array:
    """Numbers of a Tensor (one ndarray) or Ragged (values + offsets) column, nested."""
    dtype, dims = value_dims(spec)
    ragged = isinstance(col, VarColumn)
    values = np.ascontiguousarray(col.flat_values if ragged else col)
    values = values.astype(values.dtype.newbyteorder("="), copy=False).view(dtype)
    rows = len(col.flat_values) if ragged else len(col)
    types = []
    inner = t.value_type if ragged else t
    for _ in dims:
        types.append(inner)
        inner = inner.value_type
    arr = _primitive(values.reshape(-1), inner)
    for depth in range(len(dims) - 1, -1, -1):  # innermost axis first
        parents = rows * int(np.prod(dims[:depth], dtype=np.int64))
        arr = _lists(arr, np.full(parents, dims[depth], np.int64), types[depth], where)
    if ragged:
        arr = _lists(arr, col.lengths, t, where)
    return arr


class ParquetShardWriter(ShardedDirectoryWriter):
    """Encodes records to Parquet row groups; picklable (options and storages only)."""

    codec_name = "parquet"

    def __init__(self, schema: Schema, options: ParquetOptions, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        self.schema = schema
        self.storages = storages(schema, options)
        self.arrow = {
            split: pa.schema(
                [pa.field(n, arrow_type(spec.fields[n], s)) for n, s in encs.items()],
                metadata={"huggingface": json.dumps(self.hf_info(split, encs))},
            )
            for split, encs in self.storages.items()
            for spec in (schema.splits[split],)
        }
        super().__init__(schema, plan, None)

    def hf_info(self, split: str, encs: dict[str, Storage]) -> dict[str, Any]:
        fields = self.schema.splits[split].fields
        return {"info": {"features": {n: hf_feature(fields[n], s) for n, s in encs.items()}}}

    def current_libraries(self) -> dict[str, str]:
        every = [s for encs in self.storages.values() for s in encs.values()]
        return {
            "pyarrow": pa.__version__,
            **image_libraries((s.lossy or s.encoding for s in every), "fast"),
        }

    # ------------------------------------------------------------ encoding

    @staticmethod
    def png() -> Any:
        """The PNG encoder raw pixels take (fast: UP filter + libdeflate, deterministic)."""
        return png_encoder("fast")

    def _column(self, split: str, name: str, col: Any, png: Any) -> tuple[pa.Array, np.ndarray]:
        """One chunk of a field as an Arrow array, and each record's encoded bytes."""
        spec = self.schema.splits[split].fields[name]
        s = self.storages[split][name]
        t = self.arrow[split].field(name).type
        where = f"parquet: split {split!r}, field {name!r}"
        if s.is_image:
            if s.encoding == "image":
                blobs = col
            else:
                pixels = [col[i] if spec.dense else col.row(i) for i in range(len(col))]
                lossy = s.lossy
                enc = lossy.encode if isinstance(lossy, LossyImage) else png
                blobs = VarColumn.from_bytes(enc(np.ascontiguousarray(p)) for p in pixels)
            data = _binary(blobs.flat_values, blobs.offsets, pa.binary(), where)
            paths = pa.nulls(len(blobs), pa.string())
            return pa.StructArray.from_arrays([data, paths], fields=list(t)), blobs.lengths
        if s.encoding in ("string", "binary"):
            return _binary(col.flat_values, col.offsets, t, where), col.lengths
        if s.encoding == "strings":
            strings = _binary(col.strings.flat_values, col.strings.offsets, t.value_type, where)
            arr = _lists(strings, col.lengths, t, where)
            return arr, np.diff(col.strings.offsets[col.offsets])
        arr = _value_array(spec, col, t, where)
        if s.class_names is not None:
            _check_labels(col, len(s.class_names), where)
        if isinstance(spec.kind, Ragged):
            row = int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
            return arr, col.lengths * row
        return arr, np.full(len(col), spec.record_bytes, np.int64)

    def encode_chunk(
        self, split: str, chunk: Batch, png: Any = None
    ) -> tuple[dict[str, pa.Array], np.ndarray]:
        """A chunk of records as Arrow arrays, with each record's encoded size."""
        png = png or self.png()
        n = len(next(iter(chunk.values())))
        sizes = np.zeros(n, np.int64)
        arrays = {}
        for name in self.storages[split]:
            arrays[name], per_record = self._column(split, name, chunk[name], png)
            sizes += per_record
        return arrays, sizes

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        """Row groups of the shard written by pyarrow into ``out`` (never closed here)."""
        png = self.png()
        codec, level = self.options.arrow_compression()
        schema = self.arrow[shard.split]
        limit = self.options.row_group_mb * 1024 * 1024
        sink = pa.PythonFile(out, mode="w")
        writer = pq.ParquetWriter(
            sink,
            schema,
            compression=codec,
            compression_level=level,
            write_statistics=True,
            store_schema=True,
        )
        group: list[dict[str, pa.Array]] = []
        rows = 0
        size = 0
        encoded = encode_chunks(
            batches,
            lambda _, chunk: self.encode_chunk(shard.split, chunk, png),
            self.options.workers,
            "dstore-parquet",
            ahead=2,
        )
        for arrays, sizes in encoded:
            pos = 0
            while pos < len(sizes):
                # the records of this chunk that still fit the current row group
                room = self.options.row_group_rows - rows
                ends = size + np.cumsum(sizes[pos : pos + room])
                take = min(len(ends), int(np.searchsorted(ends, limit, side="left")) + 1)
                group.append({k: a.slice(pos, take) for k, a in arrays.items()})
                rows += take
                size = int(ends[take - 1])
                pos += take
                if rows == self.options.row_group_rows or size >= limit:
                    writer.write_table(_table(schema, group), row_group_size=rows)
                    yield rows
                    group, rows, size = [], 0, 0
        if rows:
            writer.write_table(_table(schema, group), row_group_size=rows)
            yield rows
        writer.close()

    def manifest_head(self) -> dict[str, Any]:
        fields = {
            split: {name: s.to_json() for name, s in encs.items()}
            for split, encs in self.storages.items()
        }
        return self.standard_head(FORMAT_ID, self.options, fields)


def _table(schema: pa.Schema, group: list[dict[str, pa.Array]]) -> pa.Table:
    return pa.table(
        {f.name: pa.chunked_array([g[f.name] for g in group], f.type) for f in schema},
        schema=schema,
    )


def _check_labels(col: np.ndarray, classes: int, where: str) -> None:
    bad = np.flatnonzero((col < -1) | (col >= classes))
    if len(bad):
        raise CodecIOError(
            f"{where}: label {col[bad[0]]} is not a class "
            f"(-1 or 0..{classes - 1} for {classes} class_names)"
        )


def label_field(schema: Schema, options: ParquetOptions) -> str | None:
    """The field ``class_names`` describes: ``label_field``, else the only integer scalar."""
    if options.class_names is None:
        return None
    if options.label_field is not None:
        return options.label_field
    found = {
        name
        for split in schema.splits.values()
        for name, spec in split.fields.items()
        if spec.dense
        and spec.shape == ()
        and spec.dtype.kind in "iu"
        and not isinstance(spec.kind, Image)
    }
    if len(found) != 1:
        raise CodecIOError(
            "parquet: class_names needs one integer scalar label field; "
            f"found {sorted(found) or 'none'}: name it with -o label_field=..."
        )
    return found.pop()


def storages(schema: Schema, options: ParquetOptions) -> dict[str, dict[str, Storage]]:
    """Every field's storage, per split."""
    images = None if options.images is None else set(options.images)
    label = label_field(schema, options)
    return {
        split.name: {
            name: choose_storage(
                spec, images, options.lossy(), options.class_names if name == label else None
            )
            for name, spec in split.fields.items()
        }
        for split in schema.splits.values()
    }


def check_storages(schema: Schema, options: ParquetOptions) -> None:
    """Refuse, before a byte is written, fields the options cannot store as asked."""
    from .._imagecodec import record_channels

    chosen = storages(schema, options)
    for split in schema.splits.values():
        where = f"parquet: split {split.name!r}"
        if options.images is not None and (unknown := set(options.images) - set(split.fields)):
            raise SchemaError(f"{where}: images= names unknown field(s) {sorted(unknown)}")
        label = label_field(schema, options)
        if label is not None and label in split.fields:
            spec = split.fields[label]
            if not (spec.dense and spec.shape == () and spec.dtype.kind in "iu"):
                raise SchemaError(
                    f"{where}, field {label!r}: class_names needs an integer scalar field, "
                    f"not {spec.kind.describe()}"
                )
        for name, s in chosen[split.name].items():
            spec = split.fields[name]
            if s.encoding not in PIXEL_ENCODINGS:
                continue
            kind = spec.kind
            channels = kind.channels if isinstance(kind, Image) else record_channels(spec.shape)
            if spec.dtype.kind != "u" or spec.dtype.itemsize > 2 or channels not in (0, 1, 2, 3, 4):
                raise UnsupportedDtypeError(
                    f"{where}, field {name!r}: {kind.describe()} is not an image "
                    "((H, W) or (H, W, 1..4) of uint8/uint16); leave it out of -o images=..."
                )
            if (lossy := s.lossy) is not None:
                lossy.check_field(spec, where)
